"""Bring the paper profile's data onto a fresh machine: ``python -m trainables.fetch paper``.

What can be downloaded freely comes from where the official scripts take it, all of it hosted on
the Hugging Face hub: Wiki1M (SimCSE's ``data/download_wiki.sh``), SentEval's data with the STS
and the seven transfer tasks (SimCSE's ``SentEval/data/downstream/download_dataset.sh``, the
tasks SentEval's ``get_transfer_data.bash`` prepares, already processed), the students, the DALR
text teachers and CLIP. Files land in ``$MMEMB_DATA`` (default ``./data``) under the names of the
profile's table (``trainables/config/stores.py``); the students and CLIP in the Hugging Face
cache, in its own layout (``models--org--name/{blobs,snapshots,refs}``), so
``from_pretrained(name)`` finds them offline.

Every file is checked by size and hash: the SHA-256 the hub publishes for LFS files (the weights,
the corpora), the git blob id it publishes for the others, and for files unpacked from an archive
(SentEval) a SHA-256 recorded at the first verified unpacking. ``$MMEMB_DATA/.fetch/manifest.json``
keeps what was verified, so a second run checks the files on disk and touches no network. A
download interrupted (a dropped connection, Ctrl-C) leaves a ``.part`` file that the next run
continues with an HTTP Range request; a download that fails its check is fetched once more
before it is reported. What cannot be scripted (the Flickr30k and COCO images, MCSE's and
KDMCSE's feature files on Google Drive, RankCSE) gets one instruction each: where to get it,
where to put it, and the command that turns it into the store the profile reads.

Before anything is written, the run refuses in one line (exit 2) a ``$MMEMB_DATA`` or cache that
is not a folder or cannot be written, and a disk without room for the downloads (an archive
counted twice: it and its unpacked copy). Then each item is fetched on its own: one that fails
(a source that no longer has it, a network failure) is named with the right advice and the
others go on; the run ends with a summary (fetched, checked, skipped, failed) and exits 1 if
anything failed. A disk that fills or turns read-only mid-run stops it (exit 2), keeping what
was verified.

We download with the standard library rather than ``huggingface_hub.hf_hub_download`` because
the latter deletes its partial file on failure (no resume across runs) and does not check the
SHA-256 it is given; the hub's API still lists the files and their hashes (``HfApi.repo_info``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import fcntl
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainables.config.stores import (
    MCSE_COCO_FILES,
    SENTEVAL_DIR,
    STORES,
    TEACHER_DIRS,
    TEACHERS_DIR,
    TEXT_FILE,
    Store,
)
from trainables.runtime.modes import as_created, umask

ENDPOINT = "https://huggingface.co"
MANIFEST = Path(".fetch") / "manifest.json"
LOCK = Path(".fetch") / "lock"
CHUNK = 1 << 20
RETRIES = 3  # a dropped connection resumes this many times in one run before giving up

# The files a model folder needs: configuration, tokenizer, one set of weights (safetensors when
# the repository has them, else the PyTorch pickle); other frameworks' weights are left out.
MODEL_FILES = ("*.json", "*.txt", "*.model")
WEIGHTS = (("model.safetensors", "model-*-of-*.safetensors"),
           ("pytorch_model.bin", "pytorch_model-*-of-*.bin"))
FULL = (errno.ENOSPC, errno.EDQUOT)
LOCKED_OUT = (errno.EROFS, errno.EACCES, errno.EPERM)


class Refused(Exception):
    """The run cannot go as asked: one line naming what and the fix; nothing was written."""


class FetchError(Exception):
    """One item failed: one line naming it, the address where that applies, and what to do."""


class Stopped(Exception):
    """The local disk failed mid-run (full, read-only): one line; what was verified is kept."""


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
    """a folder under $MMEMB_DATA made a relative link to the cached snapshot (CLIP as a DALR
    teacher)"""
    approx: int = 0
    """bytes, as the hub listed them when this was written: the dry run's estimate"""
    unpack: str | None = None
    """a tar archive among ``files`` that is unpacked into ``folder`` and then removed"""
    pinned: str | None = None
    """why ``revision`` is pinned (said when the pin is gone upstream)"""


@dataclass(frozen=True)
class Manual:
    """Something that cannot be fetched by a script, and how to bring it."""

    name: str
    what: str
    where: str
    put: str = ""
    command: str = ""
    made: str | None = None
    """what it makes under $MMEMB_DATA (a store, a model folder): present or missing"""
    role: str = ""
    """who reads it ('required: ...'), or that it is an alternative or read by no shipped grid"""


SIMCSE_DATA = "princeton-nlp/datasets-for-simcse"
SIMCSE_DATA_REV = "e145e8bb659b2aa2669f32ef79cb4cdef6c58fef"  # 'update senteval data', Sep 2021
PIN = ("the commit carrying the corrected senteval.tar of SimCSE issue #84, pinned so every "
       "machine gets the same bytes")

