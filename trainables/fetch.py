"""Bring the paper profile's data onto a fresh machine: ``python -m trainables.fetch paper``.

What can be downloaded freely comes from where the official scripts take it, all of it hosted on
the Hugging Face hub: Wiki1M (SimCSE's ``data/download_wiki.sh``), SentEval's data with the STS
and the seven transfer tasks (SimCSE's ``SentEval/data/downstream/download_dataset.sh``, the
tasks SentEval's ``get_transfer_data.bash`` prepares, already processed), the students, the DALR
text teachers and CLIP. Files land in ``$MMEMB_DATA`` (default ``./data``) as the paper profile
names them (``trainables/config/profiles.py``); the students and CLIP in the Hugging Face cache, in its
own layout (``models--org--name/{blobs,snapshots,refs}``), so ``from_pretrained(name)`` finds
them offline.

Every file is checked by size and hash: the SHA-256 the hub publishes for LFS files (the weights,
the corpora), the git blob id it publishes for the others, and for files unpacked from an archive
(SentEval) a SHA-256 recorded at the first verified unpacking. ``$MMEMB_DATA/.fetch/manifest.json``
keeps what was verified, so a second run checks the files on disk and touches no network. A
download interrupted (a dropped connection, Ctrl-C) leaves a ``.part`` file that the next run
continues with an HTTP Range request. What cannot be scripted (Flickr30k and COCO images, MCSE's
and KDMCSE's feature files on Google Drive, RankCSE) gets one instruction each: where to get it,
where to put it, and the command that turns it into the feature store.

We download with the standard library rather than ``huggingface_hub.hf_hub_download`` because
the latter deletes its partial file on failure (no resume across runs) and does not check the
SHA-256 it is given; the hub's API still lists the files and their hashes (``HfApi.repo_info``).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import http.client
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

ENDPOINT = "https://huggingface.co"
MANIFEST = Path(".fetch") / "manifest.json"
CHUNK = 1 << 20
RETRIES = 3  # a dropped connection resumes this many times in one run before giving up

# The files a model folder needs: configuration, tokenizer, one set of weights (safetensors when
# the repository has them, else the PyTorch pickle); other frameworks' weights are left out.
MODEL_FILES = ("*.json", "*.txt", "*.model")
WEIGHTS = (("model.safetensors", "model-*-of-*.safetensors"),
           ("pytorch_model.bin", "pytorch_model-*-of-*.bin"))


class FetchError(Exception):
    """One line naming what failed and what to do."""


@dataclass(frozen=True)
class Item:
    """Something the paper profile reads, fetched from one hub repository."""

    name: str
    what: str
    repo: str
    repo_type: str = "model"  # or "dataset"
    revision: str = "main"
    files: tuple[str, ...] = ()
    """dataset items: the paths to fetch; models: empty (the model files, ``MODEL_FILES``)"""
    folder: str | None = None
    """where under $MMEMB_DATA it lands; None: the Hugging Face cache, as ``cache_name``"""
    cache_name: str | None = None
    link: str | None = None
    """a folder under $MMEMB_DATA made a link to the cached snapshot (CLIP as a DALR teacher)"""
    approx: str = ""
    unpack: str | None = None
    """a tar archive among ``files`` that is unpacked into ``folder`` and then removed"""


@dataclass(frozen=True)
class Manual:
    """Something that cannot be fetched by a script, and how to bring it."""

    name: str
    what: str
    where: str
    put: str
    command: str = ""


SIMCSE_DATA = "princeton-nlp/datasets-for-simcse"
SIMCSE_DATA_REV = "e145e8bb659b2aa2669f32ef79cb4cdef6c58fef"  # 'update senteval data', Sep 2021

PAPER: tuple[Item, ...] = (
    Item("wiki1m", "Wiki1M, the text corpus (SimCSE data/download_wiki.sh)", SIMCSE_DATA,
         "dataset", SIMCSE_DATA_REV, ("wiki1m_for_simcse.txt",), folder=".", approx="120 MB"),
    Item("senteval", "SentEval: STS12-16, STS-B, SICK and the seven transfer tasks "
         "(SimCSE SentEval/data/downstream/download_dataset.sh)", SIMCSE_DATA, "dataset",
         SIMCSE_DATA_REV, ("senteval.tar",), folder="senteval/downstream", approx="90 MB",
         unpack="senteval.tar"),
    Item("bert-base-uncased", "the BERT-base student", "google-bert/bert-base-uncased",
         cache_name="bert-base-uncased", approx="440 MB"),
    Item("roberta-base", "the RoBERTa-base student (the RoBERTa grids)", "FacebookAI/roberta-base",
         cache_name="roberta-base", approx="500 MB"),
    Item("simcse", "DALR's SimCSE text teacher", "princeton-nlp/unsup-simcse-bert-base-uncased",
         folder="teachers/unsup-simcse-bert-base-uncased", approx="440 MB"),
    Item("diffcse", "DALR's DiffCSE text teacher", "voidism/diffcse-bert-base-uncased-sts",
         folder="teachers/DiffCSE-bert-base-uncased", approx="440 MB"),
    Item("clip", "CLIP ViT-L/14 (trainables.extract; DALR's CLIP text teacher)",
         "openai/clip-vit-large-patch14", cache_name="openai/clip-vit-large-patch14",
         link="teachers/clip-vit-large-patch14", approx="1.7 GB"),
)

SENTEVAL_TASKS = ("STS/STS12-en-test", "STS/STS13-en-test", "STS/STS14-en-test",
                  "STS/STS15-en-test", "STS/STS16-en-test", "STS/STSBenchmark", "SICK", "MR",
                  "CR", "SUBJ", "MPQA", "SST/binary", "TREC", "MRPC")
"""the folders the STS and transfer evaluations read (trainables/evaluation/sts.py, transfer.py)"""

D = "$MMEMB_DATA"
MANUAL: tuple[Manual, ...] = (
    Manual("flickr30k-clip", "Flickr30k captions + CLIP ViT-L/14 features (data.pairs)",
           "KDMCSE's flickr30k_ViT_L14.json, linked from its README "
           "(github.com/duyngtr16061999/KDMCSE; Google Drive, no scripted download)",
           f"{D}/flickr30k_ViT_L14.json",
           f"python -m trainables.convert clip-json --json {D}/flickr30k_ViT_L14.json "
           f"--out {D}/flickr30k_clip_vitl14.parquet"),
    Manual("flickr30k-images", "or: the same store from the Flickr30k images",
           "the Flickr30k images and captions, on request from "
           "shannon.cs.illinois.edu/DenotationGraph (their terms forbid redistribution)",
           f"{D}/flickr30k-images/ and {D}/flickr30k_captions.csv (columns image,caption)",
           f"python -m trainables.extract --pairs {D}/flickr30k_captions.csv --images "
           f"{D}/flickr30k-images --model openai/clip-vit-large-patch14 "
           f"--out {D}/flickr30k_clip_vitl14.parquet"),
    Manual("coco-clip", "COCO captions + CLIP features (the wiki+coco grids)",
           "the COCO 2014 train images (cocodataset.org) and their captions",
           f"{D}/coco-images/ and {D}/coco_captions.csv (columns image,caption)",
           f"python -m trainables.extract --pairs {D}/coco_captions.csv --images {D}/coco-images "
           f"--model openai/clip-vit-large-patch14 --out {D}/coco_clip_vitl14.parquet"),
    Manual("mcse-resnet", "MCSE's own Flickr30k ResNet features (optional, MCSE's setting)",
           "flickr_random_captions.txt and flickr_resnet.hdf5, linked from MCSE's README "
           "(github.com/uds-lsv/MCSE; Google Drive, no scripted download)",
           f"{D}/flickr_random_captions.txt and {D}/flickr_resnet.hdf5",
           f"python -m trainables.convert mcse --captions {D}/flickr_random_captions.txt "
           f"--features {D}/flickr_resnet.hdf5 --out {D}/flickr_resnet.parquet"),
    Manual("rankcse", "RankCSE text teacher (dalr_table9 only)",
           "the RankCSE-listmle BERT-base checkpoint from RankCSE's authors "
           "(github.com/perceptiveshawty/RankCSE)",
           f"{D}/teachers/RankCSE-listmle-bert-base-uncased/ (config.json, weights, tokenizer)"),
)

TARGETS = {"paper": (PAPER, MANUAL)}


# --- where things are -----------------------------------------------------------------------------
def data_root(given: str | None = None) -> Path:
    return Path(given or os.environ.get("MMEMB_DATA") or "data").expanduser().resolve()


def hub_cache() -> Path:
    """The Hugging Face cache transformers reads (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ...)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or ENDPOINT).rstrip("/")


