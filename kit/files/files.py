"""Files that are never half-written and never silently changed.

A file is replaced atomically (written under a temporary name `.<name>.<pid>.tmp` in the same
folder, synced, renamed). A file whose content matters across runs (a checkpoint) also has a
sidecar `<name>.sha256` recording its size and SHA-256, written atomically as well; reading the
file back checks them. The sidecar is updated in two steps around the rename so that a kill
between any two writes leaves a file the sidecar accepts: before the rename it accepts the old
and the new content, after it only the new one.

Hashing costs one pass over the bytes on one core, at save and again on load: once per resume
for a checkpoint (its rate: benchmarks/file_hash.py, docs/benchmarks.md).

A write that runs out of space (ENOSPC, or EDQUOT for a quota) removes its temporary file and
raises DiskFullError, naming the file and the free space of its file system: otherwise the error
can name neither, as torch.save's zip writer reports a short write as `unexpected pos`
(caffe2/serialize/inline_container.cc). Kept free of torch so that `python -m kit check` and the
runner stay light.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

SIDECAR_SUFFIX = ".sha256"
#: the temporary names atomic_write uses: .<name>.<pid>.tmp
TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")


class IntegrityError(ValueError):
    """A file whose content is not what was recorded when it was written."""


class DiskFullError(OSError):
    """A write that found no space (or no quota) left on its file system; its message names the
    file, the free space and what to do."""

    def __init__(self, number: int, message: str, filename: str) -> None:
        super().__init__(number, message, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message


#: free bytes under which a writer's RuntimeError is taken for a full disk (torch's zip writer
#: raises one for a short write, whatever the cause, and may not chain the OSError behind it)
NEARLY_FULL = 1 << 20
_FULL = (errno.ENOSPC, errno.EDQUOT)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _full_errno(error: BaseException, folder: Path) -> int | None:
    """ENOSPC or EDQUOT when `error` (or one it arose from) says the disk is full, or it is a
    writer's RuntimeError on a file system with (almost) no space left; None otherwise."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    if isinstance(error, RuntimeError):
        with contextlib.suppress(OSError):
            if shutil.disk_usage(folder).free < NEARLY_FULL:
                return errno.ENOSPC
    return None


def disk_full(
    error: BaseException, path: Path, temporary: Path | None = None
) -> DiskFullError | None:
    """The DiskFullError naming `path` that `error` amounts to (None when it is no full disk),
    with `temporary` (the partial file of an atomic write) removed either way; without one,
    `path` was appended to."""
    number = None if isinstance(error, DiskFullError) else _full_errno(error, path.parent)
    written = ""
    if temporary is not None:
        with contextlib.suppress(OSError):
            written = f"{_megabytes(temporary.stat().st_size)} written; "
    try:
        usage = shutil.disk_usage(path.parent)  # before the partial file goes: when it failed
        space = f"{_megabytes(usage.free)} free of {_megabytes(usage.total)}"
    except OSError:
        space = "free space unknown"
    if temporary is not None:
        temporary.unlink(missing_ok=True)
    if number is None:
        return None
    kept = (
        f"The partial file is removed and the previous {path.name}, if any, is kept"
        if temporary is not None
        else "Its last line may be torn (a resumed run drops it)"
    )
    return DiskFullError(
        number,
        (
            f"{path}: {os.strerror(number).lower()} while writing it ({written}{space} on the "
            f"file system of {path.parent}). {kept}: free space there (or "
            "write to another disk) and re-run the same command to resume."
        ),
        str(path),
    )


