"""`python -m kit.train --config run.yaml [KEY=VALUE ...]`, alone or under torchrun or srun."""

import sys

from kit.train.command import main

if __name__ == "__main__":
    sys.exit(main())