PAPER: tuple[Item, ...] = (
    Item("wiki1m", "Wiki1M, the text corpus (SimCSE data/download_wiki.sh)", SIMCSE_DATA,
         "dataset", SIMCSE_DATA_REV, (TEXT_FILE,), folder=".", approx=121_000_000, pinned=PIN),
    Item("senteval", "SentEval: STS12-16, STS-B, SICK and the seven transfer tasks "
         "(SimCSE SentEval/data/downstream/download_dataset.sh)", SIMCSE_DATA, "dataset",
         SIMCSE_DATA_REV, ("senteval.tar",), folder=SENTEVAL_DIR, approx=90_000_000,
         unpack="senteval.tar", pinned=PIN),
    Item("bert-base-uncased", "the BERT-base student", "google-bert/bert-base-uncased",
         cache_name="bert-base-uncased", approx=440_000_000),
    Item("roberta-base", "the RoBERTa-base student (the RoBERTa grids)", "FacebookAI/roberta-base",
         cache_name="roberta-base", approx=500_000_000),
    Item("simcse", "DALR's SimCSE text teacher", "princeton-nlp/unsup-simcse-bert-base-uncased",
         folder=f"{TEACHERS_DIR}/{TEACHER_DIRS['simcse']}", approx=440_000_000),
    Item("diffcse", "DALR's DiffCSE text teacher", "voidism/diffcse-bert-base-uncased-sts",
         folder=f"{TEACHERS_DIR}/{TEACHER_DIRS['diffcse']}", approx=1_250_000_000),
    Item("clip", "CLIP ViT-L/14 (trainables.extract; DALR's CLIP text teacher)",
         "openai/clip-vit-large-patch14", cache_name="openai/clip-vit-large-patch14",
         link=f"{TEACHERS_DIR}/{TEACHER_DIRS['clip']}", approx=1_710_000_000),
)

SENTEVAL_TASKS = ("STS/STS12-en-test", "STS/STS13-en-test", "STS/STS14-en-test",
                  "STS/STS15-en-test", "STS/STS16-en-test", "STS/STSBenchmark", "SICK", "MR",
                  "CR", "SUBJ", "MPQA", "SST/binary", "TREC", "MRPC")
"""the folders the STS and transfer evaluations read (trainables/evaluation/sts.py, transfer.py)"""

D = "$MMEMB_DATA"
CLIP_MODEL = "openai/clip-vit-large-patch14"
KDMCSE = "KDMCSE's README (github.com/duyngtr16061999/KDMCSE; Google Drive, no scripted download)"
MCSE = "MCSE's README (github.com/uds-lsv/MCSE; Google Drive, no scripted download)"


READ_BY: dict[str, tuple[str, ...]] = {
    "flickr30k": ("kdmcse_table1", "kdmcse_table1_roberta", "kdmcse_table2",
                  "kdmcse_table2_roberta", "kdmcse_table3", "kdmcse_table5", "kdmcse_fig7",
                  "dalr_table2", "dalr_table2_roberta", "dalr_table3", "dalr_table9",
                  "kdmcse_search", "dalr_search"),
    "flickr30k-mcse": ("kdmcse_table1", "kdmcse_table1_roberta", "kdmcse_table2",
                       "kdmcse_table2_roberta", "kdmcse_table3", "kdmcse_fig7", "mcse_table4",
                       "dalr_table2", "dalr_table2_roberta", "control_positive",
                       "control_negative", "kdmcse_search", "dalr_search"),
    "coco": ("kdmcse_table1_coco", "kdmcse_table1_roberta_coco", "kdmcse_table5_coco",
             "dalr_table8"),
    "rankcse": ("dalr_table9", "dalr_search"),
}
"""the grids and searches whose runs read each by-hand store (or teacher) on the paper profile,
as the instructions say it; tests/test_data_names.py builds their configs and checks it"""


def _required(key: str, cells: str) -> str:
    return f"required: {cells} of {', '.join(READ_BY[key])} read it"


def _at(names: Iterable[str]) -> str:
    return " and ".join(f"{D}/{n}" for n in names)


def _extract(store: Store) -> str:
    pairs, images = store.extract
    return (f"python -m trainables.extract --pairs {D}/{pairs} --images {D}/{images} "
            f"--model {CLIP_MODEL} --out {D}/{store.file}")