def _cache_repo(item: Item) -> Path:
    return hub_cache() / f"{item.repo_type}s--{item.cache_name.replace('/', '--')}"


@dataclass
class Manifest:
    """What was verified: per file its size and hash; per item its commit and files."""

    path: Path
    files: dict[str, dict] = field(default_factory=dict)
    items: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path) -> Manifest:
        path = root / MANIFEST
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except ValueError as err:
            raise FetchError(f"{path} is not valid JSON ({err}); delete it and run again "
                             "(every file is then checked against the hub again)") from None
        return cls(path, raw.get("files", {}), raw.get("items", {}))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"files": self.files, "items": self.items}, indent=1,
                                  sort_keys=True) + "\n")
        os.replace(tmp, self.path)


# --- hashing and checking -------------------------------------------------------------------------
def file_hash(path: Path, kind: str) -> str:
    """``sha256`` of the bytes, or ``git`` (the blob id the hub lists for files outside LFS)."""
    h = hashlib.sha256() if kind == "sha256" else hashlib.sha1()
    if kind == "git":
        h.update(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check(path: Path, entry: dict) -> str | None:
    """None when ``path`` has the entry's size and hash, else what is wrong."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != entry["size"]:
        return f"{size} bytes, expected {entry['size']}"
    kind = "sha256" if "sha256" in entry else "git"
    if file_hash(path, kind) != entry[kind]:
        return f"{kind} differs from {entry[kind][:12]}..."
    return None


# --- the hub --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Remote:
    path: str
    size: int
    kind: str  # "sha256" (LFS) or "git"
    digest: str
    url: str

    def entry(self, commit: str) -> dict:
        return {"size": self.size, self.kind: self.digest, "source": self.url, "commit": commit}


def listing(item: Item) -> tuple[str, list[Remote]]:
    """The commit ``item.revision`` points at and the files to fetch, with their published
    sizes and hashes (``HfApi.repo_info(files_metadata=True)``)."""
    from huggingface_hub import HfApi, constants, hf_hub_url

    base = endpoint()
    if constants.is_offline_mode():
        raise FetchError("HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set and the fetch needs the "
                         "hub: run HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 python -m "
                         "trainables.fetch paper")
    try:
        info = HfApi(endpoint=base).repo_info(item.repo, revision=item.revision,
                                              repo_type=item.repo_type, files_metadata=True)
    except Exception as err:  # noqa: BLE001 - the hub's errors are many; one line names it
        raise FetchError(f"{item.name}: cannot list {item.repo}@{item.revision} on {base} "
                         f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                         "check the connection (or $HF_ENDPOINT) and run again") from None
    siblings = {s.rfilename: s for s in info.siblings or ()}
    if item.files:
        missing = [f for f in item.files if f not in siblings]
        if missing:
            raise FetchError(f"{item.name}: {item.repo}@{item.revision} has no {missing}")
        names = list(item.files)
    else:
        top = [n for n in siblings if "/" not in n]
        names = [n for n in top if any(fnmatch.fnmatch(n, p) for p in MODEL_FILES)]
        for patterns in WEIGHTS:
            weights = [n for n in top if any(fnmatch.fnmatch(n, p) for p in patterns)]
            if weights:
                names += weights
                break
        else:
            raise FetchError(f"{item.name}: {item.repo} has no model.safetensors or "
                             "pytorch_model.bin at its top level")
    remotes = []
    for n in names:
        s = siblings[n]
        if s.size is None:
            raise FetchError(f"{item.name}: the hub listed no size for {n}; run again")
        kind, digest = ("sha256", s.lfs.sha256) if s.lfs else ("git", s.blob_id)
        url = hf_hub_url(item.repo, n, repo_type=item.repo_type, revision=info.sha, endpoint=base)
        remotes.append(Remote(n, s.size, kind, digest, url))
    return info.sha, remotes


def download(remote: Remote, dest: Path, label: str, progress: bool = True) -> None:
    """``remote.url`` -> ``dest``, continuing ``dest.part`` with a Range request, checked by
    size and hash before it takes its name; a corrupt download is deleted and refused."""
    from tqdm.auto import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if have > remote.size:
        part.unlink()
        have = 0
    free = shutil.disk_usage(dest.parent).free
    if free < remote.size - have:
        raise FetchError(f"{label}: {_size(remote.size - have)} to download but {dest.parent} has "
                         f"{_size(free)} free; free some space (or point MMEMB_DATA / "
                         "HF_HUB_CACHE at a larger disk) and run again")
    bar = tqdm(total=remote.size, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
               desc=label, disable=not progress, leave=False)
    tries, reason = 0, ""
    try:
        while have < remote.size:
            headers = {"User-Agent": "mmemb-fetch"}
            if have:
                headers["Range"] = f"bytes={have}-"
            before = have
            try:
                with urllib.request.urlopen(urllib.request.Request(remote.url, headers=headers),
                                            timeout=60) as resp:
                    if have and resp.status != 206:  # the server ignored the range: start over
                        bar.update(-have)
                        have = 0
                    with part.open("ab" if have else "wb") as out:
                        while chunk := resp.read(CHUNK):
                            out.write(chunk)
                            have += len(chunk)
                            bar.update(len(chunk))
                if have < remote.size:
                    reason = "the server closed the connection early"
            except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
                reason = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            if have < remote.size:
                tries = 0 if have > before else tries + 1  # progress resets the count
                if tries >= RETRIES:
                    raise FetchError(
                        f"{label}: the download stopped at {have} of {remote.size} bytes "
                        f"({reason}); run the same command again to resume from there")
                time.sleep(0.2 * tries)
    finally:
        bar.close()
    problem = check(part, {"size": remote.size, remote.kind: remote.digest})
    if problem:
        part.unlink()
        raise FetchError(f"{label}: the downloaded file fails its check ({problem}; the hub "
                         f"publishes {remote.kind} {remote.digest}); it was deleted, nothing "
                         "was kept; run again, and if it fails again the source has changed")
    os.replace(part, dest)


# --- fetching one item ----------------------------------------------------------------------------
def _targets(item: Item, root: Path, commit: str, remotes: Iterable[Remote]
             ) -> list[tuple[Remote, str, Path, Path]]:
    """(remote, manifest key, where the file is read, where its bytes are stored)."""
    out = []
    for r in remotes:
        if item.cache_name:
            repo = _cache_repo(item)
            etag = r.digest
            out.append((r, f"hf:{item.cache_name}/{r.path}",
                        repo / "snapshots" / commit / r.path, repo / "blobs" / etag))
        else:
            where = root / MANIFEST.parent / r.path if item.unpack == r.path else root / item.folder / r.path
            out.append((r, f"{item.name}:{r.path}", where, where))
    return out


def _recorded(item: Item, root: Path, man: Manifest, verify: bool) -> str | None:
    """The item's verified state from the manifest: None when it is complete on disk, else why
    not (``verify``: hash every file; else sizes only, for the dry run)."""
    rec = man.items.get(item.name)
    if not rec or rec.get("repo") != item.repo:
        return "not fetched"
    for key in rec["files"]:
        entry = man.files.get(key)
        if entry is None:
            return f"{key} is not in the manifest"
        path = _path_of(item, root, key, rec["commit"])
        if not path.is_file():
            return f"{path} is missing"
        problem = check(path, entry) if verify else (
            None if path.stat().st_size == entry["size"] else "size differs")
        if problem:
            return f"{path}: {problem}"
    if item.link and not (root / item.link / "config.json").is_file():
        return f"{root / item.link} is missing"
    return None


def _path_of(item: Item, root: Path, key: str, commit: str) -> Path:
    rel = key.split(":", 1)[1]
    if item.cache_name:
        return _cache_repo(item) / "snapshots" / commit / rel[len(item.cache_name) + 1:]
    return root / item.folder / rel


def fetch_item(item: Item, root: Path, man: Manifest, say: Callable[[str], None],
               progress: bool = True) -> str:
    """Fetch ``item`` unless the manifest shows it complete; -> 'checked' or 'fetched'."""
    if _recorded(item, root, man, verify=True) is None:
        return "checked"
    commit, remotes = listing(item)
    fetched = 0
    keys = []
    for r, key, read_at, stored_at in _targets(item, root, commit, remotes):
        entry = r.entry(commit)
        if check(stored_at, entry) is not None:
            download(r, stored_at, f"{item.name} {r.path}", progress)
            fetched += 1
        if item.cache_name:
            _link_snapshot(read_at, stored_at)
        if item.unpack == r.path:
            keys += _unpack(item, root, stored_at, commit, man, say)
            stored_at.unlink()
            continue
        man.files[key] = entry
        keys.append(key)
    if item.cache_name:
        ref = _cache_repo(item) / "refs" / item.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
        if item.link:
            link = root / item.link
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink() if link.is_symlink() else shutil.rmtree(link)
            link.symlink_to(_cache_repo(item) / "snapshots" / commit, target_is_directory=True)
    man.items[item.name] = {"repo": item.repo, "commit": commit, "files": keys}
    man.save()
    return "fetched" if fetched else "checked"


def _link_snapshot(snapshot: Path, blob: Path) -> None:
    """The cache's layout: ``snapshots/<commit>/<file>`` is a relative link to ``blobs/<etag>``."""
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    target = Path(os.path.relpath(blob, snapshot.parent))
    if snapshot.is_symlink() and Path(os.readlink(snapshot)) == target:
        return
    if snapshot.is_symlink() or snapshot.exists():
        snapshot.unlink()
    snapshot.symlink_to(target)


def _unpack(item: Item, root: Path, archive: Path, commit: str, man: Manifest,
            say: Callable[[str], None]) -> list[str]:
    """Unpack ``archive`` (checked by its published hash) into ``root/item.folder``; record each
    file's SHA-256 so later runs check the unpacked files themselves."""
    dest = root / item.folder
    work = Path(tempfile.mkdtemp(prefix=".unpack-", dir=archive.parent))
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name)
                if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                    raise FetchError(f"{item.name}: {archive.name} holds an unsafe entry "
                                     f"{member.name!r}; not unpacked")
            tar.extractall(work)  # noqa: S202 - every entry checked above
        base = next((d for d in [work, *sorted(work.rglob("*"))]
                     if d.is_dir() and (d / "STS").is_dir()), None)
        if base is None:
            raise FetchError(f"{item.name}: {archive.name} has no folder holding STS/")
        missing = [t for t in SENTEVAL_TASKS if not (base / t).is_dir()]
        if any(t.startswith(("STS", "SICK")) for t in missing):
            raise FetchError(f"{item.name}: {archive.name} lacks {', '.join(missing)}")
        if missing:  # the STS evaluation can run; the transfer tasks (TR) cannot
            say(f"  {item.name}: {archive.name} has no {', '.join(missing)}: the transfer tasks "
                "need them; SentEval's data/downstream/get_transfer_data.bash makes them, into "
                f"{dest}")
        dest.mkdir(parents=True, exist_ok=True)
        for entry in sorted(base.iterdir()):
            there = dest / entry.name
            if there.is_dir() and not there.is_symlink():
                shutil.rmtree(there)
            elif there.exists() or there.is_symlink():
                there.unlink()
            os.replace(entry, there)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    keys = []
    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
        rel = path.relative_to(dest).as_posix()
        key = f"{item.name}:{rel}"
        man.files[key] = {"size": path.stat().st_size, "sha256": file_hash(path, "sha256"),
                          "source": f"{item.unpack} from {item.repo}@{commit}", "commit": commit}
        keys.append(key)
    return keys


