"""`python -m kit download` against hostile archives and careless folders, served offline by the
local HTTP server (tests/download_server.py): an archive planting its own download record, a
stray record saying files are verified, a record on disk naming paths the kit never wrote, a
user's file inside an earlier download, another copy of the release beside it, a disk that fills
while downloading or unpacking, a folder that cannot be written. Nothing outside the target is
touched, nothing of the user's is deleted, and "verified" is said only of the files the profile
reads, hashed."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from download_server import Served, algoperf_bytes, closed_port, released, serve, tar_gz

from kit.cli import download as kit_download
from kit.cli.main import main as kit_main
from kit.experiments.timecat import layouts
from kit.files import download_record, fetch
from kit.files.fetch import DownloadError
from kit.files.paths import REPO_ROOT

ARCHIVE = kit_download.SOURCES["checkpoints"].archive
RECORD = ARCHIVE + ".kit.json"
LAYOUT = layouts.Layout("ckpt_resnet50_sfadamw_imagenet1k_supervised", "config")


@pytest.fixture(scope="module")
def good() -> bytes:
    """The release's archive as it unpacks (tiny AlgoPerf checkpoints)."""
    checkpoints = {key: algoperf_bytes(seed) for seed, key in enumerate(layouts.every_key())}
    return tar_gz(released(LAYOUT, checkpoints))


@pytest.fixture()
def server(good: bytes) -> Iterator[tuple[str, Served]]:
    for base, served in serve():
        served.files["/good.tar.gz"] = good
        yield base, served


def get(folder: Path, url: str, accept_new: bool = False) -> str:
    return kit_download.download("checkpoints", folder, url, accept_new)


def entry(content: bytes) -> dict[str, Any]:
    return {"size": len(content), "sha256": hashlib.sha256(content).hexdigest()}


def planted(extracted: list[str], files: dict[str, Any]) -> bytes:
    return json.dumps({"extracted": extracted, "files": files}).encode()


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its content (None for a folder)."""
    return {
        str(path.relative_to(folder)): None if path.is_dir() else path.read_bytes()
        for path in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize("extracted", [[".."], ["user_models"]])
def test_an_archive_planting_its_own_record_deletes_nothing(
    server: tuple[str, Served], tmp_path: Path, extracted: list[str]
) -> None:
    """The record's name at the top of an archive refuses the archive, leaving nothing of it
    behind; the next download touches nothing outside the target and no folder of the user's."""
    base, served = server
    parent, target = tmp_path / "parent", tmp_path / "parent" / "target"
    (parent / "user_models").mkdir(parents=True)
    (parent / "user_models" / "mine.pt").write_bytes(b"weeks of training")
    (parent / "SIBLING").write_text("x")
    (target / "user_models").mkdir(parents=True)
    (target / "user_models" / "mine.pt").write_bytes(b"more weeks")
    record = planted(extracted, {"not-there": {"size": 0, "sha256": "0", "stamp": []}})
    served.files["/plant.tar.gz"] = tar_gz({RECORD: record})
    before = tree(parent)
    with pytest.raises(DownloadError) as raised:
        get(target, base + "/plant.tar.gz")
    assert tree(parent) == before  # nothing of the archive left, top level included
    assert f"member '{RECORD}' takes a name kit download keeps" in str(raised.value)
    said = get(target, base + "/good.tar.gz")
    after = tree(parent)
    assert {name: after.get(name) for name in before} == before  # the user's, untouched
    assert "16 checkpoints load as AlgoPerf ResNet-50s" in said


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (planted([".."], {"not-there": entry(b"")}), "extracted names '..'"),
        (planted(["user_models"], {"not-there": entry(b"")}), "'not-there', which is not inside"),
        (planted(["user_models"], {}), "'user_models', whose files it does not list"),
        (planted(["/etc"], {}), "extracted names '/etc'"),
        (planted(["a"], {"a/../../x": entry(b"")}), "'a/../../x', which is not inside"),
        (b"[1, 2]", "not a JSON object"),
    ],
)
def test_a_record_naming_what_the_kit_did_not_write_is_void_and_deletes_nothing(
    server: tuple[str, Served], tmp_path: Path, record: bytes, why: str
) -> None:
    """A record on disk (written by hand, or by an older kit through a hostile archive) is
    validated before it is used: one naming a path outside its entries, outside the target or
    not covered by its own hashes is void, and the download stops before deleting anything."""
    base, _ = server
    target = tmp_path / "target"
    (target / "user_models").mkdir(parents=True)
    (target / "user_models" / "mine.pt").write_bytes(b"weeks of training")
    (tmp_path / "SIBLING").write_text("x")
    raw = json.loads(record)
    if isinstance(raw, dict):
        raw |= {"url": "u", "archive": ARCHIVE, "size": 1, "sha256": "0" * 64}
        raw |= {"first_downloaded": "then"}
        record = json.dumps(raw).encode()
    (target / RECORD).write_bytes(record)
    before = tree(tmp_path)
    with pytest.raises(DownloadError, match="not a download record this kit wrote") as raised:
        get(target, base + "/good.tar.gz")
    assert why in str(raised.value) and "nothing was deleted" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("recorded", [b"weeks of trainin!", b"a day"], ids=["hash", "size"])