def _manual() -> tuple[Manual, ...]:
    from trainables.data.converters import command

    flickr, mcse, coco = STORES["flickr30k"], STORES["flickr30k-mcse"], STORES["coco"]
    rankcse = f"{TEACHERS_DIR}/{TEACHER_DIRS['rankcse']}"
    return (
        Manual("flickr30k-clip", "Flickr30k captions + CLIP ViT-L/14 features, every caption of "
               "every image", f"KDMCSE's {_at(flickr.source_files())[len(D) + 1:]}, linked from "
               f"{KDMCSE}", _at(flickr.source_files()), command(flickr), flickr.file,
               _required("flickr30k", "the KDMCSE and DALR cells (and MCSE given CLIP text "
                         "features)")),
        Manual("flickr30k-images", "the same store from the Flickr30k images",
               "the Flickr30k images and captions, on request from "
               "shannon.cs.illinois.edu/DenotationGraph (their terms forbid redistribution)",
               f"{D}/{flickr.extract[1]}/ and {D}/{flickr.extract[0]} (columns image,caption)",
               _extract(flickr), flickr.file, "or, instead of flickr30k-clip"),
        Manual("mcse-resnet", "MCSE's Flickr30k: one random caption per training image and its "
               "ResNet-50 features", f"{' and '.join(mcse.source_files())}, linked from {MCSE}",
               _at(mcse.source_files()), command(mcse), mcse.file,
               _required("flickr30k-mcse", "the MCSE cells (most tables' baseline)")),
        Manual("coco-clip", "COCO captions + CLIP ViT-L/14 features, every caption of every "
               "train2014 image", f"KDMCSE's {coco.source_files()[0]} (DALR's wiki+coco script "
               f"reads the same file), linked from {KDMCSE}", _at(coco.source_files()),
               command(coco), coco.file, _required("coco", "every cell, MCSE's too,")),
        Manual("coco-images", "the same store from the COCO images",
               "the COCO 2014 train images and their captions (cocodataset.org)",
               f"{D}/{coco.extract[1]}/ and {D}/{coco.extract[0]} (columns image,caption)",
               _extract(coco), coco.file, "or, instead of coco-clip"),
        Manual("mcse-coco", "MCSE's own COCO files (one random caption per train2014 image, "
               "ResNet-50 features)", f"{' and '.join(MCSE_COCO_FILES)}, linked from {MCSE}",
               role=f"read by no shipped table: the wiki+coco tables train every method, MCSE "
               f"included, on {coco.file} (one store per table, docs/official-code.md); to train "
               f"MCSE on its own COCO file, convert these with python -m trainables.convert mcse "
               f"and name that store as data.pairs in a cell or profile"),
        Manual("rankcse", "the RankCSE text teacher",
               "the RankCSE-listmle BERT-base checkpoint from RankCSE's authors "
               "(github.com/perceptiveshawty/RankCSE)",
               f"{D}/{rankcse}/ (config.json, weights, tokenizer)", made=f"{rankcse}/config.json",
               role=_required("rankcse", "the RankCSE runs")),
    )


MANUAL: tuple[Manual, ...] = _manual()
TARGETS = {"paper": (PAPER, MANUAL)}


# --- where things are -----------------------------------------------------------------------------
def data_root(given: str | None = None) -> Path:
    return Path(given or os.environ.get("MMEMB_DATA") or "data").expanduser().resolve()


def hub_cache() -> Path:
    """The Hugging Face cache transformers reads (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ...)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser().absolute()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser().absolute()


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or ENDPOINT).rstrip("/")


def _cache_repo(item: Item) -> Path:
    return hub_cache() / f"{item.repo_type}s--{item.cache_name.replace('/', '--')}"


def _repo_url(item: Item) -> str:
    return f"{endpoint()}/{'datasets/' if item.repo_type == 'dataset' else ''}{item.repo}"


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
            raise Refused(f"{path} is not valid JSON ({err}); delete it and run again (every "
                          "file is then checked against the hub again)") from None
        except OSError as err:
            raise Refused(f"{path}: cannot read it ({err.strerror}); make it readable, or point "
                          "MMEMB_DATA (or --data) at another folder") from None
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


def _gone(item: Item, repository: bool = False) -> str:
    """What to do when the source no longer has what ``item`` names (``repository``: the whole
    repository): never 'run again'."""
    if item.pinned and not repository:
        return (f"running again will not help: the revision {item.revision[:12]} is pinned "
                f"({item.pinned}); to take what the repository has now, run: python -m "
                f"trainables.fetch paper --only {item.name} --revision {item.name}=main (every "
                "file is still checked against the hash the hub publishes, and the commit is "
                "recorded in .fetch/manifest.json)")
    if item.revision != "main" and not repository:
        return (f"running again will not help: {item.revision} is the revision --revision named; "
                f"name one the repository has (--revision {item.name}=main for its newest)")
    what = ", ".join(item.files) if item.files else "the files (config.json, tokenizer, weights)"
    where = f"{item.folder}/" if item.folder else f"the Hugging Face cache as {item.cache_name}"
    if item.unpack:
        where = f"{item.folder}/ (unpacked)"
    return (f"running again will not help: bring {what} by hand into {where}, or point "
            f"HF_ENDPOINT at a mirror that has {item.repo}")


def _listing_failure(item: Item, err: Exception) -> FetchError:
    """The hub's answer to a listing, as one line: gone (404: no such repository or revision),
    denied, or a network failure (run again)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    url = f"{_repo_url(item)}/tree/{item.revision}"
    status = getattr(getattr(err, "response", None), "status_code", None)
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if isinstance(err, RevisionNotFoundError):
        return FetchError(f"{item.name}: {url}: the source no longer has revision "
                          f"{item.revision}; {_gone(item)}")
    if isinstance(err, GatedRepoError) or status == 403:
        return FetchError(f"{item.name}: {url} answers {status or 403}: access to {item.repo} "
                          "is now restricted (gated or private); accept its terms on the hub and "
                          "set HF_TOKEN, or bring the files by hand")
    if isinstance(err, RepositoryNotFoundError) or status in (404, 410):
        return FetchError(f"{item.name}: {_repo_url(item)}: the source no longer has the "
                          f"repository {item.repo} (the hub answers {status or 404}: removed, "
                          f"renamed or made private); {_gone(item, repository=True)}")
    if isinstance(err, HfHubHTTPError) and status is not None and status < 500 and status != 429:
        return FetchError(f"{item.name}: {url} answers {status} ({first}); the request was refused "
                          "as sent: report it with this line")
    return FetchError(f"{item.name}: cannot list {url} ({type(err).__name__}: {first}); check the "
                      "connection (or $HF_ENDPOINT) and run the same command again")


