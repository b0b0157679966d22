"""Downloads that resume and archives that unpack safely: what `python -m kit download` is made of.

`fetch` streams a URL (http, https, file, or a plain local path: a mirror or a copy on an
offline cluster) into `<name>.partial` beside the target, resuming a partial file with an HTTP
Range request (from the start again, saying so, when the server ignores it), checking the length
the server announced and the free disk space before it starts; the caller checks the hash and
renames it (`finish`), so a file under the target's name is always complete. `safe_extract`
unpacks a tar archive once every member's header is read and found acceptable
(kit.files.archive_members: no absolute path, `..`, link, device or sparse file, and no more than
the release holds), and applies Python's `tarfile` data filter on top (https://docs.python.org/3/library/tarfile.html#tarfile.data_filter).

Free of torch; the standard library's urllib only.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import http.client
import io
import os
import re
import shutil
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from kit.files import archive_members

#: bytes read at a time
CHUNK = 1 << 20
#: seconds a connection may stay silent
TIMEOUT_S = 60.0
#: seconds between two progress lines when the output is no terminal
PLAIN_EVERY_S = 30.0
_CONTENT_RANGE = re.compile(r"bytes (?:(\d+)-\d+|\*)/(\d+)")


class DownloadError(RuntimeError):
    """A download or unpacking that did not complete; the message says what is left on disk and
    what to do."""


class UnpackingError(DownloadError):
    """An archive that could not be written out (a full disk, a read-only folder), not one
    found unsound: it is kept for the next run."""


def partial_name(target: Path) -> Path:
    return target.with_name(target.name + ".partial")


def free_bytes(folder: Path) -> int:
    """Free bytes on `folder`'s file system (a function of its own, so tests can fill a disk)."""
    return shutil.disk_usage(folder).free


def _megabytes(size: float) -> str:
    return f"{size / 1e6:,.1f} MB"


