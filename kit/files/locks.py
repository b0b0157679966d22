"""One folder, one writer: an advisory lock that names its holder.

A training run's folder (kit.train), a notebook's output folder (kit.cli.runner) and a download's
folder (kit.cli.download, which removes its lock file when it ends) are each written by one
process at a time. The lock is `fcntl.flock` on `<folder>/.lock`: the kernel releases it
when its process ends, however it ends (SIGKILL, preemption, a lost node), so no stale lock
outlives its holder and nothing needs cleaning. The file records the holder (host, pid, command,
start time) so that a refused second writer can say who holds the folder. flock works on local
disks and on network file systems mounted with lock support (NFSv4, Lustre with `flock`).

Where the file system refuses flock (Lustre mounted `noflock`, NFS without a lock daemon: ENOSYS,
ENOLCK, EOPNOTSUPP), the lock falls back to creating `<folder>/.lock.excl` exclusively (O_EXCL),
holding the same record, removed when the block ends. A holder on this host that has died is
recognised by its pid and its file replaced; one on another host that was killed leaves the file
behind, and the refusal says to delete it once that process is gone.

`kit check` asks who holds an output folder (`held_by`) without taking the lock, so that it
names a running `kit run` rather than calling its folder valid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".lock"
#: the lock file of the fallback where flock is not supported (created with O_EXCL)
EXCLUSIVE_FILE = ".lock.excl"
#: flock's errors on a file system that does not support it
UNSUPPORTED = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP)


class FolderLocked(RuntimeError):
    """Another live process holds the folder."""


def _record(purpose: str) -> bytes:
    return json.dumps(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.time(),
            "purpose": purpose,
            "command": " ".join(sys.argv),
        }
    ).encode()


def _describe(file: Path) -> str:
    try:
        info = json.loads(file.read_text())
    except (OSError, ValueError):
        return "an unknown process"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return (
        f"pid {info.get('pid')} on {info.get('host')} since {started} "
        f"({info.get('purpose')}: {info.get('command')})"
    )


def holder(folder: Path) -> str:
    """Who holds (or last held) a folder's lock, in words."""
    fallback = Path(folder) / EXCLUSIVE_FILE
    return _describe(fallback if fallback.exists() else Path(folder) / LOCK_FILE)


def held_by(folder: str | Path) -> str | None:
    """Who holds `folder` now, in words (None when nobody does), asked without taking the lock
    or creating anything: what `kit check` says of a folder a running `kit run` writes."""
    folder = Path(folder)
    fallback = folder / EXCLUSIVE_FILE
    if fallback.exists() and _alive_here(fallback):
        return _describe(fallback)
    try:
        descriptor = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None  # no lock file: never held
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return holder(folder)
    except OSError:
        return None  # flock unsupported: the fallback file above is the lock
    finally:
        os.close(descriptor)  # releases the shared lock, if taken
    return None


def _same_file(descriptor: int, path: Path) -> bool:
    """Whether `path` still names the file open as `descriptor` (a holder that removes its lock
    file on leaving may have removed it between our open and our flock)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (found.st_dev, found.st_ino) == (opened.st_dev, opened.st_ino)


@contextlib.contextmanager
def hold(folder: str | Path, purpose: str, remove: bool = False) -> Iterator[None]:
    """Hold `folder` for the duration of the block; raise FolderLocked naming the holder when a
    live process already holds it. With `remove`, the lock file is removed when the block ends
    (a folder that is not the kit's alone, such as a download's), while still locked, so that a
    process that opened it meanwhile finds it gone and opens the new one."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        descriptor = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            break  # said below, with the descriptor still open
        if _same_file(descriptor, folder / LOCK_FILE):
            break
        os.close(descriptor)  # locked a file its holder removed on leaving: open the new one
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderLocked(
                f"{folder}: in use by {holder(folder)}; wait for it to finish or "
                "stop that process first"
            ) from None
        except OSError as error:
            if error.errno not in UNSUPPORTED:
                raise OSError(
                    error.errno, f"{folder / LOCK_FILE}: cannot lock the folder ({error.strerror})"
                ) from None
            print(
                f"note: {folder / LOCK_FILE}: the file system does not support flock "
                f"({error.strerror}); locking with {EXCLUSIVE_FILE} instead",
                file=sys.stderr,
            )
            with _exclusive(folder, purpose):
                yield
            return
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, _record(purpose), 0)
        try:
            yield
        finally:
            if remove:
                (folder / LOCK_FILE).unlink(missing_ok=True)
    finally:
        os.close(descriptor)  # closing the descriptor releases the lock


def _alive_here(file: Path) -> bool:
    """Whether the lock file's holder runs on this host and is alive (False when it is gone;
    True when it runs elsewhere, which cannot be told from here)."""
    try:
        info = json.loads(file.read_text())
    except (OSError, ValueError):
        return True  # being written by its holder right now
    if info.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(info.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


@contextlib.contextmanager
def _exclusive(folder: Path, purpose: str) -> Iterator[None]:
    """The fallback lock: `<folder>/.lock.excl` created with O_EXCL, removed at the end."""
    file = folder / EXCLUSIVE_FILE
    for _attempt in range(2):
        try:
            descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            if _alive_here(file):
                raise FolderLocked(
                    f"{folder}: in use by {_describe(file)} (lock file {file}, flock being "
                    "unsupported here); wait for it to finish, or delete that file once that "
                    "process is gone"
                ) from None
            file.unlink(missing_ok=True)  # its holder on this host died
    else:
        raise FolderLocked(f"{folder}: {file} keeps reappearing; another process is starting")
    try:
        os.write(descriptor, _record(purpose))
        os.close(descriptor)
        yield
    finally:
        file.unlink(missing_ok=True)
