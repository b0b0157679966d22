"""Atomic, hashed files: a kill between any two writes leaves a file its hash record accepts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit.files import files


def write(path: Path, content: bytes) -> None:
    with files.hashed_write(path) as handle:
        handle.write(content)


def test_a_changed_byte_is_detected_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.bin"
    write(path, b"a" * 10_000)
    assert files.verify(path, "rebuild it")
    content = bytearray(path.read_bytes())
    content[5000] ^= 1
    path.write_bytes(bytes(content))
    with pytest.raises(files.IntegrityError, match=f"^{path}: content differs.*rebuild it"):
        files.verify(path, "rebuild it")
    (tmp_path / "plain.bin").write_bytes(b"x")
    assert files.verify(tmp_path / "plain.bin", "") is False  # nothing recorded to check


def test_a_kill_before_or_after_the_rename_leaves_an_accepted_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.bin"
    write(path, b"old" * 1000)
    rename = os.replace

    def killed_at_the_rename(source, target):
        if Path(target) == path:
            raise KeyboardInterrupt  # the process dies between the sidecar and the rename
        rename(source, target)

    monkeypatch.setattr(os, "replace", killed_at_the_rename)
    with pytest.raises(KeyboardInterrupt):
        write(path, b"new" * 1000)
    monkeypatch.setattr(os, "replace", rename)
    assert path.read_bytes() == b"old" * 1000 and files.verify(path, "")

    record = files._write_sidecar
    calls = []

    def killed_after_the_rename(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process dies before the final sidecar
        record(*args)

    monkeypatch.setattr(files, "_write_sidecar", killed_after_the_rename)
    with pytest.raises(KeyboardInterrupt):
        write(path, b"new" * 1000)
    monkeypatch.setattr(files, "_write_sidecar", record)
    assert path.read_bytes() == b"new" * 1000 and files.verify(path, "")
    path.write_bytes(b"xyz" * 1000)  # neither the old nor the new content
    with pytest.raises(files.IntegrityError):
        files.verify(path, "")


def test_only_temporaries_of_dead_writers_are_removed(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    dead = tmp_path / "run" / ".checkpoint.pt.4194305.tmp"  # above Linux's largest pid
    live = tmp_path / "run" / f".checkpoint.pt.{os.getppid()}.tmp"
    other = tmp_path / "run" / "checkpoint.pt"
    for path in (dead, live, other):
        path.write_bytes(b"x")
    assert files.remove_stale_temporaries(tmp_path) == [dead]
    assert live.exists() and other.exists()
    assert files.remove_stale_temporaries(tmp_path, everything=True) == [live]
