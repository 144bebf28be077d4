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

The package, one idea a module: ``catalog`` (what the paper profile reads), ``places`` (where
things are), ``manifest`` (what was verified), ``hub`` (the hub client), ``unpack`` (the archive),
``install`` (one item), ``lock`` (two fetches take turns), ``errors`` and ``refusals`` (how it
says no), ``dry_run`` and ``command`` (the command line).
"""

from trainables.fetch.catalog import (
    MANUAL,
    PAPER,
    READ_BY,
    SENTEVAL_TASKS,
    SIMCSE_DATA,
    SIMCSE_DATA_REV,
    TARGETS,
    Item,
    Manual,
)
from trainables.fetch.command import main, parser
from trainables.fetch.errors import FetchError, Refused, Stopped
from trainables.fetch.errors import size_text as _size
from trainables.fetch.hub import RETRIES
from trainables.fetch.lock import hold as _lock
from trainables.fetch.manifest import Manifest
from trainables.fetch.places import ENDPOINT, data_root, endpoint, hub_cache

__all__ = ["ENDPOINT", "MANUAL", "PAPER", "READ_BY", "RETRIES", "SENTEVAL_TASKS", "SIMCSE_DATA",
           "SIMCSE_DATA_REV", "TARGETS", "FetchError", "Item", "Manifest", "Manual", "Refused",
           "Stopped", "_lock", "_size", "data_root", "endpoint", "hub_cache", "main", "parser"]
