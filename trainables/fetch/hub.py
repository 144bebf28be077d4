"""The hub client: list an item's files with their published sizes and hashes, and download one
file, resumed with a Range request and checked before it takes its name.

We download with the standard library rather than ``huggingface_hub.hf_hub_download`` because
the latter deletes its partial file on failure (no resume across runs) and does not check the
SHA-256 it is given; the hub's API still lists the files and their hashes (``HfApi.repo_info``).
"""

from __future__ import annotations

import errno
import fnmatch
import http.client
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from trainables.fetch.catalog import Item
from trainables.fetch.errors import FetchError, size_text
from trainables.fetch.manifest import CHUNK, Remote, check
from trainables.fetch.places import endpoint, repo_url

RETRIES = 3  # a dropped connection resumes this many times in one run before giving up

# The files a model folder needs: configuration, tokenizer, one set of weights (safetensors when
# the repository has them, else the PyTorch pickle); other frameworks' weights are left out.
MODEL_FILES = ("*.json", "*.txt", "*.model")
WEIGHTS = (("model.safetensors", "model-*-of-*.safetensors"),
           ("pytorch_model.bin", "pytorch_model-*-of-*.bin"))


def gone(item: Item, repository: bool = False) -> str:
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

    url = f"{repo_url(item)}/tree/{item.revision}"
    status = getattr(getattr(err, "response", None), "status_code", None)
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if isinstance(err, RevisionNotFoundError):
        return FetchError(f"{item.name}: {url}: the source no longer has revision "
                          f"{item.revision}; {gone(item)}")
    if isinstance(err, GatedRepoError) or status == 403:
        return FetchError(f"{item.name}: {url} answers {status or 403}: access to {item.repo} "
                          "is now restricted (gated or private); accept its terms on the hub and "
                          "set HF_TOKEN, or bring the files by hand")
    if isinstance(err, RepositoryNotFoundError) or status in (404, 410):
        return FetchError(f"{item.name}: {repo_url(item)}: the source no longer has the "
                          f"repository {item.repo} (the hub answers {status or 404}: removed, "
                          f"renamed or made private); {gone(item, repository=True)}")
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
            raise FetchError(f"{item.name}: {repo_url(item)}/tree/{item.revision}: the source no "
                             f"longer has {', '.join(missing)}; {gone(item)}")
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
            raise FetchError(f"{item.name}: {repo_url(item)}/tree/{item.revision}: the source no "
                             f"longer has model.safetensors or pytorch_model.bin at its top level; "
                             f"{gone(item)}")
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
        raise OSError(errno.ENOSPC, f"{size_text(remote.size - have)} to download but "
                      f"{size_text(free)} free", str(part.parent))
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


