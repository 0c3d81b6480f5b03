"""`python -m pasodoble` is the `pasodoble` command."""

import sys

from pasodoble.cli import main

if __name__ == "__main__":
    sys.exit(main())
