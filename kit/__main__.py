"""`python -m kit ...`: the kit's command line (kit.cli.main)."""

import sys

from kit.cli.main import main
from kit.cli.terminal import INTERRUPTED

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C before any notebook started: nothing to stop
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