# --- the command ----------------------------------------------------------------------------------
def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def dry_run(items: tuple[Item, ...], manual: tuple[Manual, ...], root: Path, man: Manifest,
            say: Callable[[str], None]) -> None:
    """Every file with its size, checksum and source, from the manifest and the catalogue; no
    network."""
    base = endpoint()
    for item in items:
        where = (f"Hugging Face cache ({_cache_repo(item)})" if item.cache_name
                 else str(root / item.folder))
        state = _recorded(item, root, man, verify=False)
        say(f"{item.name}: {item.what} -> {where} [{'present' if state is None else 'to fetch'}]")
        rec = man.items.get(item.name)
        if rec and rec.get("repo") == item.repo:
            for key in rec["files"]:
                e = man.files.get(key, {})
                kind = "sha256" if "sha256" in e else "git"
                say(f"  {key.split(':', 1)[1]}  {_size(e.get('size', 0))}  {kind} "
                    f"{e.get(kind, '?')}  {e.get('source', '?')}")
            continue
        from huggingface_hub import hf_hub_url

        names = item.files or ("config.json, tokenizer files, model.safetensors "
                               "(else pytorch_model.bin)",)
        for name in names:
            url = (hf_hub_url(item.repo, name, repo_type=item.repo_type, revision=item.revision,
                              endpoint=base) if item.files
                   else f"{base}/{item.repo} @ {item.revision}")
            check = ("sha256: the hub's published LFS hash" if item.files else
                     "sha256 (weights) or git blob id (small files), as the hub publishes them")
            say(f"  {name}  about {item.approx}  {check}, checked at download  {url}")
    _say_manual(manual, say)


