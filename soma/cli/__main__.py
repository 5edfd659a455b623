"""`python -m soma.cli`: the `soma` command."""

import sys

from soma.cli import main

if __name__ == "__main__":
    sys.exit(main())
