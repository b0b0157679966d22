"""Every refusal is one line naming the key or the file, never a traceback: a bound met only by
a derived value (the wide variant's doubled width), a parameter file nested past its bound, a
name longer than a file system takes, an archive member thousands of folders deep, and a
learning rate whose update overflows the optimizer's arithmetic."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from download_server import tar_gz

from kit.cli import download as kit_download
from kit.cli.main import main as kit_main
from kit.files import fetch
from kit.files.fetch import DownloadError
from kit.params import bounds, strict_yaml


def kit_check(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    code = kit_main(["check", *arguments])
    return code, capsys.readouterr().err


def one_line(err: str) -> None:
    assert "Traceback" not in err and "Error:" not in err, err
    assert all(line.startswith(("error: ", "  ")) for line in err.splitlines()), err


def test_the_wide_variants_width_is_bounded_at_validation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`train.width=16` is within its own bound, but the wide variant doubles it: refused
    naming the key, the variant and the bound, not a ValidationError from planning. Width 8
    passes (its checkpoints would fill some 60 GB: the disk is made roomy, since what this
    machine has free is not this test's subject)."""
    roomy = SimpleNamespace(total=2**60, used=0, free=2**60)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: roomy)
    code, err = kit_check(capsys, "03", "--profile", "ci", "--set", "train.width=16")
    assert code == 2, err
    one_line(err)
    assert (
        "parameter train.width: 16 x variant wide1's width 2 builds models of width 32, above "
        f"the bound {bounds.WIDTH:g} (kit/params/bounds.py); lower train.width"
    ) in err
    assert kit_check(capsys, "03", "--profile", "ci", "--set", "train.width=8")[0] == 0


@pytest.mark.parametrize(
    "text",
    [
        "replicates: " + "[" * 20_000 + "]" * 20_000,
        "replicates: " + "{a: " * 40 + "1" + "}" * 40,
        "replicates:\n" + "\n".join(" " * depth + "- " for depth in range(1, 400)) + "x",
    ],
    ids=["brackets", "mappings", "block"],
)
def test_a_parameter_file_nested_past_its_bound_is_one_line(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nested = tmp_path / "nested.yaml"
    nested.write_text(text)
    code, err = kit_check(capsys, "02", "--profile", "ci", "-f", str(nested))
    assert code == 2
    one_line(err)
    assert err.startswith(f"error: {nested}: line ") and err.count("\n") == 1, err
    assert f"nested more than {strict_yaml.MAX_DEPTH} deep" in err
    deepest = "a: " + "[" * 31 + "1" + "]" * 31  # a mapping and 31 lists: 32 levels, taken
    assert strict_yaml.loads(deepest)["a"] == eval("[" * 30 + "[1]" + "]" * 30)  # noqa: S307
    with pytest.raises(strict_yaml.StrictYamlError, match="nested more than 32 deep"):
        strict_yaml.loads("a: " + "[" * 32 + "1" + "]" * 32)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("output_dir", "/tmp/" + "a" * 280, "is 280 bytes long; a file system takes at most 255"),
        ("output_dir", "/tmp/" + "/".join(["b" * 200] * 25), "file systems take at most 4,095"),
    ],
    ids=["name", "path"],
)
def test_a_name_too_long_for_a_file_system_is_refused_naming_the_key(
    key: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = kit_check(capsys, "02", "--profile", "ci", "--set", f"{key}={value}")
    assert code == 2
    one_line(err)
    assert f"parameter '{key}': " in err and said in err, err


@pytest.mark.parametrize(
    ("member", "said"),
    [
        ("/".join(["d"] * 2000) + "/file", "is 2,001 folders deep (a release holds at most 32)"),
        ("x" * 300, "is a path holding a name of 300 bytes (a file system takes at most 255)"),
    ],
    ids=["deep", "long"],
)
def test_a_deep_or_long_member_refuses_the_archive_by_name(
    member: str, said: str, tmp_path: Path
) -> None:
    """A member 2,000 folders deep exhausted Python's stack inside tarfile, and a 300-byte name
    was blamed on the folder (kept, the archive repeating it at every run): the archive is
    refused by the member's name, and nothing of it is written."""
    archive = tmp_path / "hostile.tar.gz"
    archive.write_bytes(tar_gz({member: b"x"}))
    with pytest.raises(DownloadError) as raised:
        fetch.safe_extract(archive, tmp_path / "into")
    message = str(raised.value)
    assert message.startswith(f"{archive}: member '{member[:40]}'...") and said in message
    assert len(message) < 400 and not (tmp_path / "into").exists()
    assert not isinstance(raised.value, fetch.UnpackingError)  # the archive's fault, not ours
    folder = tmp_path / "checkpoints"
    with pytest.raises(DownloadError, match="the archive is removed: run again") as raised:
        kit_download.download("checkpoints", folder, archive.as_uri())
    assert "\n" not in str(raised.value) and said in str(raised.value)
    assert list(folder.iterdir()) == []  # the archive is not kept to fail again at every run