class _HashingWriter:
    """A binary file handle that also hashes and counts what goes through it."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        self.digest.update(data)
        self.size += memoryview(data).nbytes
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()

    def __getattr__(self, name: str) -> Any:  # seek/tell/fileno for writers that ask
        return getattr(self.handle, name)


def temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_write(path: Path) -> Iterator[IO[bytes]]:
    """A binary file handle whose content replaces `path` only once complete (DiskFullError
    when the disk fills up first)."""
    temporary = temporary_name(path)
    try:
        with open(temporary, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as error:
        if (full := disk_full(error, path, temporary)) is not None:
            raise full from error
        raise
    os.replace(temporary, path)


def write_text(path: Path, text: str) -> None:
    """`text` (UTF-8) replacing `path` only once written in full (`atomic_write`)."""
    with atomic_write(path) as handle:
        handle.write(text.encode())


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def _write_sidecar(path: Path, accepted: list[dict[str, Any]]) -> None:
    with atomic_write(sidecar(path)) as handle:
        handle.write(json.dumps({"file": path.name, "accepted": accepted}).encode())


def _recorded(path: Path) -> list[dict[str, Any]] | None:
    """The contents the sidecar accepts; None without a sidecar."""
    record_path = sidecar(path)
    if not record_path.exists():
        return None
    try:
        accepted = json.loads(record_path.read_text())["accepted"]
        return [{"size": int(a["size"]), "sha256": str(a["sha256"])} for a in accepted]
    except (ValueError, KeyError, TypeError) as error:
        raise IntegrityError(
            f"{record_path}: unreadable hash record ({error!r}); delete it "
            f"to accept {path.name} unverified"
        ) from None


def _current(path: Path) -> list[dict[str, Any]]:
    """What the sidecar accepts for the file now in place (nothing when it has no usable one)."""
    try:
        return (_recorded(path) or [])[-1:]
    except IntegrityError:
        return []


@contextlib.contextmanager
def hashed_write(path: Path) -> Iterator[IO[bytes]]:
    """atomic_write, with the content's size and SHA-256 recorded in the sidecar."""
    temporary = temporary_name(path)
    try:
        with open(temporary, "wb") as raw:
            writer = _HashingWriter(raw)
            yield writer  # type: ignore[misc]
            raw.flush()
            os.fsync(raw.fileno())
        new = {"size": writer.size, "sha256": writer.digest.hexdigest()}
        previous = _current(path) if path.exists() else []
        _write_sidecar(path, previous + [new])  # a kill from here on: old or new is accepted
    except BaseException as error:
        if (full := disk_full(error, path, temporary)) is not None:
            raise full from error
        raise
    os.replace(temporary, path)
    _write_sidecar(path, [new])


def change_stamp(path: Path) -> tuple[int, int, int, int]:
    """A file's size, modification time, status-change time and inode number: what every change
    made through the file system alters. The kernel sets the status-change time (ctime) to the
    current time on every write, truncation, rename or change of times, and nothing in user
    space can set it back (`touch -r` and utime(2) restore only the access and modification
    times, which copies and archives also carry over), so an unchanged stamp means a file not
    changed since, at no more cost than a stat. Writes below the file system (a raw device, bit
    rot), and on tmpfs writes through a shared memory mapping (the kernel updates no time
    there), change no stamp; only a hash sees those."""
    status = path.stat()
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_hash(path: Path) -> str:
    """Write the sidecar of a file already in place (one unpacked from a checked archive), so
    that reading it back checks it; returns its SHA-256."""
    digest = file_hash(path)
    _write_sidecar(path, [{"size": path.stat().st_size, "sha256": digest}])
    return digest


def verify(path: Path, rebuild: str) -> bool:
    """Check `path` against its sidecar: False when there is none (not written by hashed_write),
    True when it matches; IntegrityError naming the file and `rebuild` (how to make it again)
    otherwise."""
    accepted = _recorded(path)
    if accepted is None:
        return False
    size = path.stat().st_size
    if size in {a["size"] for a in accepted} and file_hash(path) in {a["sha256"] for a in accepted}:
        return True
    raise IntegrityError(
        f"{path}: content differs from the hash recorded when it was written "
        f"({sidecar(path).name}); the file is corrupt. {rebuild}"
    )


def remove_stale_temporaries(folder: Path, everything: bool = False) -> list[Path]:
    """Delete the temporary files of interrupted atomic writes under `folder`: those whose
    writing process is gone, or all of them when `everything` (the caller holds the folder)."""
    removed = []
    for directory, _, names in os.walk(folder):
        for name in names:
            match = TEMPORARY.match(name)
            if match and (everything or not _alive(int(match["pid"]))):
                path = Path(directory) / name
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