def test_a_record_whose_files_differ_on_disk_deletes_nothing(
    server: tuple[str, Served], tmp_path: Path, recorded: bytes
) -> None:
    """A record copied or edited by hand, well formed, listing a folder of the user's with a
    size or SHA-256 its file does not have: the download compares them before deleting anything,
    refuses naming the file, and deletes nothing."""
    base, _ = server
    target = tmp_path / "target"
    (target / "user_models" / "deeper").mkdir(parents=True)
    mine = target / "user_models" / "deeper" / "mine.pt"
    mine.write_bytes(b"weeks of training")
    (target / "user_models" / "same.pt").write_bytes(b"as recorded")
    written = {"user_models/deeper/mine.pt": entry(recorded)}
    written["user_models/same.pt"] = entry(b"as recorded")
    raw = {"url": "u", "archive": ARCHIVE, "size": 1, "sha256": "0" * 64}
    raw |= {"first_downloaded": "then", "extracted": ["user_models"], "written": written}
    (target / RECORD).write_text(json.dumps(raw))
    before = tree(tmp_path)
    with pytest.raises(DownloadError) as raised:
        get(target, base + "/good.tar.gz", accept_new=True)
    said = str(raised.value)
    differs = "SHA-256 is" if len(recorded) == len(b"weeks of training") else "17 bytes, the"
    assert said.startswith(f"{mine}: not the file {RECORD} says kit download wrote there (")
    assert differs in said and "); nothing was deleted" in said, said
    assert "\n" not in said
    after = tree(tmp_path)
    assert {name: after.get(name) for name in before} == before  # the user's, untouched
    assert not (target / f".{ARCHIVE}.unpacking").exists()


def test_a_stray_record_never_says_verified(server: tuple[str, Served], tmp_path: Path) -> None:
    """An archive holding a stray file and a record listing it with its true size and SHA-256
    fails, leaves nothing, and the genuine download then happens; a record left on disk that
    lists such a file says nothing is verified: the profile's checkpoints are what is hashed."""
    base, served = server
    stray = b"not a checkpoint"
    record = planted(["stray.txt"], {"stray.txt": entry(stray)})
    served.files["/stray.tar.gz"] = tar_gz({"stray.txt": stray, RECORD: record})
    served.files["/only-stray.tar.gz"] = tar_gz({"stray.txt": stray})
    with pytest.raises(DownloadError):
        get(tmp_path, base + "/stray.tar.gz")
    assert "already downloaded and verified" not in get(tmp_path, base + "/good.tar.gz")
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    with pytest.raises(DownloadError, match="unpacked without run 0 at full"):
        get(tmp_path, base + "/only-stray.tar.gz")
    assert tree(tmp_path) == {}  # the stray file at the top was removed, as the error says

    (tmp_path / "stray.txt").write_bytes(stray)
    raw = json.loads(record) | {"url": "u", "archive": ARCHIVE, "size": 1, "sha256": "0" * 64}
    (tmp_path / RECORD).write_text(json.dumps(raw | {"first_downloaded": "then"}))
    nowhere = f"http://127.0.0.1:{closed_port()}/{ARCHIVE}"
    with pytest.raises(DownloadError, match="cannot connect"):  # no "verified": it downloads
        get(tmp_path, nowhere)
    (tmp_path / "stray.txt").unlink()
    (tmp_path / RECORD).unlink()
    assert "downloaded from" in get(tmp_path, base + "/good.tar.gz")
    assert "already downloaded and verified (16 files" in get(tmp_path, nowhere)
    with pytest.raises(DownloadError, match="takes a name kit download keeps"):
        get(tmp_path / "again", base + "/stray.tar.gz")
    assert tree(tmp_path / "again") == {}


