"""``python -m mnemoscope``: the ``mnemoscope`` command."""

import sys

from mnemoscope.cli import main

if __name__ == "__main__":
    sys.exit(main())
