"""Convert the official caption/image-feature releases into one validated feature store.

    python -m trainables.convert mcse --captions X.txt --features X.hdf5 --out store.parquet
    python -m trainables.convert clip-json --json X.json --out store.parquet

The command line of :mod:`trainables.data.converters`, kept here so the command reads
as the README prints it."""

import sys

from trainables.data.converters import main, parser

__all__ = ["main", "parser"]

if __name__ == "__main__":
    sys.exit(main())
