"""``python -m ladref``: the command line, which lives in `ladref.bench.cli` (what you run, not the method)."""

import sys

from ladref.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
