"""What the members of a downloaded archive may be, decided from their headers before any is
written (kit.files.fetch.safe_extract reads them all first).

Every member is refused, and the archive with it, when it could land outside the folder (an
absolute path, `..`), is no plain file or folder (a link, a device), is sparse (its size on disk
is not what it unpacks to), has a control character in its name, or a path a file system cannot
take (a name over 255 bytes, more than MEMBER_DEPTH folders deep: tarfile creates a member's
folders recursively, so thousands exhaust Python's stack). Against what the release is known to
hold (a `Release`), a member under a name the downloader keeps for its own files, more members
than it holds with a margin, and more bytes to unpack, in one file or in all, than its known
sizes with a margin refuse the archive too; a member outside its list of files is skipped,
never written, and named in what the download says.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from tarfile import TarInfo

from kit.files import paths

#: the most folders deep a member may lie (the release's lie 3 deep, CIFAR's 2)
MEMBER_DEPTH = 32


@dataclass(frozen=True)
class Release:
    """What an archive is known to hold: the files it may unpack (paths as the archive names
    them), the most members it may have, and the most bytes it may unpack in one file and in
    all (the known sizes with a margin, said in `known`)."""

    files: frozenset[str]
    most_members: int
    most_file_bytes: int
    most_bytes: int
    known: str
    #: top-level names no member may take (the downloader's own files), and those files in words
    reserved: Callable[[str], bool] = field(default=lambda _name: False)
    reserved_are: str = ""

    def holds(self, member: TarInfo) -> bool:
        """Whether a member is one of the release's files or a folder holding one."""
        name = plain_name(member)
        if member.isdir():
            return any(PurePosixPath(file).is_relative_to(name) for file in self.files)
        return name in self.files


def plain_name(member: TarInfo) -> str:
    """A member's path without `./` or a trailing `/`."""
    return PurePosixPath(member.name).as_posix()


def shown(name: str, most: int = 80) -> str:
    """A member's name as a message shows it: quoted, control characters escaped, a long one
    cut to its start and end."""
    if len(name) > most:
        return f"{name[: most // 2]!r}...{name[-most // 4 :]!r} ({len(name):,} characters)"
    return repr(name)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def unsafe(member: TarInfo) -> str | None:
    """Why a member may not be written anywhere, whatever the release; None when it may."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith("/"):
        return "an absolute path"
    if ".." in name.parts:
        return "a path out of the folder ('..')"
    if any(unicodedata.category(character) == "Cc" for character in member.name):
        return "named with a control character"
    if len(name.parts) > MEMBER_DEPTH:
        return f"{len(name.parts):,} folders deep (a release holds at most {MEMBER_DEPTH})"
    longest = max((len(os.fsencode(part)) for part in name.parts), default=0)
    if longest > paths.NAME_BYTES:
        return (
            f"a path holding a name of {longest:,} bytes (a file system takes at most "
            f"{paths.NAME_BYTES})"
        )
    if len(os.fsencode(member.name)) > paths.PATH_BYTES:
        return f"a path of {len(os.fsencode(member.name)):,} bytes"
    if member.issym() or member.islnk():
        return f"a link (to {member.linkname!r})"
    if member.issparse():
        return f"a sparse file ({_megabytes(member.size)} with holes)"
    if not (member.isfile() or member.isdir()):
        return "a device, pipe or other special file"
    return None


def refused(member: TarInfo, count: int, release: Release | None) -> str | None:
    """Why the archive is refused at its `count`-th member, read so far: the member's own
    fault (`unsafe`), or more members than the release holds; None otherwise."""
    if release is not None and count > release.most_members:
        return (
            f"holds more than {release.most_members:,} members, more than {release.known} "
            "holds with a margin"
        )
    if problem := unsafe(member):
        return f"member {shown(member.name)} is {problem}"
    top = PurePosixPath(member.name).parts[:1]
    if release is not None and top and release.reserved(top[0]):
        return (
            f"member {shown(member.name)} takes a name kit download keeps for its own files "
            f"({release.reserved_are})"
        )
    return None


def kept(members: list[TarInfo], release: Release | None) -> tuple[list[TarInfo], list[str]]:
    """The members to write and the names of those skipped (outside the release's list);
    ValueError saying why the archive is refused when what it would write is larger than the
    release is known to be."""
    if release is None:
        return members, []
    written = [member for member in members if release.holds(member)]
    skipped = [plain_name(member) for member in members if not release.holds(member)]
    for member in written:
        if member.size > release.most_file_bytes:
            raise ValueError(
                f"member {shown(member.name)} unpacks to {_megabytes(member.size)}, more than "
                f"the {_megabytes(release.most_file_bytes)} a file of {release.known} may be"
            )
    if (total := sum(member.size for member in written)) > release.most_bytes:
        raise ValueError(
            f"its members unpack to {_megabytes(total)}, more than the "
            f"{_megabytes(release.most_bytes)} {release.known} may be"
        )
    return written, skipped
