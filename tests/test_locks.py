"""The folder lock: a second live holder is refused by name; a dead holder leaves no lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.files import locks

HOLD_FOREVER = (
    "import sys, time; from kit.files import locks\n"
    "with locks.hold(sys.argv[1], 'test holder'):\n"
    "    print('held', flush=True); time.sleep(600)\n"
)


def _holder_process(folder: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_FOREVER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    process = _holder_process(tmp_path)
    try:
        with (
            pytest.raises(locks.FolderLocked, match=rf"pid {process.pid} .*test holder"),
            locks.hold(tmp_path, "second"),
        ):
            pass
    finally:
        process.kill()
        process.wait()


def test_a_killed_holder_releases_the_folder(tmp_path: Path) -> None:
    process = _holder_process(tmp_path)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    with locks.hold(tmp_path, "after the kill"):
        assert f"pid {os.getpid()}" in locks.holder(tmp_path)


def test_released_on_exit_of_the_block(tmp_path: Path) -> None:
    with locks.hold(tmp_path, "first"):
        pass
    start = time.perf_counter()
    with locks.hold(tmp_path, "again"):
        pass
    assert time.perf_counter() - start < 1.0


def _no_flock(monkeypatch: pytest.MonkeyPatch, number: int) -> None:
    def refuse(_descriptor: int, _operation: int) -> None:
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(locks.fcntl, "flock", refuse)


@pytest.mark.parametrize("number", locks.UNSUPPORTED)
def test_without_flock_the_exclusive_file_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: int
) -> None:
    _no_flock(monkeypatch, number)
    with locks.hold(tmp_path, "first"):
        assert (tmp_path / locks.EXCLUSIVE_FILE).exists()
        assert f"pid {os.getpid()}" in locks.holder(tmp_path)
        with (
            pytest.raises(locks.FolderLocked, match=r"delete that file"),
            locks.hold(tmp_path, "second"),
        ):
            pass
    assert not (tmp_path / locks.EXCLUSIVE_FILE).exists()
    with locks.hold(tmp_path, "again"):
        pass


def test_without_flock_a_dead_holder_on_this_host_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_flock(monkeypatch, locks.errno.ENOSYS)
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    (tmp_path / locks.EXCLUSIVE_FILE).write_text(
        f'{{"pid": {process.pid}, "host": "{locks.socket.gethostname()}"}}'
    )
    with locks.hold(tmp_path, "after a dead holder"):
        assert "after a dead holder" in locks.holder(tmp_path)


def test_another_flock_error_names_the_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_flock(monkeypatch, locks.errno.EIO)
    with (
        pytest.raises(OSError, match=rf"{tmp_path / locks.LOCK_FILE}: cannot lock"),
        locks.hold(tmp_path, "first"),
    ):
        pass


def test_kit_check_names_a_folder_a_running_run_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kit check` called an output folder valid while a running `kit run` held it; it names
    the holder (pid, since when, command), and passes again once the holder is gone. Asking
    takes no lock and creates nothing."""
    from kit.cli import main

    out = tmp_path / "out"
    arguments = ["check", "02", "--profile", "ci", "--set", f"output_dir={out}"]
    assert locks.held_by(out) is None and not out.exists()
    process = _holder_process(out)
    try:
        assert main.main(arguments) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {out}: in use by pid {process.pid} on ")
        assert " since 20" in err and "(test holder: " in err and "Traceback" not in err
        assert err.rstrip().endswith("wait for it to finish or stop that process, then check again")
    finally:
        process.kill()
        process.wait()
    assert locks.held_by(out) is None
    assert main.main(arguments) == 0


def test_a_lock_that_removes_its_file_leaves_none_and_a_later_holder_locks_anew(
    tmp_path: Path,
) -> None:
    """A download's lock file goes with its holder; a process that opened it meanwhile finds it
    removed and locks the new one rather than the removed file."""
    with locks.hold(tmp_path, "first", remove=True):
        assert (tmp_path / locks.LOCK_FILE).exists()
        stale = os.open(tmp_path / locks.LOCK_FILE, os.O_RDONLY)
    assert not (tmp_path / locks.LOCK_FILE).exists()
    try:
        assert not locks._same_file(stale, tmp_path / locks.LOCK_FILE)
        with locks.hold(tmp_path, "second"):
            assert locks._same_file(stale, tmp_path / locks.LOCK_FILE) is False
            assert "second" in locks.holder(tmp_path)
    finally:
        os.close(stale)