class Progress:
    """Bytes, rate and time left: a tqdm bar on a terminal, a plain line every PLAIN_EVERY_S
    seconds (and at the end) otherwise."""

    def __init__(self, label: str, total: int | None, done: int, stream: IO[str]) -> None:
        self.label, self.total, self.done, self.stream = label, total, done, stream
        self.started = self.last = time.monotonic()
        self.first = done
        self.bar = None
        if stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, initial=done, unit="B", unit_scale=True, desc=label, file=stream
            )

    def update(self, size: int) -> None:
        self.done += size
        if self.bar is not None:
            self.bar.update(size)
        elif time.monotonic() - self.last >= PLAIN_EVERY_S:
            self.line()

    def line(self) -> None:
        self.last = now = time.monotonic()
        rate = (self.done - self.first) / max(now - self.started, 1e-9)
        of = "" if self.total is None else f" of {_megabytes(self.total)}"
        left = ""
        if self.total and rate > 0:
            left = f", about {(self.total - self.done) / rate:,.0f} s left"
        print(
            f"{self.label}: {_megabytes(self.done)}{of}, {_megabytes(rate)}/s{left}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            self.line()


def _local_path(url: str) -> Path | None:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    return Path(url) if parsed.scheme == "" else None


@contextlib.contextmanager
def _opened(url: str, start: int, manual: str) -> Iterator[tuple[IO[bytes], int, int | None]]:
    """The response from `start` on: its stream, the offset it begins at (0 when the server
    ignored the Range) and the total length announced (None when none was)."""
    local = _local_path(url)
    if local is not None:
        if not local.is_file():
            raise DownloadError(f"{url}: no such file (a local copy of the archive). {manual}")
        with local.open("rb") as handle:
            total = local.stat().st_size
            handle.seek(min(start, total))
            yield handle, min(start, total), total
        return
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as error:
        announced = _CONTENT_RANGE.match(error.headers.get("Content-Range") or "")
        if error.code == 416 and announced and int(announced[2]) == start:
            yield io.BytesIO(), start, start  # already complete: nothing left to send
            return
        if error.code == 416:
            raise DownloadError(
                f"{url}: the server refuses to resume from byte {start:,} (HTTP 416); delete "
                "the .partial file and run again"
            ) from None
        raise DownloadError(
            f"{url}: the server answered HTTP {error.code} {error.reason}. {manual}"
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(f"{url}: cannot connect ({reason}). {manual}") from None
    with response:
        if response.status == 206:
            announced = _CONTENT_RANGE.match(response.headers.get("Content-Range") or "")
            if announced is None or int(announced[1] or -1) != start:
                raise DownloadError(
                    f"{url}: the server sent a part other than the one asked for (bytes "
                    f"{start:,}-; Content-Range {response.headers.get('Content-Range')!r})"
                )
            yield response, start, int(announced[2])
            return
        length = response.headers.get("Content-Length")
        yield response, 0, None if length is None else int(length)


def fetch(
    url: str,
    target: Path,
    *,
    manual: str,
    expected_size: int | None = None,
    unpacked_ratio: float = 1.1,
    stream: IO[str] | None = None,
) -> Path:
    """Download `url` into `target`'s `.partial` file, resuming what an earlier run left there,
    and return it complete (the length announced, and `expected_size` when given). Refuses
    before writing when the disk lacks the bytes left plus the archive unpacked (its size times
    `unpacked_ratio`). A dropped connection keeps the partial file (a later run resumes it);
    a file of the wrong length is removed. `manual` says how to get the file by hand."""
    stream = stream or sys.stderr
    partial = partial_name(target)
    start = partial.stat().st_size if partial.exists() else 0
    with _opened(url, start, manual) as (response, offset, total):
        if start and offset == 0:
            print(
                f"{url}: the server ignores resuming (HTTP Range), so the download starts "
                f"again from the beginning ({_megabytes(start)} discarded)",
                file=stream,
            )
        if expected_size is not None and total is not None and total != expected_size:
            partial.unlink(missing_ok=True)
            raise DownloadError(
                f"{url}: the server announces {total:,} bytes, but the archive the kit records "
                f"has {expected_size:,}: another file (a mirror's error page?); nothing kept"
            )
        size = total if total is not None else expected_size
        needed = (0 if size is None else size - offset) + int((size or 0) * unpacked_ratio)
        free = free_bytes(target.parent)
        if size is not None and needed > free:
            raise DownloadError(
                f"{target.parent}: not enough free disk space: the download needs about "
                f"{_megabytes(needed)} ({_megabytes(size - offset)} left to fetch, then "
                f"unpacked), but {_megabytes(free)} is free; free space there or pass "
                "--to a folder on another disk"
            )
        _stream_into(response, partial, offset, total, url, stream)
    written = partial.stat().st_size
    if total is not None and written != total:
        raise DownloadError(
            f"{url}: the connection closed after {written:,} of the {total:,} bytes announced; "
            f"the partial file {partial} is kept: run the same command again to resume"
        )
    if expected_size is not None and written != expected_size:
        partial.unlink()
        raise DownloadError(
            f"{url}: received {written:,} bytes, but the archive the kit records has "
            f"{expected_size:,}; the file is removed"
        )
    return partial


def _stream_into(
    response: IO[bytes],
    partial: Path,
    offset: int,
    total: int | None,
    url: str,
    stream: IO[str],
) -> None:
    progress = Progress(partial.name.removesuffix(".partial"), total, offset, stream)
    try:
        with partial.open("ab" if offset else "wb") as handle:
            while block := _received(response, partial, total, url):
                handle.write(block)
                progress.update(len(block))
    except OSError as error:  # a write of ours (a full disk, a read-only folder): not the network
        kept = (
            f"the partial file {partial} is kept (a later run resumes it)"
            if partial.exists()
            else "nothing was written"
        )
        raise write_failure(error, partial, "downloading into it", kept) from None
    finally:
        progress.close()


def _received(response: IO[bytes], partial: Path, total: int | None, url: str) -> bytes:
    """The next block from the server; DownloadError when the connection breaks."""
    try:
        return response.read(CHUNK)
    except (OSError, http.client.HTTPException) as error:
        done = partial.stat().st_size if partial.exists() else 0
        of = "" if total is None else f" of {total:,}"
        raise DownloadError(
            f"{url}: the connection broke after {done:,}{of} bytes ({error!r}); the partial "
            f"file {partial} is kept: run the same command again to resume"
        ) from None


def write_failure(error: OSError, where: Path, doing: str, kept: str) -> DownloadError:
    """One line for a write of ours that failed while `doing`: the path, a full disk said as
    such with the space free there, any other reason as the system gives it; what is `kept`;
    and what to do."""
    path = Path(error.filename) if isinstance(error.filename, str) else where
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        try:
            free = f"{_megabytes(free_bytes(folder))} free there"
        except OSError:
            free = "free space unknown"
        reason = f"{os.strerror(error.errno).lower()} ({free})"
        advice = "free space there, or pass --to a folder on another disk"
    else:
        reason = (error.strerror or str(error)).lower()
        advice = "fix that, or pass --to another folder"
    return DownloadError(
        f"{path}: {reason} while {doing}; {kept}: {advice}, then run the same command again"
    )


def file_digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_extract(
    archive: Path, into: Path, release: archive_members.Release | None = None
) -> list[str]:
    """Unpack a (compressed) tar archive into the new folder `into`; the names of the members
    skipped as outside `release`'s files. Every member's header is read first, the archive to
    its end (gzip checks its CRC there: a flipped byte is found), and the whole archive refused
    before anything is written at the first unsafe member (kit.files.archive_members: absolute
    path, `..`, link, device, sparse file, control character, a name no file system takes), at
    more members or bytes than `release` is known to hold, or at a read error (a truncated or
    corrupt archive); `into` is removed on any failure, and a write that fails is an
    UnpackingError naming the path."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members: list[tarfile.TarInfo] = []
            for member in tar:
                members.append(member)
                if problem := archive_members.refused(member, len(members), release):
                    raise DownloadError(
                        f"{archive}: {problem}; the archive is refused and nothing of it is kept"
                    )
            while tar.fileobj is not None and tar.fileobj.read(CHUNK):
                pass  # to the end: gzip checks its CRC there
            try:
                written, skipped = archive_members.kept(members, release)
            except ValueError as error:
                raise DownloadError(
                    f"{archive}: {error}; the archive is refused and nothing of it is kept"
                ) from None
            into.mkdir(parents=True)
            for member in written:
                tar.extract(member, into, filter="data")
        return skipped
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        shutil.rmtree(into, ignore_errors=True)
        raise DownloadError(
            f"{archive}: truncated or corrupt archive ({error}); nothing of it is kept"
        ) from None
    except OSError as error:  # a write of ours (a full disk): the archive itself is sound
        shutil.rmtree(into, ignore_errors=True)
        raise UnpackingError(
            str(
                write_failure(
                    error,
                    into,
                    f"unpacking {archive}",
                    "nothing unpacked is kept, the archive is kept",
                )
            )
        ) from None
    except BaseException:
        shutil.rmtree(into, ignore_errors=True)
        raise


def finish(partial: Path, target: Path) -> Path:
    """The complete, checked download under its own name."""
    os.replace(partial, target)
    return target
