"""`python -m kit download`, for real and offline: archives served by a local HTTP server
(tests/download_server.py) in each layout of the authors' release, and every way a download can
fail: a dropped connection (resumed), a server ignoring Range, a flipped byte, a truncated gzip,
unsafe members, HTTP errors, no server, a full disk. Each failure ends with a clear error and
leaves nothing a later run would trust. A downloaded release probed end to end by `kit run 03`
is the dress rehearsal's (tests/test_rehearsal.py: the archive made of its trained networks)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from download_server import (
    ARCHIVE,
    UNPACKED,
    Served,
    algoperf_bytes,
    closed_port,
    released,
    serve,
    tar_gz,
    write_tree,
)

from kit.cli import download as kit_download
from kit.cli import releases
from kit.cli.main import main as kit_main
from kit.data.fixtures import write_cifar, write_paper_data
from kit.data.preflight import preflight
from kit.data.settings import DataSettings
from kit.experiments.timecat import jobs, layouts, planning
from kit.files import fetch, files
from kit.files.fetch import DownloadError

SIZES = Path(__file__).parent / "rehearsal" / "sizes.yaml"
#: one layout of each description: as the archive unpacks (the config's names), download.sh's
#: rename (the names the profile lists), that rename with the README's step folders, and the
#: README's own folder
LAYOUTS = {
    "unpacked": UNPACKED,
    "renamed": layouts.Layout("resnet50_sfadamw_imagenet1k_supervised", "config"),
    "renamed-readme": layouts.Layout("resnet50_sfadamw_imagenet1k_supervised", "readme"),
    "readme": layouts.Layout("resnet50_sfadamw", "readme"),
}
#: the released runs' seeds (their configs/pretrained_checkpoints.yaml), the control's too
SEEDS = [2, 550, 23, 477, 8529]
#: the one task the extraction step reads in each layout: the fixture's 20 CIFAR-10 images
ONE_TASK = {
    "name": "CIFAR-10",
    "role": "unseen",
    "num_classes": 10,
    "data": {"kind": "cifar10", "root": "${TIMECAT_DATA}/cifar10", "image_size": 64},
}


@pytest.fixture(scope="module")
def checkpoints() -> dict[layouts.Key, bytes]:
    """A tiny AlgoPerf file for every released step and run, each of its own seed."""
    return {key: algoperf_bytes(seed) for seed, key in enumerate(layouts.every_key())}


@pytest.fixture(scope="module")
def archives(checkpoints: dict[layouts.Key, bytes]) -> dict[str, bytes]:
    return {name: tar_gz(released(layout, checkpoints)) for name, layout in LAYOUTS.items()}


@pytest.fixture()
def server(archives: dict[str, bytes]) -> Iterator[tuple[str, Served]]:
    for base, served in serve():
        served.files[ARCHIVE] = archives["unpacked"]
        yield base, served


def get(folder: Path, url: str, accept_new: bool = False) -> str:
    return kit_download.download("checkpoints", folder, url, accept_new)


def nothing_trusted(folder: Path) -> None:
    """No complete archive, no unpacked file and no record a later run would trust."""
    names = {path.name for path in folder.iterdir()} if folder.exists() else set()
    assert not names & {ARCHIVE[1:], ARCHIVE[1:] + ".kit.json", *layouts.RELEASE_FOLDERS}, names
    assert not [name for name in names if name.endswith(".unpacking")], names


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_downloads_and_every_file_is_found_verified(
    layout: str, archives: dict[str, bytes], tmp_path: Path
) -> None:
    for base, served in serve():
        served.files[ARCHIVE] = archives[layout]
        said = get(tmp_path, base + ARCHIVE)
    assert "16 checkpoints load as AlgoPerf ResNet-50s (width 0.0625)" in said
    assert LAYOUTS[layout].describe() in said and "kit check 03" in said
    release = layouts.find_release(tmp_path)
    assert release.layouts == [LAYOUTS[layout]]
    assert sorted(release.files) == sorted(layouts.every_key())
    for path in release.files.values():
        assert files.verify(path, "")  # the .sha256 the profile verifies
    record = json.loads((tmp_path / (ARCHIVE[1:] + ".kit.json")).read_text())
    assert record["url"] == base + ARCHIVE and len(record["files"]) == 16
    assert not fetch.partial_name(tmp_path / ARCHIVE[1:]).exists()
    # again: nothing to do, and no server needed to say so
    assert "already downloaded and verified (16 files" in get(tmp_path, "http://127.0.0.1:1/x")


def test_a_dropped_connection_resumes_with_a_range_request(
    server: tuple[str, Served], tmp_path: Path
) -> None:
    base, served = server
    half = len(served.files[ARCHIVE]) // 2
    served.drop_after = half
    with pytest.raises(DownloadError, match="connection .* after .*run the same command again"):
        get(tmp_path, base + ARCHIVE)
    partial = fetch.partial_name(tmp_path / ARCHIVE[1:])
    assert partial.stat().st_size == half
    nothing_trusted(tmp_path)
    assert "load as AlgoPerf" in get(tmp_path, base + ARCHIVE)
    assert served.ranges == [None, f"bytes={half}-"]


def test_a_server_ignoring_range_starts_again(
    server: tuple[str, Served], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, served = server
    served.ignore_range = True
    partial = fetch.partial_name(tmp_path / ARCHIVE[1:])
    partial.write_bytes(served.files[ARCHIVE][:1000])
    get(tmp_path, base + ARCHIVE)
    assert "ignores resuming (HTTP Range), so the download starts again" in capsys.readouterr().err
    assert (tmp_path / ARCHIVE[1:]).read_bytes() == served.files[ARCHIVE]


def test_a_flipped_byte_is_refused_before_anything_is_kept(
    server: tuple[str, Served], tmp_path: Path
) -> None:
    base, served = server
    data = bytearray(served.files[ARCHIVE])
    data[len(data) // 2] ^= 0xFF
    served.files[ARCHIVE] = bytes(data)
    with pytest.raises(DownloadError, match="truncated or corrupt archive.*archive is removed"):
        get(tmp_path, base + ARCHIVE)
    nothing_trusted(tmp_path)
    assert not fetch.partial_name(tmp_path / ARCHIVE[1:]).exists()


def test_a_truncated_gzip_is_refused(server: tuple[str, Served], tmp_path: Path) -> None:
    base, served = server
    served.files[ARCHIVE] = served.files[ARCHIVE][: len(served.files[ARCHIVE]) * 2 // 3]
    with pytest.raises(DownloadError, match="truncated or corrupt archive"):
        get(tmp_path, base + ARCHIVE)
    nothing_trusted(tmp_path)


@pytest.mark.parametrize(
    ("members", "links", "said"),
    [
        ({"../../x": b"escape"}, None, r"member '../../x' is a path out of the folder"),
        ({"/etc/x": b"absolute"}, None, r"member '/etc/x' is an absolute path"),
        ({}, {"ckpt_resnet50_sfadamw_imagenet1k_supervised": "/etc"}, r"is a link \(to '/etc'\)"),
    ],
)
def test_unsafe_members_are_refused(
    server: tuple[str, Served],
    tmp_path: Path,
    members: dict[str, bytes],
    links: dict[str, str] | None,
    said: str,
) -> None:
    base, served = server
    served.files[ARCHIVE] = tar_gz(members, links)
    folder = tmp_path / "deep" / "er"
    with pytest.raises(DownloadError, match=said + ".*nothing of it is kept"):
        get(folder, base + ARCHIVE)
    nothing_trusted(folder)
    assert not (tmp_path / "x").exists() and not (folder.parent / "x").exists()


@pytest.mark.parametrize("code", [404, 500])
def test_an_http_error_names_the_url_and_the_way_by_hand(
    server: tuple[str, Served], tmp_path: Path, code: int
) -> None:
    base, served = server
    served.errors[ARCHIVE] = code
    with pytest.raises(DownloadError, match=f"{base}{ARCHIVE}: the server answered HTTP {code}"):
        get(tmp_path, base + ARCHIVE)
    nothing_trusted(tmp_path)


def test_no_server_names_the_url_and_the_manual_alternative(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{closed_port()}{ARCHIVE}"
    assert kit_main(["download", "checkpoints", "--to", str(tmp_path), "--url", url]) == 1
    error = capsys.readouterr().err
    assert f"error: kit download checkpoints: {url}: cannot connect" in error
    assert f"download {releases.CHECKPOINTS_URL} with any tool" in error
    assert f"--url file:///path/to/{ARCHIVE[1:]}" in error and "Traceback" not in error
    nothing_trusted(tmp_path)


def test_a_full_disk_is_refused_before_writing(
    server: tuple[str, Served], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _ = server
    monkeypatch.setattr(fetch, "free_bytes", lambda folder: 1000)
    with pytest.raises(DownloadError, match=r"not enough free disk space.*1,000|0\.0 MB is free"):
        get(tmp_path, base + ARCHIVE)
    assert not fetch.partial_name(tmp_path / ARCHIVE[1:]).exists()
    nothing_trusted(tmp_path)


def test_a_changed_archive_is_refused_until_accepted(
    server: tuple[str, Served], archives: dict[str, bytes], tmp_path: Path
) -> None:
    base, served = server
    get(tmp_path, base + ARCHIVE)
    (tmp_path / ARCHIVE[1:]).unlink()
    changed = next(iter((tmp_path / LAYOUTS["unpacked"].folder).rglob("*.pth")))
    changed.write_bytes(b"changed")
    served.files[ARCHIVE] = archives["readme"]  # the source now serves other bytes
    with pytest.raises(DownloadError, match="differs from the .* recorded at the first download"):
        get(tmp_path, base + ARCHIVE)
    assert fetch.partial_name(tmp_path / ARCHIVE[1:]).is_file()  # kept, unused
    with pytest.raises(DownloadError, match=f"{changed}: not the file .* nothing was deleted"):
        get(tmp_path, base + ARCHIVE, accept_new=True)  # a file that differs from the record
    assert changed.read_bytes() == b"changed"
    changed.unlink()
    said = get(tmp_path, base + ARCHIVE, accept_new=True)
    assert LAYOUTS["readme"].describe() in said
    assert not (tmp_path / LAYOUTS["unpacked"].folder).exists()  # the old unpacking replaced
    assert served.ranges[-1] == f"bytes={len(archives['readme'])}-"  # not downloaded again


def test_a_local_copy_serves_as_the_url(archives: dict[str, bytes], tmp_path: Path) -> None:
    copy = tmp_path / "copy.tar.gz"
    copy.write_bytes(archives["readme"])
    said = get(tmp_path / "to", copy.as_uri())
    assert "16 checkpoints load" in said
    missing = tmp_path / "nowhere.tar.gz"
    with pytest.raises(DownloadError, match=f"{missing}: no such file"):
        get(tmp_path / "other", str(missing))


def test_an_archive_without_every_file_is_removed(
    server: tuple[str, Served], checkpoints: dict[layouts.Key, bytes], tmp_path: Path
) -> None:
    base, served = server
    members = released(LAYOUTS["unpacked"], checkpoints)
    members.pop(LAYOUTS["unpacked"].names("80k", 4)[0])
    served.files[ARCHIVE] = tar_gz(members)
    with pytest.raises(DownloadError, match=r"without run 4 at 80k .*tried .*; removed"):
        get(tmp_path, base + ARCHIVE)
    nothing_trusted(tmp_path)


def test_cifar_is_checked_against_the_recorded_md5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_cifar(tmp_path / "made", "cifar10", 2)
    members = {
        str(path.relative_to(tmp_path / "made")): path.read_bytes()
        for path in sorted((tmp_path / "made").rglob("*"))
        if path.is_file()
    }
    archive = tar_gz(members)
    source = kit_download.SOURCES["cifar10"]
    md5 = fetch.file_digest(_written(tmp_path / "a.tar.gz", archive), "md5")
    md5s = {name: fetch.file_digest(tmp_path / "made" / name, "md5") for name in members}
    tiny = dataclasses.replace(source, size=len(archive), md5=md5, members=lambda: md5s)
    monkeypatch.setitem(kit_download.SOURCES, "cifar10", tiny)
    for base, served in serve():
        served.files["/c.tar.gz"] = archive
        said = kit_download.download("cifar10", tmp_path / "cifar10", base + "/c.tar.gz")
        assert "7 files match torchvision's MD5s" in said
        flipped = bytearray(archive)
        flipped[-100] ^= 1
        served.files["/c.tar.gz"] = bytes(flipped)
        with pytest.raises(DownloadError, match=f"MD5 .* differs from the {md5} torchvision"):
            kit_download.download("cifar10", tmp_path / "again", base + "/c.tar.gz")
        nothing_trusted(tmp_path / "again")
        assert not fetch.partial_name(tmp_path / "again" / source.archive).exists()


def test_the_cifar_records_are_torchvisions() -> None:
    from torchvision import datasets

    for name, dataset in (("cifar10", datasets.CIFAR10), ("cifar100", datasets.CIFAR100)):
        source = kit_download.SOURCES[name]
        assert (source.url, source.archive, source.md5) == (
            dataset.url,
            dataset.filename,
            dataset.tgz_md5,
        )
        assert source.members is not None and len(source.members()) == (
            7 if name == "cifar10" else 3
        )


def _written(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def test_two_layouts_with_different_bytes_are_an_error_naming_both(
    checkpoints: dict[layouts.Key, bytes], tmp_path: Path
) -> None:
    write_tree(tmp_path, released(LAYOUTS["unpacked"], checkpoints))
    write_tree(tmp_path, released(LAYOUTS["readme"], checkpoints))
    assert len(layouts.find_release(tmp_path).layouts) == 2  # the same bytes: either serves
    other = tmp_path / LAYOUTS["readme"].names("full", 0)[0]
    other.write_bytes(checkpoints[("full", 1)])
    first = tmp_path / LAYOUTS["unpacked"].names("full", 0)[0]
    with pytest.raises(Exception, match=f"{first} and {other} hold different bytes"):
        layouts.find_release(tmp_path)


@pytest.fixture(scope="module")
def paper_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The datasets paper-checkpoints reads, tiny (`kit fixtures`)."""
    root = tmp_path_factory.mktemp("data")
    write_paper_data(root)
    return root


