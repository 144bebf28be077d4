"""``python -m trainables.fetch``."""

import sys

from trainables.fetch.command import main

if __name__ == "__main__":  # imported (the import check), it does nothing
    sys.exit(main())
