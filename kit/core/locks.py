"""One folder, one writer: an advisory lock that names its holder.

A training run's folder (kit.train) and a notebook's output folder (kit.cli.runner) are each written
by one process at a time. The lock is `fcntl.flock` on `<folder>/.lock`: the kernel releases it
when its process ends, however it ends (SIGKILL, preemption, a lost node), so no stale lock
outlives its holder and nothing needs cleaning. The file records the holder (host, pid, command,
start time) so that a refused second writer can say who holds the folder. flock works on local
disks and on network file systems mounted with lock support (NFSv4, Lustre with `flock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".lock"


class FolderLocked(RuntimeError):
    """Another live process holds the folder."""


def holder(folder: Path) -> str:
    """Who holds (or last held) a folder's lock, in words."""
    try:
        info = json.loads((Path(folder) / LOCK_FILE).read_text())
    except (OSError, ValueError):
        return "an unknown process"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return (f"pid {info.get('pid')} on {info.get('host')} since {started} "
            f"({info.get('purpose')}: {info.get('command')})")


@contextlib.contextmanager
def hold(folder: str | Path, purpose: str) -> Iterator[None]:
    """Hold `folder` for the duration of the block; raise FolderLocked naming the holder when a
    live process already holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderLocked(f"{folder}: in use by {holder(folder)}; wait for it to finish or "
                               "stop that process first") from None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                  "purpose": purpose, "command": " ".join(sys.argv)}
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps(record).encode(), 0)
        yield
    finally:
        os.close(descriptor)  # closing the descriptor releases the lock
