"""`python -m kit.train --config run.yaml [KEY=VALUE ...]`, alone or under torchrun or srun."""

import sys

from kit.train.trainer import main

if __name__ == "__main__":
    sys.exit(main())
