"""What `python -m kit download` keeps of a download: `<archive>.kit.json` beside the archive,
and the rules that make it safe to act on.

The record is written by the kit alone, after its own checks, and acted on only once validated.
No archive can write it: an archive whose top level holds a name the kit keeps for its own files
(the archive's, any `*.kit.json` record, a `*.partial` download, a `*.unpacking` folder) is
refused before anything of it leaves the unpacking folder. Every path a record names must be a
plain relative path under one of the top-level entries its download unpacked (`extracted`), each
entry a file or folder whose files the record lists with their size and SHA-256 (`written`), and
the files the profile reads (`files`) among them. A record failing any of this is void: the
download stops with one line naming it and deletes nothing.

A later download replaces an earlier one's entries file by file: only the files the record lists
(and the `.sha256` the kit wrote beside each), then the folders the record lists once they are
empty. A record is trusted only as far as the disk agrees: each file is deleted only when its
size and SHA-256, found now, are those the record lists. An entry holding anything else (a
file, link or folder of the user's, a file that differs from the record) is refused, naming it,
before anything is deleted.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from kit.files import files
from kit.files.fetch import DownloadError
from kit.files.locks import EXCLUSIVE_FILE, LOCK_FILE

#: the suffixes of the names the kit keeps for its own files in a download's folder
RECORD_SUFFIX, PARTIAL_SUFFIX, UNPACKING_SUFFIX = ".kit.json", ".partial", ".unpacking"
_SHA256 = re.compile(r"[0-9a-f]{64}")

Entry = dict[str, Any]  # {"size": bytes, "sha256": hex digest}


def record_file(folder: Path, archive: str) -> Path:
    return folder / f"{archive}{RECORD_SUFFIX}"


def unpacking_folder(folder: Path, archive: str) -> Path:
    return folder / f".{archive}{UNPACKING_SUFFIX}"


def kept_for_the_kit(name: str, archive: str) -> bool:
    """Whether a top-level name is one the kit keeps for its own files (no archive may hold it):
    the archive, its record, a partial download, an unpacking folder, the folder's lock."""
    return name in (archive, LOCK_FILE, EXCLUSIVE_FILE) or name.endswith(
        (RECORD_SUFFIX, PARTIAL_SUFFIX, UNPACKING_SUFFIX)
    )


@dataclass(frozen=True)
class Record:
    """A download as the kit recorded it: the archive (URL, size, SHA-256, first download), the
    top-level entries it unpacked, every file it wrote and every folder it made there, the files
    the profile reads (hashed and verified), and whether the swap into the folder completed."""

    url: str
    archive: str
    size: int
    sha256: str
    first_downloaded: str
    extracted: tuple[str, ...]
    written: dict[str, Entry]
    folders: tuple[str, ...] = ()
    files: dict[str, Entry] = field(default_factory=dict)
    complete: bool = True

    def json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    def with_earlier(self, earlier: Record | None) -> Record:
        """This record, also listing what `earlier` lists and not yet complete: what is on disk
        while an earlier download's entries are replaced by this one's."""
        if earlier is None:
            return replace(self, files={}, complete=False)
        return replace(
            self,
            extracted=tuple(sorted({*earlier.extracted, *self.extracted})),
            written=earlier.written | self.written,
            folders=tuple(sorted({*earlier.folders, *self.folders})),
            files={},
            complete=False,
        )


def manifest(root: Path, known: dict[str, Entry]) -> tuple[dict[str, Entry], tuple[str, ...]]:
    """Every file under `root` (by path relative to it) with its size and SHA-256, those of
    `known` taken as given, and every folder; a link or special file is an error."""
    written, folders = {}, []
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise DownloadError(f"{path}: neither a file nor a folder; the archive is refused")
        if path.is_dir():
            folders.append(name)
        else:
            written[name] = known.get(name) or {
                "size": path.stat().st_size,
                "sha256": files.file_hash(path),
            }
    return written, tuple(folders)


def _plain(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return (
        bool(parts)
        and "\\" not in name
        and not PurePosixPath(name).is_absolute()
        and all(part not in ("", ".", "..") for part in parts)
        and PurePosixPath(*parts).as_posix() == name
    )


def _entries(value: Any, key: str) -> dict[str, Entry]:
    if not isinstance(value, dict):
        raise ValueError(f"{key} is not a mapping")
    for name, entry in value.items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("size"), int)
            and not isinstance(entry.get("size"), bool)
            and entry["size"] >= 0
            and isinstance(entry.get("sha256"), str)
            and _SHA256.fullmatch(entry["sha256"])
        ):
            raise ValueError(f"{key}: {name!r} has no size and SHA-256")
    return {
        name: {"size": entry["size"], "sha256": entry["sha256"]} for name, entry in value.items()
    }