def test_verified_means_the_files_the_profile_reads(
    server: tuple[str, Served], tmp_path: Path
) -> None:
    """A copy of the release the finder would read instead of the downloaded one is never
    called verified, and no download is unpacked beside it."""
    base, _ = server
    get(tmp_path, base + "/good.tar.gz")
    renamed = tmp_path / "resnet50_sfadamw_imagenet1k_supervised"  # the finder's first layout
    shutil.copytree(tmp_path / LAYOUT.folder, renamed)
    with pytest.raises(DownloadError, match=f"the profile reads {renamed}/checkpoints_"):
        get(tmp_path, f"http://127.0.0.1:{closed_port()}/x")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copytree(tmp_path / LAYOUT.folder, other / "resnet50_sfadamw")
    with pytest.raises(
        DownloadError, match="already there and not unpacked by kit download: .*resnet50_sfadamw"
    ):
        get(other, base + "/good.tar.gz")
    assert sorted(path.name for path in other.iterdir()) == [ARCHIVE, "resnet50_sfadamw"]


def test_a_file_of_the_users_inside_an_earlier_download_is_never_deleted(
    server: tuple[str, Served], good: bytes, tmp_path: Path
) -> None:
    base, served = server
    get(tmp_path, base + "/good.tar.gz")
    mine = tmp_path / LAYOUT.folder / "checkpoints_full" / "my_notes.txt"
    mine.write_text("mine")
    (tmp_path / ARCHIVE).unlink()
    changed = next(iter((tmp_path / LAYOUT.folder).rglob("*.pth")))
    changed.write_bytes(b"changed")
    with tarfile.open(fileobj=io.BytesIO(good)) as tar:  # the release, another archive
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    members[f"{LAYOUT.folder}/README.txt"] = b"the same release, with a note"
    served.files["/good.tar.gz"] = tar_gz(members)
    with pytest.raises(DownloadError, match=f"{mine}: inside .* not written by it; nothing"):
        get(tmp_path, base + "/good.tar.gz", accept_new=True)
    assert mine.read_text() == "mine"
    mine.unlink()
    with pytest.raises(DownloadError, match=f"{changed}: not the file .* is 7 bytes, .* nothing"):
        get(tmp_path, base + "/good.tar.gz", accept_new=True)  # the changed file is kept too
    assert changed.read_bytes() == b"changed"
    changed.unlink()
    assert "downloaded from" in get(tmp_path, base + "/good.tar.gz", accept_new=True)
    assert not (tmp_path / f".{ARCHIVE}.unpacking").exists()


HOLD_AS_A_DOWNLOAD = (
    "import sys, time; from kit.files import locks\n"
    "with locks.hold(sys.argv[1], 'kit download checkpoints', remove=True):\n"
    "    print('held', flush=True); time.sleep(600)\n"
)