def downloaded(archive: bytes, folder: Path) -> Path:
    """`python -m kit download checkpoints --to FOLDER` of `archive` served by the test server."""
    for base, served in serve():
        served.files[ARCHIVE] = archive
        command = ["download", "checkpoints", "--to", str(folder), "--url", base + ARCHIVE]
        assert kit_main(command) == 0
    return folder


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kit_check_and_extraction_read_a_downloaded_release_in_each_layout(
    layout: str,
    archives: dict[str, bytes],
    paper_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`kit check` names the layout and every file it will read; the extraction step reads the
    released files and writes the random-init control's networks (one task: the full notebook
    run is the dress rehearsal's); a missing file is named with every name tried."""
    folder = downloaded(archives[layout], tmp_path / "checkpoints")
    monkeypatch.setenv("TIMECAT_DATA", str(paper_data))
    monkeypatch.setenv("TIMECAT_CHECKPOINTS", str(folder))
    out = tmp_path / "out"
    check = ["check", "03", "--profile", "paper-checkpoints", "-f", str(SIZES)]
    assert kit_main([*check, "--set", f"output_dir={out}"]) == 0
    said = capsys.readouterr().out
    assert f"checkpoints: {folder}: the authors' release, laid out as " in said
    assert LAYOUTS[layout].describe() in said
    for variant, step in (("cat1", "full"), ("cat2", "200k"), ("cat4", "100k"), ("cat5", "80k")):
        for run in range(int(variant[3:])):
            name = LAYOUTS[layout].names(step, run)[0]
            assert f"{variant} reads {folder / name} (run {run} at {step} " in said, name
    assert "valid for profile paper-checkpoints" in said and "unverified" not in said

    one_task = tmp_path / "one-task.yaml"
    one_task.write_text(yaml.safe_dump({"tasks": [ONE_TASK]}))
    extract = ["extract", "--profile", "paper-checkpoints", "-f", str(SIZES), "-f", str(one_task)]
    assert kit_main([*extract, "--set", f"output_dir={out}"]) == 0
    loaded = jobs.load_settings("paper-checkpoints", [SIZES, one_task], [f"output_dir={out}"])
    assert jobs.extraction_finished(loaded)
    read = {rep.variant: rep.checkpoints for rep in planning.plan(loaded).representations}
    release = layouts.find_release(folder)
    assert read["cat5"] == tuple(release.files[("80k", run)] for run in range(5))
    assert all(path.is_file() for path in read["random5"])  # written once, seeded
    assert [path.parent.name for path in read["random5"]] == [f"seed{s}" for s in SEEDS]

    (folder / LAYOUTS[layout].names("100k", 2)[0]).unlink()
    assert kit_main([*check, "--set", f"output_dir={out}"]) == 2
    error = capsys.readouterr().err
    assert "1 checkpoint file not found: " in error
    assert (
        f"run 2 at 100k (100,000 iterations), tried {folder}/{layouts.tried(('100k', 2))}" in error
    )


def test_a_missing_data_root_says_where_to_get_it(tmp_path: Path) -> None:
    """ImageNet-1k and iNat18 are fetched by hand, CIFAR by `kit download`: kit check says so."""
    said = {
        kind: " ".join(preflight(DataSettings(kind=kind, root=str(tmp_path / kind), image_size=32)))
        for kind in ("imagefolder", "inat18", "cifar10", "cifar100")
    }
    assert (
        "https://image-net.org" in said["imagefolder"] and "/train/<wnid>/" in said["imagefolder"]
    )
    assert (
        "visipedia/inat_comp" in said["inat18"]
        and f"{tmp_path}/inat18/train2018.json" in said["inat18"]
    )
    for kind in ("cifar10", "cifar100"):
        assert f"python -m kit download {kind} --to {tmp_path / kind}" in said[kind]
