"""Where the kit's folders are, independent of the working directory.

Notebooks run with different working directories (papermill from the repo root or notebooks/,
nbval from a temporary copy), so relative output paths are resolved against the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

#: bytes of one name in a path, and of a whole path: what Linux file systems take (NAME_MAX,
#: PATH_MAX less the final NUL); a longer one fails at its first use (ENAMETOOLONG)
NAME_BYTES = 255
PATH_BYTES = 4095

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PARAMETERS_DIR = REPO_ROOT / "parameters"


#: names that become folders (tasks, variants): no separator, no leading dot, so never `..`
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"


def escapes(folder: str | Path, path: str | Path) -> bool:
    """Whether `path`, taken relative to `folder`, lands outside it (`..`, an absolute path or a
    link pointing elsewhere)."""
    root = Path(folder).resolve()
    return not (root / path).resolve().is_relative_to(root)


def resolve(path: str | Path) -> Path:
    """An absolute path: environment variables expanded (`${TIMECAT_DATA}/imagenet`), relative
    paths taken from the repository root."""
    path = Path(os.path.expandvars(str(path)))
    return path if path.is_absolute() else REPO_ROOT / path


def shown(path: str | Path, start: Path = REPO_ROOT) -> str:
    """A path as the kit prints it: relative to `start` (an absolute path; default the
    repository root) when it lies under it, so tables and messages stay short and the same on
    every machine; absolute otherwise."""
    absolute = Path(os.path.normpath(resolve(path)))  # `..` removed, links kept as named
    return str(absolute.relative_to(start)) if absolute.is_relative_to(start) else str(absolute)


def importable_environment() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH: a child started from
    any working directory imports this kit."""
    return os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    }