def _say_manual(manual: tuple[Manual, ...], say: Callable[[str], None]) -> None:
    if not manual:
        return
    say("by hand (no scripted download allowed):")
    for m in manual:
        then = f"; then: {m.command}" if m.command else ""
        say(f"  {m.name}: {m.what}: get {m.where}; put it at {m.put}{then}")


def parser() -> argparse.ArgumentParser:
    from trainables.runtime.command_line import Parser

    p = Parser(
        prog="python -m trainables.fetch",
        description="Download what a profile reads into $MMEMB_DATA and the Hugging Face cache, "
                    "each file checked by size and hash; resumable; a second run checks and "
                    "downloads nothing.")
    p.add_argument("target", choices=sorted(TARGETS), help="the profile whose data to fetch")
    p.add_argument("--data", default=None,
                   help="the data folder (default: $MMEMB_DATA, else ./data)")
    p.add_argument("--only", nargs="+", metavar="ITEM",
                   choices=sorted({i.name for items, _ in TARGETS.values() for i in items}),
                   help=f"fetch only these ({', '.join(i.name for i in PAPER)})")
    p.add_argument("--dry-run", action="store_true",
                   help="list every file with its size, checksum and source; no network")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    items, manual = TARGETS[args.target]
    if args.only:  # names checked by the parser (one error: line)
        items, manual = tuple(i for i in items if i.name in args.only), ()
    root = data_root(args.data)
    say = print
    try:
        if args.dry_run:
            say(f"fetch {args.target} --dry-run: $MMEMB_DATA={root}, Hugging Face cache "
                f"{hub_cache()}, source {endpoint()}")
            dry_run(items, manual, root, Manifest.load(root), say)
            return 0
        from trainables.runtime.filelock import file_lock

        (root / MANIFEST.parent).mkdir(parents=True, exist_ok=True)
        with file_lock(root / MANIFEST.parent / "lock"):  # a second fetch waits its turn
            return _fetch(args, items, manual, root, say)
    except FetchError as err:
        print(f"fetch: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fetch: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


def _fetch(args: argparse.Namespace, items: tuple[Item, ...], manual: tuple[Manual, ...],
           root: Path, say: Callable[[str], None]) -> int:
    man = Manifest.load(root)
    say(f"fetch {args.target}: into $MMEMB_DATA={root} and the Hugging Face cache {hub_cache()}")
    for item in items:
        state = fetch_item(item, root, man, say, progress=not args.no_progress)
        say(f"  {item.name}: {state} ({item.what})")
    _say_manual(manual, say)
    say(f"ready: export MMEMB_DATA={root}, then: python -m orchestrator.ablate --grid table3 "
        "--profile paper --dry-run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