def test_a_second_download_into_a_folder_is_refused_naming_the_first(
    server: tuple[str, Served], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two downloads into one folder would append to one `.partial`, or one's clean-up would
    remove the other's unpacking: the second is refused in one line naming the process that
    holds the folder, writing nothing; once that one ends, the download runs and leaves no lock
    file behind."""
    base, served = server
    holding = subprocess.Popen(
        [sys.executable, "-c", HOLD_AS_A_DOWNLOAD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        assert holding.stdout is not None and holding.stdout.readline().strip() == "held"
        command = ["download", "checkpoints", "--to", str(tmp_path), "--url", base + "/good.tar.gz"]
        assert kit_main(command) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: kit download checkpoints: {tmp_path}: in use by pid ")
        assert f"pid {holding.pid} on " in err and "(kit download checkpoints: " in err
        assert err.endswith("one download into a folder at a time\n") and err.count("\n") == 1
        assert sorted(path.name for path in tmp_path.iterdir()) == [".lock"]  # the holder's
        assert served.ranges == []  # nothing was asked of the server
    finally:
        holding.kill()
        holding.wait()
    assert "downloaded from" in get(tmp_path, base + "/good.tar.gz")
    assert not (tmp_path / ".lock").exists()


def test_an_archive_holding_the_folders_lock_file_is_refused(
    server: tuple[str, Served], tmp_path: Path
) -> None:
    base, served = server
    served.files["/lock.tar.gz"] = tar_gz({".lock": b'{"pid": 1}'})
    with pytest.raises(DownloadError, match="member '.lock' takes a name kit download keeps"):
        get(tmp_path, base + "/lock.tar.gz")
    assert tree(tmp_path) == {}


def release_members(good: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(good)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def test_members_outside_the_release_are_skipped_and_said(
    server: tuple[str, Served], good: bytes, tmp_path: Path
) -> None:
    """The release plus members it does not hold (a file of zeros at the top, a file beside the
    checkpoints): the release is unpacked and verified, the others never written, and the
    download says which it skipped."""
    base, served = server
    members = release_members(good)
    members["zeros.bin"] = bytes(2_000_000)
    members[f"{LAYOUT.folder}/checkpoints_full/extra.pth"] = b"not released"
    served.files["/extra.tar.gz"] = tar_gz(members)
    said = get(tmp_path, base + "/extra.tar.gz")
    assert "16 checkpoints load as AlgoPerf ResNet-50s" in said
    assert (
        "skipped 2 members the authors' release (16 checkpoints of about 100 MB) does not hold, "
        f"not written ('zeros.bin', '{LAYOUT.folder}/checkpoints_full/extra.pth')"
    ) in said
    assert not (tmp_path / "zeros.bin").exists()
    assert not (tmp_path / LAYOUT.folder / "checkpoints_full" / "extra.pth").exists()


@pytest.mark.parametrize(
    ("extra", "sparse", "said"),
    [
        ({}, {f"{LAYOUT.folder}/hole.bin": 20 << 30}, "is a sparse file (21,474.8 MB with holes)"),
        ({f"{LAYOUT.folder}/bad\x1b[2Jname": b"x"}, {}, "is named with a control character"),
        ({f"junk/{i}": b"x" for i in range(1_000)}, {}, "holds more than 85 members, more than"),
    ],
    ids=["sparse", "control", "count"],
)
def test_an_archive_holding_more_than_the_release_is_refused_before_anything_is_written(
    server: tuple[str, Served],
    good: bytes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, bytes],
    sparse: dict[str, int],
    said: str,
) -> None:
    """The release plus a 20 GiB sparse member, a name with a control character, or 1,000
    one-byte members: refused from the headers alone, nothing extracted, the archive removed."""
    base, served = server
    served.files["/more.tar.gz"] = tar_gz(release_members(good) | extra, sparse=sparse)
    monkeypatch.setattr(tarfile.TarFile, "extract", lambda *_, **__: pytest.fail("written"))
    with pytest.raises(DownloadError) as raised:
        get(tmp_path, base + "/more.tar.gz")
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / ARCHIVE}: ") and said in message, message
    assert "the archive is refused and nothing of it is kept" in message and "\n" not in message
    assert tree(tmp_path) == {}


def test_a_release_larger_than_its_known_size_is_refused(
    server: tuple[str, Served], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release's files, each and all together, within its known sizes and a margin: a
    larger one is refused from its headers, before anything is written."""
    base, _ = server
    source = kit_download.SOURCES["checkpoints"]
    for each, total, said in [
        (100_000, 10**9, "unpacks to 1.0 MB, more than the 0.1 MB a file of"),
        (10**9, 10_000_000, "its members unpack to 16.2 MB, more than the 10.0 MB"),
    ]:
        smaller = dataclasses.replace(source, most_file_bytes=each, most_bytes=total)
        monkeypatch.setitem(kit_download.SOURCES, "checkpoints", smaller)
        with pytest.raises(DownloadError, match=said):
            get(tmp_path, base + "/good.tar.gz")
        assert tree(tmp_path) == {}


def test_a_disk_filling_during_the_download_is_said_to_be_full(
    server: tuple[str, Served], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _ = server
    opened = Path.open

    class FillingUp:
        """A file taking 1,000 bytes, then finding its disk full."""

        def __init__(self, handle: Any) -> None:
            self.handle, self.written = handle, 0

        def __enter__(self) -> FillingUp:
            return self

        def __exit__(self, *_: object) -> None:
            self.handle.close()

        def write(self, block: bytes) -> int:
            if self.written:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written = self.handle.write(block[:1000])
            return self.written

    def full(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = opened(self, mode, *args, **kwargs)
        return FillingUp(handle) if self.name.endswith(".partial") else handle

    monkeypatch.setattr(Path, "open", full)
    monkeypatch.setattr(fetch, "CHUNK", 4096)
    partial = fetch.partial_name(tmp_path / ARCHIVE)
    with pytest.raises(DownloadError) as raised:
        get(tmp_path, base + "/good.tar.gz")
    said = str(raised.value)
    assert said.startswith(f"{partial}: no space left on device (")
    assert "free there) while downloading into it" in said and "connection" not in said
    assert f"the partial file {partial} is kept" in said and partial.stat().st_size == 1000


def test_a_disk_filling_while_unpacking_keeps_the_archive_and_names_the_path(
    server: tuple[str, Served],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, _ = server

    def full(self: tarfile.TarFile, member: tarfile.TarInfo, path: str, **_: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{path}/{member.name}")

    monkeypatch.setattr(tarfile.TarFile, "extract", full)
    command = ["download", "checkpoints", "--to", str(tmp_path), "--url", base + "/good.tar.gz"]
    assert kit_main(command) == 1
    error = capsys.readouterr().err.splitlines()[-1]  # after the progress line
    unpacking = download_record.unpacking_folder(tmp_path, ARCHIVE)
    assert error.startswith(f"error: kit download checkpoints: {unpacking}/")
    assert "no space left on device (" in error and f"while unpacking {tmp_path / ARCHIVE}" in error
    assert "the archive is kept" in error and "notebooks" not in error
    assert sorted(path.name for path in tmp_path.iterdir()) == [ARCHIVE]  # kept, checked
    monkeypatch.undo()
    assert "downloaded from" in get(tmp_path, f"http://127.0.0.1:{closed_port()}/x")


def test_a_folder_that_cannot_be_written_is_the_downloads_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "read-only" / "checkpoints"

    def refused(self: Path, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "mkdir", refused)
    assert kit_main(["download", "checkpoints", "--to", str(folder), "--url", "x"]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: kit download checkpoints: {folder}: permission denied ")
    assert "pass --to another folder" in error and "notebooks" not in error


@pytest.mark.parametrize("to", ["/", "~"], ids=["root", "home"])
def test_a_download_into_a_file_system_root_or_home_is_refused(
    to: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--to /` wrote a `.partial` at the file system's root: refused as `kit run` refuses such
    an output folder, before anything is written (the URL goes nowhere either way)."""
    folder = Path(to).expanduser()
    url = f"http://127.0.0.1:{closed_port()}/{ARCHIVE}"
    assert kit_main(["download", "checkpoints", "--to", str(folder), "--url", url]) == 1
    assert capsys.readouterr().err == (
        f"error: kit download checkpoints: {folder}: not a folder of its own for a download (a "
        "file system root, the home folder or the repository or above); name a folder for it "
        "(--to)\n"
    )