def listing(item: Item) -> tuple[str, list[Remote]]:
    """The commit ``item.revision`` points at and the files to fetch, with their published
    sizes and hashes (``HfApi.repo_info(files_metadata=True)``)."""
    from huggingface_hub import HfApi, hf_hub_url

    base = endpoint()
    try:
        info = HfApi(endpoint=base).repo_info(item.repo, revision=item.revision,
                                              repo_type=item.repo_type, files_metadata=True)
    except Exception as err:  # noqa: BLE001 - the hub's errors are many; one line names each
        raise _listing_failure(item, err) from None
    siblings = {s.rfilename: s for s in info.siblings or ()}
    if item.files:
        missing = [f for f in item.files if f not in siblings]
        if missing:
            raise FetchError(f"{item.name}: {_repo_url(item)}/tree/{item.revision}: the source no "
                             f"longer has {', '.join(missing)}; {_gone(item)}")
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
            raise FetchError(f"{item.name}: {_repo_url(item)}/tree/{item.revision}: the source no "
                             f"longer has model.safetensors or pytorch_model.bin at its top level; "
                             f"{_gone(item)}")
    remotes = []
    for n in names:
        s = siblings[n]
        if s.size is None:
            raise FetchError(f"{item.name}: the hub listed no size for {n}; run the same command "
                             "again")
        kind, digest = ("sha256", s.lfs.sha256) if s.lfs else ("git", s.blob_id)
        url = hf_hub_url(item.repo, n, repo_type=item.repo_type, revision=info.sha, endpoint=base)
        remotes.append(Remote(n, s.size, kind, digest, url))
    return info.sha, remotes


