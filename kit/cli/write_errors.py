"""What a failed write step of `python -m kit run` says: one line naming the file, the space
written and free where the disk is full, and how to resume (kit.files.files.DiskFullError), never
a chained traceback; the notebooks' results written before it stay."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kit.files import files
from kit.runtime import machine


def disk_full_line(output: Path, partial: Path, error: BaseException) -> str | None:
    """What to say when saving a notebook's outputs found the disk full (None for any other
    error): one line naming the file and the free space. A partial copy torn by the full disk is
    removed, so that nothing half-written is taken for the run's notebook."""
    if isinstance(error, files.DiskFullError):  # an atomic write's: it names its file
        return str(error)
    full = files.disk_full(error, partial)
    if full is None:
        return None
    named = Path(getattr(error, "filename", None) or partial)
    try:
        free = machine.byte_size(shutil.disk_usage(output.parent).free)
    except OSError:
        free = "unknown"
    partial.unlink(missing_ok=True)
    kept = f"; the last good run's stays in {output}" if output.exists() else ""
    return (
        f"{named}: {os.strerror(full.errno or 0).lower()} while saving the notebook's outputs "
        f"({free} free in {output.parent}); the partial copy is removed{kept}. Free "
        "space (or set output_dir to another disk) and re-run the same command to resume."
    )


def write_error(error: BaseException) -> str:
    """One line for an error of a write step: a full disk names the file, the space written and
    free, and how to resume (kit.files.files.DiskFullError); another OSError its file and reason."""
    if isinstance(error, OSError) and not isinstance(error, files.DiskFullError):
        named = getattr(error, "filename", None)
        full = files.disk_full(error, Path(named)) if named else None
        if full is not None:
            return str(full)
        reason = (error.strerror or str(error)).lower()
        return (
            f"{named + ': ' if named else ''}{reason}; the notebooks' results are saved: fix "
            "it and re-run the same command to resume"
        )
    return str(error)
