"""Checks of a data root and an output folder, made before anything trains: each kind's layout,
class folders and index files, a few images decoded per split (CIFAR's pickles are read, by an
unpickler that runs no code from them).

Kept free of torch so that validating parameters (`python -m kit check`) stays fast. Every check
returns all the problems it finds, each naming its path, so that one pass reports them all; what
a data root must hold is its kind's (kit.data.kinds).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kit.data import kinds
from kit.data.settings import DataSettings
from kit.files.paths import REPO_ROOT, resolve
from kit.files.sources import source_problems


def preflight(data: DataSettings) -> list[str]:
    """Checks of a data root (its kind's layout_problems: folders, index files, a few images
    decoded): the problems found, if any."""
    kind = kinds.get(data.kind)
    if not kind.reads_disk or data.root is None:  # a root is required for these (DataSettings)
        return []
    root = resolve(data.root)
    if "$" in str(root):
        return [f"{data.root}: an environment variable in data.root is not set"]
    if not root.is_dir():
        obtain = f"; {kind.obtain.replace('<root>', str(root))}" if kind.obtain else ""
        return [f"{root}: data root for kind {data.kind} does not exist (data.root){obtain}"]
    if not os.access(root, os.R_OK | os.X_OK):
        return [f"{root}: data root for kind {data.kind} is not readable (data.root)"]
    return kind.layout_problems(root)


def folder_of_its_own(
    folder: Path,
    what: str = "outputs",
    instead: str = "name a folder for the run (output_dir)",
    sources: bool = True,
) -> list[str]:
    """Whether `folder` can hold a run's outputs (or `what` else) without mixing them with
    anything else: not a file system's root, the home folder, the repository (or a folder above
    it), nor, with `sources`, among the sources (kit.files.sources: a source folder, or one
    holding files git tracks)."""
    real = folder.resolve()
    if real == real.parent or real == Path.home().resolve() or REPO_ROOT.is_relative_to(real):
        return [
            f"{folder}: not a folder of its own for {what} (a file system root, the home "
            f"folder or the repository or above); {instead}"
        ]
    return source_problems(folder) if sources else []


def writable_problems(folder: Path) -> list[str]:
    """Whether `folder` can be created and written, without creating it: a temporary file is
    created and removed in the nearest existing ancestor (or the folder itself), since
    `os.access` answers yes for root even where the file system refuses (/proc, a read-only
    mount)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # exists() follows the link: a dangling one is no folder
            return [
                f"{existing}: a symbolic link to {os.readlink(existing)}, which does not "
                f"exist, so {folder} cannot be created (output_dir)"
            ]
        existing = existing.parent
    if not existing.is_dir():
        return [f"{existing}: not a folder, so {folder} cannot be created (output_dir)"]
    try:
        handle, probe = tempfile.mkstemp(prefix=".kit-write-check-", dir=existing)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        verb = "written" if existing == folder else f"created (in {existing})"
        return [f"{folder}: output folder cannot be {verb}: {error.strerror or error} (output_dir)"]
    return []
