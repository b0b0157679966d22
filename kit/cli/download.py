"""`python -m kit download checkpoints|cifar10|cifar100 [--to DIR]`: the authors' released
checkpoints and the CIFAR datasets, fetched, checked and unpacked in one command.

The download resumes after an interrupt and is checked before it is renamed to its own name
(kit.core.fetch): against the length the server announced, and the size and MD5 torchvision
records for the CIFAR archives (torchvision/datasets/cifar.py: `CIFAR10.url`, `.tgz_md5`; a test
compares). The authors publish no checksum of theirs, so the SHA-256 of the first complete
download is recorded in a manifest beside it (`<archive>.kit.json`) and a later archive that
differs is refused until `--accept-new-archive`. The archive is unpacked safely, then checked:
every released checkpoint found (kit.experiments.timecat.layouts) and loaded as the AlgoPerf
ResNet-50 the kit reads, each given its `.sha256` (which the profile then verifies); each CIFAR
file against torchvision's MD5, and the kind's layout read. Whatever fails is removed, so a later
run trusts nothing half-done; running it again when all is in place does nothing and says so.
ImageNet-1k and iNat18 are not fetched (their licences ask for a sign-up): `kit check` says where
to get them.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kit.core import files
from kit.core.fetch import DownloadError, fetch, file_digest, finish, partial_name, safe_extract
from kit.core.params import ParameterError

#: the authors' archive, as their tools/download.sh fetches it (facebookresearch/richreps-timecat)
CHECKPOINTS_URL = (
    "https://dl.fbaipublicfiles.com/richreps-timecat/"
    "ckpt_resnet50_sfadamw_imagenet1k_supervised.tar.gz"
)


def _cifar_members(name: str) -> Callable[[], dict[str, str]]:
    """The MD5 of every file of a CIFAR folder, as torchvision records them."""

    def members() -> dict[str, str]:
        from torchvision import datasets

        dataset = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
        meta = [dataset.meta["filename"], dataset.meta["md5"]]
        return {
            f"{dataset.base_folder}/{file}": md5
            for file, md5 in [*dataset.train_list, *dataset.test_list, meta]
        }

    return members


@dataclass(frozen=True)
class Source:
    """What `kit download NAME` fetches: the URL (overridden by `--url`, then by the
    environment variable `variable`), the archive's name, the size and MD5 recorded of it (None
    where nobody publishes one), the folder it goes to without `--to` ($`root`/`subfolder`), and
    for a dataset its kind and the MD5 of each file it unpacks."""

    url: str
    variable: str
    archive: str
    size: int | None
    md5: str | None
    root: str
    subfolder: str = ""
    kind: str | None = None
    members: Callable[[], dict[str, str]] | None = None


SOURCES = {
    "checkpoints": Source(
        CHECKPOINTS_URL,
        "TIMECAT_CHECKPOINTS_URL",
        "ckpt_resnet50_sfadamw_imagenet1k_supervised.tar.gz",
        None,
        None,
        "TIMECAT_CHECKPOINTS",
    ),
    # torchvision/datasets/cifar.py: CIFAR10.url, .filename, .tgz_md5 (sizes: the served files')
    "cifar10": Source(
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "TIMECAT_CIFAR10_URL",
        "cifar-10-python.tar.gz",
        170_498_071,
        "c58f30108f718f92721af3b95e74349a",
        "TIMECAT_DATA",
        "cifar10",
        "cifar10",
        _cifar_members("cifar10"),
    ),
    "cifar100": Source(
        "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "TIMECAT_CIFAR100_URL",
        "cifar-100-python.tar.gz",
        169_001_437,
        "eb9058c3a382ffc7106e4002c42a8d85",
        "TIMECAT_DATA",
        "cifar100",
        "cifar100",
        _cifar_members("cifar100"),
    ),
}


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
        print(download(what, folder_for(what, to), url, accept_new))
    except (DownloadError, ParameterError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        from kit.cli.write_errors import write_error

        print(f"error: download not completed: {write_error(error)}", file=sys.stderr)
        return 1
    return 0


def folder_for(what: str, to: Path | None) -> Path:
    source = SOURCES[what]
    if to is not None:
        return to
    root = os.environ.get(source.root)
    if not root:
        raise ParameterError(f"kit download {what}: name a folder with --to, or set {source.root}")
    return Path(root) / source.subfolder


def download(
    what: str,
    folder: Path,
    url: str | None = None,
    accept_new: bool = False,
    stream: IO[str] | None = None,
) -> str:
    """Fetch, check, unpack and verify `what` into `folder`; what was done, as a line. Whatever
    fails verification (the unpacked files, the archive) is removed."""
    source = SOURCES[what]
    url = url or os.environ.get(source.variable) or source.url
    folder.mkdir(parents=True, exist_ok=True)
    archive, record_path = folder / source.archive, folder / f"{source.archive}.kit.json"
    record = _read_record(record_path)
    if record.get("files") and _unchanged(folder, record["files"]):
        return (
            f"{folder}: {what} already downloaded and verified ({len(record['files'])} files "
            f"as {record_path.name} records them); nothing to do"
        )
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
    extracted = _unpack(archive, folder, record.get("extracted", []))
    try:
        verified, summary = _verify(what, source, folder)
    except BaseException:
        for name in extracted:
            shutil.rmtree(folder / name, ignore_errors=True)
        archive.unlink(missing_ok=True)
        raise
    same = record.get("sha256") == sha256
    files.write_text(
        record_path,
        json.dumps(
            {
                "url": url,
                "archive": archive.name,
                "size": archive.stat().st_size,
                "sha256": sha256,
                "first_downloaded": record["first_downloaded"]
                if same and "first_downloaded" in record
                else datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "extracted": extracted,
                "files": verified,
            },
            indent=1,
        ),
    )
    return f"{folder}: {what} downloaded from {url} and verified: {summary}"


def _read_record(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        return record
    except ValueError as error:
        raise DownloadError(
            f"{path}: unreadable download record ({error}); delete it to download afresh"
        ) from None


def _unchanged(folder: Path, recorded: dict[str, Any]) -> bool:
    """Whether every file recorded is still there as it was: its change stamp unchanged, or
    else its size and SHA-256."""
    for name, entry in recorded.items():
        path = folder / name
        if not path.is_file():
            return False
        if list(files.change_stamp(path)) == entry.get("stamp"):
            continue
        if path.stat().st_size != entry["size"] or files.file_hash(path) != entry["sha256"]:
            return False
    return True


def _checked(source: Source, got: Path, record: dict[str, Any], accept_new: bool) -> str:
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
    recorded = record.get("sha256")
    if recorded is not None and sha256 != recorded and not accept_new:
        raise DownloadError(
            f"{got}: SHA-256 {sha256} differs from the {recorded} recorded at the first "
            f"download ({record.get('first_downloaded', 'date unknown')}, in "
            f"{source.archive}.kit.json): the archive was replaced at its source, or this copy "
            "is corrupt. It is kept, unused; to accept it, run again with "
            "--accept-new-archive; to download it afresh, delete it"
        )
    return sha256


def _unpack(archive: Path, folder: Path, previous: list[str]) -> list[str]:
    """Unpack into a temporary folder beside, then move each top-level entry into `folder`
    (replacing what an earlier download unpacked, and only that); the archive is removed when
    it cannot be unpacked."""
    temporary = folder / f".{archive.name}.unpacking"
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        safe_extract(archive, temporary)
    except DownloadError as error:
        archive.unlink()
        raise DownloadError(f"{error}; the archive is removed: run again to download it") from None
    names = sorted(entry.name for entry in temporary.iterdir())
    clashes = [name for name in names if (folder / name).exists() and name not in previous]
    if clashes:
        shutil.rmtree(temporary)
        raise DownloadError(
            f"{folder}: {', '.join(clashes)} already exist(s) and were not unpacked by kit "
            "download; move them away (or pass --to another folder) and run again"
        )
    for name in previous:  # an earlier archive's unpacking, replaced whole
        if Path(name).name == name and (folder / name).is_dir():
            shutil.rmtree(folder / name)
    for name in names:
        os.replace(temporary / name, folder / name)
    temporary.rmdir()
    return names


def _verify(what: str, source: Source, folder: Path) -> tuple[dict[str, Any], str]:
    """Each file the profile will read, checked; their records and a summary."""
    if source.kind is None:
        return _verify_checkpoints(folder)
    expected = source.members() if source.members is not None else {}
    problems = [
        f"{name}: {'missing' if not (folder / name).is_file() else 'MD5 differs'}"
        for name, md5 in expected.items()
        if not (folder / name).is_file() or file_digest(folder / name, "md5") != md5
    ]
    if not problems:
        from kit.data import kinds

        problems = kinds.get(source.kind).layout_problems(folder)
    if problems:
        raise DownloadError(
            f"{folder}: the unpacked {what} is not as torchvision records it ("
            + "; ".join(problems)
            + "); removed"
        )
    recorded = {name: _entry(folder / name) for name in expected}
    return recorded, f"{len(expected)} files match torchvision's MD5s"


def _verify_checkpoints(folder: Path) -> tuple[dict[str, Any], str]:
    from kit.experiments.timecat import layouts

    release = layouts.find_release(folder)
    missing = [key for key in layouts.every_key() if key not in release.files]
    if missing:
        raise DownloadError(
            f"{folder}: the archive unpacked without "
            + "; ".join(
                f"{layouts.describe_key(key)} (tried {layouts.tried(key)})" for key in missing
            )
            + "; removed"
        )
    recorded, widths = {}, set()
    for path in release.files.values():
        recorded[str(path.relative_to(folder))] = _entry(path, files.record_hash(path))
        widths.add(_algoperf_width(path))
    return recorded, (
        f"{len(recorded)} checkpoints load as AlgoPerf ResNet-50s (width "
        f"{', '.join(map(str, sorted(widths)))}), each with its .sha256; "
        f"{release.describe()}. Next: TIMECAT_CHECKPOINTS={folder} python -m kit check 03 "
        "--profile paper-checkpoints"
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
    return {
        "size": path.stat().st_size,
        "sha256": sha256 or files.file_hash(path),
        "stamp": list(files.change_stamp(path)),
    }


__all__ = ["SOURCES", "add_command", "command", "download", "partial_name"]
