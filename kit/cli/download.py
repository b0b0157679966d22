"""`python -m kit download checkpoints|cifar10|cifar100 [--to DIR]`: the authors' released
checkpoints and the CIFAR datasets, fetched, checked and unpacked in one command.

The download resumes after an interrupt and is checked before it is renamed to its own name
(kit.files.fetch): against the length the server announced, and the size and MD5 torchvision
records for the CIFAR archives (torchvision/datasets/cifar.py: `CIFAR10.url`, `.tgz_md5`; a test
compares). The authors publish no checksum of theirs, so the SHA-256 of the first complete
download is recorded in a manifest beside it (`<archive>.kit.json`) and a later archive that
differs is refused until `--accept-new-archive`. The archive is unpacked safely into a folder of
its own, then checked there: every released checkpoint found (kit.experiments.timecat.layouts)
and loaded as the AlgoPerf ResNet-50 the kit reads, each given its `.sha256` (which the profile
then verifies); each CIFAR file against torchvision's MD5, and the kind's layout read. Whatever
fails is removed, so a later run trusts nothing half-done; only what passed moves into the
folder, replacing only what the record says an earlier download wrote
(kit.files.download_record). Running it again when all is in place hashes the files the profile
reads, and does nothing more when each is as recorded.
ImageNet-1k and iNat18 are not fetched (their licences ask for a sign-up): `kit check` says where
to get them.
"""

from __future__ import annotations

import datetime
import os
import shutil
import sys
from pathlib import Path
from typing import IO, Any

from kit.cli.releases import SOURCES, Source
from kit.data.preflight import folder_of_its_own
from kit.experiments.timecat import layouts
from kit.files import archive_members, download_record, files, locks
from kit.files.fetch import (
    DownloadError,
    UnpackingError,
    fetch,
    file_digest,
    finish,
    partial_name,
    safe_extract,
    write_failure,
)
from kit.params.params import ParameterError


def add_command(commands: Any) -> None:
    """The `download` subcommand and its arguments."""
    sub = commands.add_parser(
        "download",
        help="fetch the authors' released checkpoints or CIFAR-10/100 (resumable, checked, "
        "unpacked safely); ImageNet-1k and iNat18 are fetched by hand (kit check says where)",
    )
    sub.add_argument("what", choices=sorted(SOURCES))
    sub.add_argument(
        "--to",
        type=Path,
        default=None,
        help="the folder (default: $TIMECAT_CHECKPOINTS, or $TIMECAT_DATA/cifar10|cifar100)",
    )
    sub.add_argument(
        "--url",
        default=None,
        help="a mirror or a local copy (file:///..., or a path) instead of the published URL "
        "(also $TIMECAT_CHECKPOINTS_URL, $TIMECAT_CIFAR10_URL, $TIMECAT_CIFAR100_URL)",
    )
    sub.add_argument(
        "--accept-new-archive",
        action="store_true",
        help="accept an archive whose SHA-256 differs from the one recorded at the first download",
    )