def download(remote: Remote, dest: Path, label: str, progress: bool = True, gone: str = "",
             say: Callable[[str], None] = print) -> None:
    """``remote.url`` -> ``dest``, continuing ``dest.part`` with a Range request, checked by
    size and hash before it takes its name. A download that fails its check is deleted and
    fetched once more from the start; failing again, it is refused (``FetchError``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    problem = ""
    for attempt in (1, 2):
        _transfer(remote, part, label, progress, gone)
        problem = check(part, {"size": remote.size, remote.kind: remote.digest})
        if problem is None:
            os.replace(part, dest)
            return
        part.unlink()
        if attempt == 1:
            say(f"  {label}: the download fails its check ({problem}); deleted, downloading it "
                "once more")
    raise FetchError(f"{label}: {remote.url} failed its check twice ({problem}; the hub publishes "
                     f"{remote.kind} {remote.digest}); nothing was kept: the bytes that arrive are "
                     "not the ones the hub lists (a proxy altering them, or the file replaced "
                     "upstream under its name): try from another network, or report it to the "
                     "repository's owners")


def _transfer(remote: Remote, part: Path, label: str, progress: bool, gone: str) -> None:
    """Bring ``part`` to ``remote.size`` bytes: resume with Range, retry a dropped connection
    ``RETRIES`` times without progress. Network failures become a ``FetchError`` saying to run
    again; a file the source no longer has, one saying why that will not help. Local write
    errors (a full disk) propagate as the ``OSError`` they are."""
    from tqdm.auto import tqdm

    have = part.stat().st_size if part.exists() else 0
    if have > remote.size:
        part.unlink()
        have = 0
    free = shutil.disk_usage(part.parent).free
    if free < remote.size - have:
        raise OSError(errno.ENOSPC, f"{_size(remote.size - have)} to download but "
                      f"{_size(free)} free", str(part.parent))
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
                resp = urllib.request.urlopen(urllib.request.Request(remote.url, headers=headers),
                                              timeout=60)
            except urllib.error.HTTPError as err:
                err.close()
                if err.code in (404, 410):
                    raise FetchError(f"{label}: {remote.url} answers {err.code}: the source no "
                                     f"longer has this file; {gone}") from None
                if err.code in (401, 403):
                    raise FetchError(f"{label}: {remote.url} answers {err.code}: access is now "
                                     "restricted (gated or private); accept its terms on the hub "
                                     "and set HF_TOKEN, or bring the file by hand") from None
                if err.code == 416:  # the range lies past what the server has: start over
                    part.unlink(missing_ok=True)
                    bar.update(-have)
                    have = 0
                reason = f"HTTP {err.code}"
            except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
                reason = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            else:
                with resp:
                    if have and resp.status != 206:  # the server ignored the range: start over
                        bar.update(-have)
                        have = 0
                    with part.open("ab" if have else "wb") as out:
                        while True:
                            try:
                                chunk = resp.read(CHUNK)
                            except (http.client.HTTPException, OSError) as err:
                                reason = f"{type(err).__name__}: {err}"
                                break
                            if not chunk:
                                reason = reason or "the server closed the connection early"
                                break
                            out.write(chunk)  # a full disk raises here: not a network failure
                            have += len(chunk)
                            bar.update(len(chunk))
            if have < remote.size:
                tries = 0 if have > before else tries + 1  # progress resets the count
                if tries >= RETRIES:
                    raise FetchError(
                        f"{label}: the download stopped at {have:,} of {remote.size:,} bytes "
                        f"({reason}); check the connection and run the same command again: it "
                        "resumes from there")
                time.sleep(0.2 * tries)  # a pause before the next try, not a wait on a result
                reason = ""
    finally:
        bar.close()


# --- fetching one item ----------------------------------------------------------------------------
def _targets(item: Item, root: Path, commit: str, remotes: Iterable[Remote]
             ) -> list[tuple[Remote, str, Path, Path]]:
    """(remote, manifest key, where the file is read, where its bytes are stored)."""
    out = []
    for r in remotes:
        if item.cache_name:
            repo = _cache_repo(item)
            out.append((r, f"hf:{item.cache_name}/{r.path}",
                        repo / "snapshots" / commit / r.path, repo / "blobs" / r.digest))
        else:
            where = (root / MANIFEST.parent / r.path if item.unpack == r.path
                     else root / item.folder / r.path)
            out.append((r, f"{item.name}:{r.path}", where, where))
    return out


def _recorded(item: Item, root: Path, man: Manifest, verify: bool) -> str | None:
    """The item's verified state from the manifest: None when it is complete on disk, else why
    not (``verify``: hash every file; else sizes only, for the dry run and the plan)."""
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
               progress: bool = True, listed: tuple[str, list[Remote]] | None = None) -> str:
    """Fetch ``item`` (its ``listing``, or ``listed``) unless the manifest shows it complete;
    -> 'checked' or 'fetched'."""
    if _recorded(item, root, man, verify=True) is None:
        return "checked"
    commit, remotes = listed or listing(item)
    fetched = 0
    keys = []
    for r, key, read_at, stored_at in _targets(item, root, commit, remotes):
        entry = r.entry(commit)
        if check(stored_at, entry) is not None:
            download(r, stored_at, f"{item.name} {r.path}", progress, _gone(item), say)
            fetched += 1
        if item.cache_name:
            _link_snapshot(read_at, stored_at)
        if item.unpack == r.path:
            try:
                keys += _unpack(item, root, stored_at, commit, man, say)
            except OSError as err:
                raise Stopped(f"{item.name}: " + _disk_line(
                    err, f"while unpacking {r.path} into {root / item.folder}",
                                         f"the verified {r.path} is kept in {stored_at.parent} "
                                         "and is unpacked without downloading it again")) from None
            stored_at.unlink()
            continue
        man.files[key] = entry
        keys.append(key)
    if item.cache_name:
        ref = _cache_repo(item) / "refs" / item.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
        if item.link:
            _link_folder(root / item.link, _cache_repo(item) / "snapshots" / commit)
    man.items[item.name] = {"repo": item.repo, "commit": commit, "files": keys}
    man.save()
    return "fetched" if fetched else "checked"


def _link_folder(link: Path, target: Path) -> None:
    """``link`` -> ``target`` as a relative link, so $MMEMB_DATA and a cache kept beside it can
    move together (as the cache's own snapshot links do)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink() if link.is_symlink() else shutil.rmtree(link)
    link.symlink_to(os.path.relpath(target.resolve(), link.parent.resolve()),
                    target_is_directory=True)


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
    """Unpack ``archive`` (checked by its published hash) into ``root/item.folder`` with the
    user's umask; record each file's SHA-256 so later runs check the unpacked files themselves.
    Unpacked beside the archive first, so a failure (a full disk) leaves the folder as it was."""
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
        mask = umask()
        for path in base.rglob("*"):  # the archive's modes would ignore the user's umask
            as_created(path, mask)
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


# --- before anything is written: the targets, their room, the lock --------------------------------
def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            digits = 0 if unit == "B" else 2 if unit == "GB" and n < 10 else 1
            return f"{n:.{digits}f} {unit}"
        n /= 1000
    return f"{n} B"


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (a link counts, even a broken one)."""
    while not (path.exists() or path.is_symlink()):
        path = path.parent
    return path


def _not_a_folder(path: Path) -> str | None:
    """Why no folder can be at ``path``, or None."""
    probe = _existing(path)
    if probe.is_dir():
        return None
    if probe.is_symlink() and not probe.exists():
        return f"{probe} is a broken link"
    return f"{probe} is a file" if probe == path else f"{probe} (above it) is a file"


def _unwritable(path: Path) -> str | None:
    """Why nothing can be written at ``path`` (its nearest existing folder), or None. A file is
    really made and removed: ``os.access`` says yes to root on a read-only mount."""
    probe = _existing(path)
    try:
        fd, name = tempfile.mkstemp(prefix=".mmemb-probe-", dir=probe)
    except OSError as err:
        return err.strerror or str(err)
    os.close(fd)
    os.unlink(name)
    return None


def _targets_are_folders(root: Path, cache: Path) -> None:
    for what, path, fix in (("$MMEMB_DATA", root, "MMEMB_DATA (or --data)"),
                            ("the Hugging Face cache", cache, "HF_HUB_CACHE")):
        why = _not_a_folder(path)
        if why:
            raise Refused(f"{what} {path} cannot be a folder: {why}; point {fix} at a folder "
                          "(it is made if missing)")


def _writable_for(items: Iterable[Item], root: Path, cache: Path) -> None:
    """Refuse, before anything is written, a target that cannot be written while items that
    land there are still to fetch (the manifest lives in $MMEMB_DATA: every item writes there)."""
    items = list(items)
    if not items:
        return
    names = ", ".join(i.name for i in items)
    why = _unwritable(root)
    if why:
        raise Refused(f"$MMEMB_DATA {root} is not a writable folder ({why}) and {names} "
                      f"{'is' if len(items) == 1 else 'are'} still to fetch; point MMEMB_DATA (or "
                      "--data) at a folder you can write (a complete, read-only data folder "
                      "needs no fetch)")
    cached = [i.name for i in items if i.cache_name]
    why = _unwritable(cache) if cached else None
    if why:
        raise Refused(f"the Hugging Face cache {cache} is not a writable folder ({why}) and "
                      f"{', '.join(cached)} {'is' if len(cached) == 1 else 'are'} stored there; "
                      "point HF_HUB_CACHE at a folder you can write")


def _room(plans: list[tuple[Item, tuple[str, list[Remote]]]], root: Path) -> None:
    """Refuse a disk without room for what is still to download, per disk: every file not yet on
    disk (less what a ``.part`` holds), and an archive's unpacked copy beside it."""
    need: dict[int, list] = {}
    for item, (commit, remotes) in plans:
        for r, _, _, stored_at in _targets(item, root, commit, remotes):
            present = stored_at.is_file() and stored_at.stat().st_size == r.size
            part = stored_at.with_name(stored_at.name + ".part")
            have = part.stat().st_size if part.is_file() and not present else 0
            adds = [(stored_at, 0 if present else max(r.size - have, 0), r.path)]
            if item.unpack == r.path:
                adds.append((root / item.folder, r.size, f"its unpacked copy ({item.folder}/)"))
            for where, n, what in adds:
                if n:
                    folder = _existing(where.parent)
                    row = need.setdefault(os.stat(folder).st_dev, [folder, 0, []])
                    row[1] += n
                    row[2].append(what)
    for folder, n, what in need.values():
        free = shutil.disk_usage(folder).free
        if free < n:
            raise Refused(f"{_size(n)} needed on the disk of {folder} ({', '.join(what)}) but it "
                          f"has {_size(free)} free; free some space, or point MMEMB_DATA / "
                          "HF_HUB_CACHE at a larger disk, and run again")


@contextlib.contextmanager
def _lock(root: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Two fetches into one $MMEMB_DATA take turns. The lock file is removed while still held,
    and whoever gets a lock checks that it holds the file now at that name (one removed under it
    is tried again), so no lock is left behind and no two runs hold one at once. A ``.fetch``
    folder this run made and left empty goes too."""
    folder = root / LOCK.parent
    made = [p for p in (folder, *folder.parents) if not (p.exists() or p.is_symlink())]
    path = root / LOCK
    waited = False
    while True:
        folder.mkdir(parents=True, exist_ok=True)  # the run before may have removed it, empty
        fh = path.open("a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not waited:
                say(f"another fetch is writing {root}; waiting for it to finish")
                waited = True
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            mine = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            mine = False
        if mine:
            break
        fh.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        fh.close()
        for p in made:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()  # only when empty: nothing was fetched there


def _disk_line(err: OSError, doing: str, kept: str = "what was verified is kept") -> str:
    where = err.filename or ""
    if err.errno in FULL:
        detail = ": ".join(filter(None, (str(where), err.strerror)))
        return (f"no space left on the disk {doing} ({detail}); {kept}; free some "
                "space, or point MMEMB_DATA / HF_HUB_CACHE at a larger disk, and run the same "
                "command again")
    if err.errno in LOCKED_OUT:
        return (f"cannot write {where} {doing} ({err.strerror}); {kept}; make it writable, or "
                "point MMEMB_DATA / HF_HUB_CACHE at a folder you can write, and run again")
    return f"{where}: {err.strerror or err} {doing}; {kept}"


# --- the command ----------------------------------------------------------------------------------
def _made(m: Manual, root: Path) -> bool | None:
    return None if m.made is None else (root / m.made).exists()


def dry_run(items: tuple[Item, ...], manual: tuple[Manual, ...], root: Path, man: Manifest,
            say: Callable[[str], None]) -> int:
    """Every file with its source and size and how it is checked (before a first fetch: the kind
    of hash the hub publishes, read at download; after: the exact hash verified), what is to
    bring by hand, and whether the fetch would be refused; no network."""
    base = endpoint()
    pending = []
    for item in items:
        where = (f"Hugging Face cache ({_cache_repo(item)})" if item.cache_name
                 else str(root / item.folder))
        if item.link:
            where += f" and {root / item.link} (a relative link to it)"
        state = _recorded(item, root, man, verify=False)
        if state is not None:
            pending.append(item)
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
            how = ("sha256 as the hub publishes it for LFS files, read at download" if item.files
                   else "sha256 (weights) or git blob id (small files) as the hub publishes "
                        "them, read at download")
            say(f"  {name}  about {_size(item.approx)}  {how}  {url}")
    _say_manual(manual, root, say)
    todo = sum(i.approx * (2 if i.unpack else 1) for i in pending)
    say(f"to fetch: {len(pending)} of {len(items)} item(s), about {_size(todo)} on disk (an "
        "archive counted with its unpacked copy); the exact sizes and hashes are read from the "
        "hub when the fetch starts, and this dry run lists them once fetched")
    for what, path in (("$MMEMB_DATA", root), ("the Hugging Face cache", hub_cache())):
        why = _unwritable(path)
        free = shutil.disk_usage(_existing(path)).free
        say(f"{what} {path}: {f'not writable ({why})' if why else 'writable'}, {_size(free)} free")
    _writable_for(pending, root, hub_cache())  # what the fetch would refuse, refused here too
    return 0


def _say_manual(manual: tuple[Manual, ...], root: Path, say: Callable[[str], None]) -> None:
    if not manual:
        return
    say("by hand (no scripted download allowed):")
    for m in manual:
        made = _made(m, root)
        state = "" if made is None else (f"present: {m.made}" if made else f"missing: {m.made}")
        tags = "; ".join(filter(None, (state, m.role)))
        put = f"; put it at {m.put}" if m.put else ""
        then = f"; then: {m.command}" if m.command else ""
        say(f"  {m.name} [{tags}]: {m.what}: get {m.where}{put}{then}")


def _revision(text: str) -> tuple[str, str]:
    name, sep, rev = text.partition("=")
    names = [i.name for i in PAPER]
    if not sep or not rev.strip() or name not in names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected ITEM=REVISION with ITEM one of {', '.join(names)} "
            "(e.g. wiki1m=main)")
    return name, rev.strip()


def parser() -> argparse.ArgumentParser:
    from trainables.runtime.command_line import Parser

    p = Parser(
        prog="python -m trainables.fetch",
        description="Download what a profile reads into $MMEMB_DATA and the Hugging Face cache, "
                    "each file checked by size and hash; resumable; a second run checks and "
                    "downloads nothing; says how to bring what no script may download.")
    p.add_argument("target", choices=sorted(TARGETS), help="the profile whose data to fetch")
    p.add_argument("--data", default=None,
                   help="the data folder (default: $MMEMB_DATA, else ./data)")
    names = [i.name for items, manual in TARGETS.values() for i in (*items, *manual)]
    p.add_argument("--only", nargs="+", metavar="ITEM", choices=sorted(set(names)),
                   help=f"fetch only these, or show only these instructions ({', '.join(names)})")
    p.add_argument("--revision", action="append", type=_revision, default=[],
                   metavar="ITEM=REVISION",
                   help="fetch ITEM at another revision (a branch, tag or commit) than the pinned "
                        "one, e.g. wiki1m=main when the pinned commit is gone upstream")
    p.add_argument("--dry-run", action="store_true",
                   help="list every file with its size, checksum and source, and what would be "
                        "refused; no network")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    items, manual = TARGETS[args.target]
    revisions = dict(args.revision)
    items = tuple(dataclasses.replace(i, revision=revisions[i.name], pinned=None)
                  if i.name in revisions else i for i in items)
    skipped: tuple[str, ...] = ()
    if args.only:  # names checked by the parser (one error: line)
        skipped = tuple(i.name for i in items if i.name not in args.only)
        items = tuple(i for i in items if i.name in args.only)
        manual = tuple(m for m in manual if m.name in args.only)
    root, cache = data_root(args.data), hub_cache()
    say = print
    try:
        _targets_are_folders(root, cache)
        if args.dry_run:
            say(f"fetch {args.target} --dry-run: $MMEMB_DATA={root}, Hugging Face cache "
                f"{cache}, source {endpoint()}")
            return dry_run(items, manual, root, Manifest.load(root), say)
        return _fetch(args, items, manual, skipped, root, cache, say)
    except (Refused, Stopped) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fetch: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


def _fetch(args: argparse.Namespace, items: tuple[Item, ...], manual: tuple[Manual, ...],
           skipped: tuple[str, ...], root: Path, cache: Path, say: Callable[[str], None]) -> int:
    from huggingface_hub import constants

    man = Manifest.load(root)
    pending = [i for i in items if _recorded(i, root, man, verify=False) is not None]
    _writable_for(pending, root, cache)
    if pending and constants.is_offline_mode():
        raise Refused("HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set and the fetch needs the "
                      "hub for " + ", ".join(i.name for i in pending) + ": run HF_HUB_OFFLINE=0 "
                      "TRANSFORMERS_OFFLINE=0 python -m trainables.fetch paper")
    say(f"fetch {args.target}: into $MMEMB_DATA={root} and the Hugging Face cache {cache}")
    done: dict[str, list[str]] = {"fetched": [], "checked": [], "failed": []}
    failures: list[str] = []

    def failed(item: Item, why: str) -> None:
        done["failed"].append(item.name)
        failures.append(why)
        say(f"  {item.name}: failed ({item.what})")
        print(f"failed: {why}", file=sys.stderr)

    plans = []
    for item in items:  # complete items are checked; the rest listed (no writes yet)
        if item not in pending and _recorded(item, root, man, verify=True) is None:
            done["checked"].append(item.name)
            say(f"  {item.name}: checked ({item.what})")
            continue
        why = _unwritable(root) or (_unwritable(cache) if item.cache_name else None)
        if why:  # complete by size but not by hash, and nowhere to write it again
            failed(item, f"{item.name}: {_recorded(item, root, man, verify=True)}, and it cannot "
                         f"be fetched again there ({why}); ask whoever can write the folder to "
                         "run the fetch")
            continue
        try:
            plans.append((item, listing(item)))
        except FetchError as err:
            failed(item, str(err))
    if plans:
        _room(plans, root)  # a refusal: nothing written yet
        try:
            with _lock(root, say):
                man = Manifest.load(root)  # another fetch may have added to it while we waited
                for item, listed in plans:
                    try:
                        state = fetch_item(item, root, man, say, not args.no_progress, listed)
                    except FetchError as err:
                        failed(item, str(err))
                        continue
                    except OSError as err:
                        done["failed"].append(item.name)
                        raise Stopped(f"{item.name}: "
                                      f"{_disk_line(err, f'while fetching {item.name}')}") from None
                    except Stopped:
                        done["failed"].append(item.name)
                        raise
                    done[state].append(item.name)
                    say(f"  {item.name}: {state} ({item.what})")
        except Stopped:
            _summary(done, skipped, manual, root, say)
            raise
    _say_manual(manual, root, say)
    _summary(done, skipped, manual, root, say)
    if failures:  # each said on stderr, with what to do
        return 1
    say(f"next: export MMEMB_DATA={root}, then python -m orchestrator.ablate --grid table3 "
        "--profile paper --dry-run checks what a table reads")
    return 0


def _summary(done: dict[str, list[str]], skipped: tuple[str, ...], manual: tuple[Manual, ...],
             root: Path, say: Callable[[str], None]) -> None:
    def part(word: str, names: Iterable[str], why: str = "") -> str:
        names = list(names)
        return f"{word} {len(names)}" + (f" ({', '.join(names)}{why})" if names else "")

    line = ", ".join((part("fetched", done["fetched"]), part("checked", done["checked"]),
                      part("skipped", skipped, ": not in --only"), part("failed", done["failed"])))
    stores = [m for m in manual if m.made and m.role.startswith("required")]
    missing = [m.made for m in stores if not _made(m, root)]
    hand = (f"; by hand: {len(stores) - len(missing)} of {len(stores)} required present"
            + (f" (missing: {', '.join(missing)}; see the instructions above)" if missing else "")
            if stores else "")
    say(f"summary: {line}{hand}")


if __name__ == "__main__":
    sys.exit(main())
