"""CLIP teacher feature extraction: a (image, caption) pairs file -> a feature store, on Ray Data.

    python -m trainables.extract --pairs captions.csv --images DIR --model M --out store.parquet

The command line of :mod:`trainables.data.clip_extraction`, kept here so the command reads
as the README prints it."""

import sys

from trainables.data.clip_extraction import main, parser

__all__ = ["main", "parser"]

if __name__ == "__main__":
    sys.exit(main())