def command(what: str, to: Path | None, url: str | None, accept_new: bool) -> int:
    """`python -m kit download`: 0 when everything is in place, 1 naming what failed."""
    try:
        folder = folder_for(what, to)
        print(download(what, folder, url, accept_new))
    except (DownloadError, ParameterError) as error:
        print(f"error: kit download {what}: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the folder or the record could not be written
        said = (
            str(error)
            if isinstance(error, files.DiskFullError)
            else str(write_failure(error, folder, "writing the download", "nothing is lost"))
        )
        print(f"error: kit download {what}: {said}", file=sys.stderr)
        return 1
    return 0


def folder_for(what: str, to: Path | None) -> Path:
    """The folder `what` is downloaded into: `--to`, else its default; refused, as `kit run`
    refuses an output folder, when it is no folder of its own (a file system root, the home
    folder, the repository or above)."""
    source = SOURCES[what]
    where = "--to"
    if to is None:
        root = os.environ.get(source.root)
        if not root:
            raise ParameterError(f"name a folder with --to, or set {source.root}")
        to, where = Path(root) / source.subfolder, source.root
    for problem in folder_of_its_own(to, "a download", f"name a folder for it ({where})", False):
        raise ParameterError(problem)
    return to


def download(
    what: str,
    folder: Path,
    url: str | None = None,
    accept_new: bool = False,
    stream: IO[str] | None = None,
) -> str:
    """Fetch, check, unpack and verify `what` into `folder`; what was done, as a line. The
    archive is unpacked and verified in a folder of its own; only then do its entries replace
    what the record says an earlier download wrote (kit.files.download_record). Whatever fails
    verification (the unpacked files, the archive) is removed. One download into a folder at a
    time (kit.files.locks): a second is refused, naming the process that holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with locks.hold(folder, f"kit download {what}", remove=True):
            return _download(what, folder, url, accept_new, stream)
    except locks.FolderLocked as error:
        raise DownloadError(f"{error}: one download into a folder at a time") from None


def _download(
    what: str, folder: Path, url: str | None, accept_new: bool, stream: IO[str] | None
) -> str:
    """`download` once the folder is held."""
    source = SOURCES[what]
    url = url or os.environ.get(source.variable) or source.url
    archive = folder / source.archive
    record = download_record.read(folder, source.archive)
    if record is not None and (said := _in_place(what, source, folder, record)):
        return said
    manual = (
        f"To get it another way, download {source.url} with any tool (on another machine if "
        f"need be), then run: python -m kit download {what} --to {folder} --url "
        f"file:///path/to/{source.archive}"
    )
    got = archive if archive.is_file() else None
    if got is None:
        got = fetch(url, archive, manual=manual, expected_size=source.size, stream=stream)
    sha256 = _checked(source, got, record, accept_new)
    finish(got, archive)
    unpacked, skipped = _unpack(archive, folder, source.release())
    try:
        verified, summary = _verify(what, source, unpacked)
        written, folders = download_record.manifest(unpacked, verified)
    except (DownloadError, ParameterError):  # the archive's fault: it goes too
        shutil.rmtree(unpacked, ignore_errors=True)
        archive.unlink(missing_ok=True)
        raise
    except BaseException:  # a full disk, an interrupt: the archive is sound, kept
        shutil.rmtree(unpacked, ignore_errors=True)
        raise
    names = sorted(entry.name for entry in unpacked.iterdir())
    try:
        earlier = _replaceable(what, folder, names, record)
    except BaseException:
        shutil.rmtree(unpacked, ignore_errors=True)
        raise
    first = record.first_downloaded if record and record.sha256 == sha256 else None
    done = download_record.Record(
        url,
        archive.name,
        archive.stat().st_size,
        sha256,
        first or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        tuple(names),
        written,
        folders,
        verified,
    )
    download_record.write(folder, done.with_earlier(record))  # covers both while they swap
    download_record.delete(earlier)
    for name in names:
        os.replace(unpacked / name, folder / name)
    unpacked.rmdir()
    download_record.write(folder, done)
    if skipped:
        more = f" and {len(skipped) - 3:,} more" if len(skipped) > 3 else ""
        summary += (
            f"; skipped {len(skipped):,} members {source.known} does not hold, not written ("
            + ", ".join(map(archive_members.shown, skipped[:3]))
            + f"{more})"
        )
    if source.kind is None:
        summary += f"; {layouts.find_release(folder).describe()}. Next: " + (
            f"TIMECAT_CHECKPOINTS={folder} python -m kit check 03 --profile paper-checkpoints"
        )
    return f"{folder}: {what} downloaded from {url} and verified: {summary}"


def _in_place(what: str, source: Source, folder: Path, record: download_record.Record) -> str:
    """The line saying `what` is in place, said only after hashing every file the profile reads
    and finding each as the record lists it; empty when one is missing or differs (download
    again). A record that does not list a file the profile reads is void."""
    if not record.complete:
        return ""
    needed = _needed(source, folder)
    if needed is None:
        return ""
    path = download_record.record_file(folder, source.archive)
    for name in needed:
        if name not in record.files:
            raise download_record.void(
                path, f"the profile reads {folder / name}, which it does not list as written"
            )
    for name in needed:
        found = folder / name
        if found.stat().st_size != record.files[name]["size"]:
            return ""
        if files.file_hash(found) != record.files[name]["sha256"]:
            return ""
    return (
        f"{folder}: {what} already downloaded and verified ({len(needed)} files the profile "
        f"reads, hashed now, each as {path.name} recorded it); nothing to do"
    )


def _needed(source: Source, folder: Path) -> list[str] | None:
    """The files the profile reads from `folder`, relative to it; None when one is missing."""
    if source.kind is not None:
        expected = list(source.members() if source.members is not None else {})
        return expected if all((folder / name).is_file() for name in expected) else None
    try:
        release = layouts.find_release(folder)
    except ParameterError as error:
        raise DownloadError(str(error)) from None
    if any(key not in release.files for key in layouts.every_key()):
        return None
    return sorted(str(path.relative_to(folder)) for path in release.files.values())


def _checked(
    source: Source, got: Path, record: download_record.Record | None, accept_new: bool
) -> str:
    """The archive's SHA-256, once it matches the MD5 recorded of it (else it is removed) and
    the SHA-256 of the first download (else refused, kept, until `accept_new`)."""
    if source.md5 is not None and (md5 := file_digest(got, "md5")) != source.md5:
        got.unlink()
        raise DownloadError(
            f"{got}: MD5 {md5} differs from the {source.md5} torchvision records for "
            f"{source.archive} (torchvision/datasets/cifar.py): a corrupt or different file, "
            "removed; run again to download it afresh"
        )
    sha256 = file_digest(got, "sha256")
    if record is not None and sha256 != record.sha256 and not accept_new:
        raise DownloadError(
            f"{got}: SHA-256 {sha256} differs from the {record.sha256} recorded at the first "
            f"download ({record.first_downloaded}, in {source.archive}.kit.json): the archive "
            "was replaced at its source, or this copy is corrupt. It is kept, unused; to accept "
            "it, run again with --accept-new-archive; to download it afresh, delete it"
        )
    return sha256


def _unpack(
    archive: Path, folder: Path, release: archive_members.Release
) -> tuple[Path, list[str]]:
    """The archive unpacked into a folder of its own beside the target (kit.files.fetch's
    safe_extract: only what `release` holds), and the members skipped; the archive is removed
    when it is unsound, or holds at its top a name the kit keeps for its own files (its record
    above all: `Source.release`), found before anything is written."""
    temporary = download_record.unpacking_folder(folder, archive.name)
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        skipped = safe_extract(archive, temporary, release)
    except UnpackingError:
        raise  # the archive is sound and kept: the next run unpacks it again
    except DownloadError as error:
        archive.unlink()
        raise DownloadError(f"{error}; the archive is removed: run again to download it") from None
    return temporary, skipped


def _replaceable(
    what: str, folder: Path, names: list[str], record: download_record.Record | None
) -> list[Path]:
    """What of an earlier download the new entries replace (every path of its entries, once
    each is found to be one it wrote); DownloadError, before anything changes, when an entry
    would replace something no download wrote, or when another copy of the release lies beside
    them (the profile would read that copy rather than the one verified)."""
    earlier = record.extracted if record is not None else ()
    clashes = [name for name in names if os.path.lexists(folder / name) and name not in earlier]
    if SOURCES[what].kind is None:
        clashes += [
            name
            for name in layouts.RELEASE_FOLDERS
            if os.path.lexists(folder / name) and name not in (*earlier, *names)
        ]
    if clashes:
        raise DownloadError(
            f"{folder}: already there and not unpacked by kit download: "
            f"{', '.join(clashes)}; move them away (or pass --to another folder) and run again"
        )
    return download_record.owned(folder, record) if record is not None else []


def _verify(what: str, source: Source, root: Path) -> tuple[dict[str, Any], str]:
    """Each file the profile will read from `root`, checked; their records and a summary."""
    if source.kind is None:
        return _verify_checkpoints(root)
    expected = source.members() if source.members is not None else {}
    problems = [
        f"{name}: {'missing' if not (root / name).is_file() else 'MD5 differs'}"
        for name, md5 in expected.items()
        if not (root / name).is_file() or file_digest(root / name, "md5") != md5
    ]
    if not problems:
        from kit.data import kinds

        problems = kinds.get(source.kind).layout_problems(root)
    if problems:
        raise DownloadError(
            f"{archive_of(source, root)}: unpacked, {what} is not as torchvision records it ("
            + "; ".join(problems)
            + "); removed"
        )
    recorded = {name: _entry(root / name) for name in expected}
    return recorded, f"{len(expected)} files match torchvision's MD5s"


def archive_of(source: Source, root: Path) -> Path:
    """The archive an unpacking folder holds the contents of."""
    return root.parent / source.archive


def _verify_checkpoints(root: Path) -> tuple[dict[str, Any], str]:
    release = layouts.find_release(root)
    missing = [key for key in layouts.every_key() if key not in release.files]
    if missing:
        raise DownloadError(
            f"{archive_of(SOURCES['checkpoints'], root)}: the archive unpacked without "
            + "; ".join(
                f"{layouts.describe_key(key)} (tried {layouts.tried(key)})" for key in missing
            )
            + "; removed"
        )
    recorded, widths = {}, set()
    for path in release.files.values():
        recorded[str(path.relative_to(root))] = _entry(path, files.record_hash(path))
        widths.add(_algoperf_width(path))
    return recorded, (
        f"{len(recorded)} checkpoints load as AlgoPerf ResNet-50s (width "
        f"{', '.join(map(str, sorted(widths)))}), each with its .sha256"
    )


def _algoperf_width(path: Path) -> float:
    """Load one released file as the kit reads it; DownloadError naming it otherwise."""
    from kit import models

    try:
        state = models.read_checkpoint(path)
        if not isinstance(state, dict) or "model_params" not in state:
            raise models.CheckpointError(f"{path}: not an AlgoPerf checkpoint (no 'model_params')")
        width = models.algoperf_width(state["model_params"])
        models.load_algoperf_checkpoint(models.build("resnet50", 1000, width), path, state)
    except models.CheckpointError as error:
        raise DownloadError(f"{error}; the unpacked archive is removed") from None
    return width


def _entry(path: Path, sha256: str | None = None) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": sha256 or files.file_hash(path)}


__all__ = ["SOURCES", "add_command", "command", "download", "partial_name"]