def _parsed(raw: Any, archive: str) -> Record:
    """A record's content, typed and checked on its own (ValueError naming the first fault)."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if raw.get("archive") != archive:
        raise ValueError(f"it records archive {raw.get('archive')!r}, not {archive!r}")
    text = {key: raw.get(key) for key in ("url", "sha256", "first_downloaded")}
    url, sha256, first = (value if isinstance(value, str) else None for value in text.values())
    if url is None or sha256 is None or first is None:
        raise ValueError("url, sha256 or first_downloaded is missing")
    extracted = raw.get("extracted")
    if not isinstance(extracted, list) or not all(isinstance(n, str) for n in extracted):
        raise ValueError("extracted is not a list of names")
    for name in extracted:
        if not _plain(name) or "/" in name or kept_for_the_kit(name, archive):
            raise ValueError(f"extracted names {name!r}, which is no entry of the folder's own")
    listed = _entries(raw.get("files", {}), "files")
    # a record of an earlier kit lists no `written`: its files are all it wrote
    written = _entries(raw["written"], "written") if "written" in raw else listed
    folders = raw.get("folders")
    if folders is None:
        folders = sorted(
            {parent.as_posix() for n in written for parent in PurePosixPath(n).parents}
        )
        folders = [name for name in folders if name != "."]
    if not isinstance(folders, list) or not all(isinstance(n, str) for n in folders):
        raise ValueError("folders is not a list of paths")
    for name in [*written, *folders]:
        if not _plain(name) or PurePosixPath(name).parts[0] not in extracted:
            raise ValueError(f"it names {name!r}, which is not inside an entry it unpacked")
    for name, entry in listed.items():
        if written.get(name) != entry:
            raise ValueError(f"files lists {name!r}, which written does not hold as such")
    for name in extracted:
        if not any(n == name or n.startswith(f"{name}/") for n in [*written, *folders]):
            raise ValueError(f"extracted names {name!r}, whose files it does not list")
    size, complete = raw.get("size"), raw.get("complete", True)
    if not isinstance(size, int) or not isinstance(complete, bool):
        raise ValueError("size or complete is not of its type")
    return Record(
        url,
        archive,
        size,
        sha256,
        first,
        tuple(extracted),
        written,
        tuple(folders),
        listed,
        complete,
    )


def void(path: Path, why: str) -> DownloadError:
    return DownloadError(
        f"{path}: not a download record this kit wrote, or changed since ({why}); nothing was "
        "deleted. Move away what it names (or delete it, if you know what the folder holds) and "
        "run the same command again"
    )


def read(folder: Path, archive: str) -> Record | None:
    """The record of `archive`'s download into `folder`, validated against the folder as it is
    now; None when there is none; DownloadError (deleting nothing) when it is void."""
    path = record_file(folder, archive)
    if not os.path.lexists(path):
        return None
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("not a plain file")
        record = _parsed(json.loads(path.read_text()), archive)
    except (ValueError, OSError) as error:
        raise void(path, str(error)) from None
    for name in record.extracted:
        entry = folder / name
        if entry.is_symlink() or (
            os.path.lexists(entry) and not (entry.is_dir() or entry.is_file())
        ):
            raise void(path, f"{entry} is a link or special file, which kit download never writes")
        if entry.is_file() and name not in record.written:
            raise void(path, f"{entry} is a file, but the record lists it as a folder")
    return record


def write(folder: Path, record: Record) -> None:
    files.write_text(record_file(folder, record.archive), record.json())


def owned(folder: Path, record: Record) -> list[Path]:
    """Every file and folder of the record's entries, deepest first, once each is found to be
    one the record lists and each file, hashed now, to be as the record says the kit wrote it;
    DownloadError naming the first that is not, before anything is deleted (so a folder goes
    only with every file in it matching)."""
    kept = {*record.written, *(f"{name}{files.SIDECAR_SUFFIX}" for name in record.written)}
    found: list[Path] = []
    for name in record.extracted:
        top = folder / name
        paths = [top] if top.is_file() else [top, *top.rglob("*")] if top.is_dir() else []
        for path in paths:
            relative = path.relative_to(folder).as_posix()
            listed = relative in record.folders if path.is_dir() else relative in kept
            if path.is_symlink() or not listed or not (path.is_dir() or path.is_file()):
                raise DownloadError(
                    f"{path}: inside {top}, which an earlier `kit download` unpacked, but not "
                    "written by it; nothing was deleted: move it out of there and run the same "
                    "command again"
                )
            found.append(path)
    for path in found:  # hashed once nothing unlisted is found: the cheap refusal first
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and (differs := _differs(path, relative, record)):
            raise DownloadError(
                f"{path}: not the file {record_file(folder, record.archive).name} says kit "
                f"download wrote there ({differs}); nothing was deleted: it may be yours, or a "
                "damaged copy: move it out of there (or delete it) and run the same command again"
            )
    return sorted(found, key=lambda path: len(path.parts), reverse=True)


def _differs(path: Path, relative: str, record: Record) -> str:
    """How a file on disk differs from what the record says the kit wrote at `relative` (its
    size, then its SHA-256; a `.sha256` the record does not list must name the file and accept
    what the record lists of it); empty when it is that file."""
    entry = record.written.get(relative)
    if entry is None:  # a sidecar beside a written file, listed by an older kit's record
        try:
            said = json.loads(path.read_text())
        except (OSError, ValueError):
            return "not the hash file it wrote"
        owner = relative.removesuffix(files.SIDECAR_SUFFIX)
        named = isinstance(said, dict) and said.get("file") == PurePosixPath(owner).name
        accepted = said.get("accepted") if isinstance(said, dict) else None
        ok = named and isinstance(accepted, list) and record.written[owner] in accepted
        return "" if ok else "not the hash file it wrote"
    size = path.stat().st_size
    if size != entry["size"]:
        return f"it is {size:,} bytes, the record says {entry['size']:,}"
    if (digest := files.file_hash(path)) != entry["sha256"]:
        return f"its SHA-256 is {digest}, the record says {entry['sha256']}"
    return ""


def delete(paths: list[Path]) -> None:
    """Remove what `owned` found: files, then the folders they leave (deepest first)."""
    for path in paths:
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)
