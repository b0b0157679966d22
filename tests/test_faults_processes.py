"""Faults of processes and of the disk, each kept from coming back: kills (the `kit run` group
killed outright must not leave its kernel or workers training on and holding run folders), a full
disk (named, with the file and the free space, and no temporary left behind) and torn files (a
metrics.jsonl torn by a kill or corrupted is read or refused naming the file and line)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch

from kit.core import files
from kit.core.paths import REPO_ROOT, importable_environment
from kit.launch import progress
from kit.train import checkpoint, metrics, trainer

#: what the kit's processes carry on their command line: the kernel, warm workers, trainers
KIT_PROCESSES = ("ipykernel", "kit.launch.warm", "kit.train")
#: an environment variable every process below the test's `kit run` inherits, naming it
MARKER = "KIT_FAULT_TEST_RUN"


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except (psutil.Error, OSError):
        return ""


def _ours(process: psutil.Process, tmp: str) -> bool:
    """Whether `process` is one of the kit's processes started by the run into `tmp`."""
    cmdline = _cmdline(process)
    if not any(name in cmdline for name in KIT_PROCESSES):
        return False
    try:
        return tmp in cmdline or process.environ().get(MARKER) == tmp
    except (psutil.Error, OSError):
        return False


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _survivors(remembered: list[psutil.Process], tmp: str) -> list[psutil.Process]:
    """The kit's processes of the run still alive: remembered before the kill, or found now."""
    found = {p.pid: p for p in psutil.process_iter() if _ours(p, tmp)}
    for process in remembered:
        if _alive(process):
            found.setdefault(process.pid, process)
    return list(found.values())


def _describe(processes: list[psutil.Process]) -> list[str]:
    return [f"{process.pid}: {_cmdline(process)[:200]}" for process in processes]


MIDDLE = """
import signal, subprocess, sys, time
from kit.core.processes import ignoring_signals
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         preexec_fn=ignoring_signals((signal.SIGUSR1, signal.SIGINT)))
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="parent-death signals (prctl PR_SET_PDEATHSIG) exist on Linux only")
def test_a_child_started_by_the_kit_dies_when_its_parent_is_killed() -> None:
    """The preexec_fn of every launched process (local, warm, slurm) makes the child die with
    the process that started it, even when that one is killed outright."""
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE], stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.PIPE, cwd=REPO_ROOT, env=importable_environment())
    assert middle.stdout is not None
    line = middle.stdout.readline()
    assert line.strip().isdigit(), middle.communicate()
    child = psutil.Process(int(line))
    try:
        middle.kill()
        middle.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the child outlived its killed parent"
    finally:
        with contextlib.suppress(psutil.Error):
            child.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="parent-death signals (prctl PR_SET_PDEATHSIG) exist on Linux only")
def test_killing_the_kit_run_group_ends_its_kernel_and_workers(tmp_path: Path) -> None:
    """SIGKILL to `kit run`'s process group (a scheduler, a closed terminal) reaches neither the
    kernel nor the warm workers (each in its own session): they must end with it and release the
    run folders' locks rather than train on for minutes."""
    tmp = str(tmp_path)
    log = tmp_path / "kit-run.log"
    with log.open("w") as output:
        runner = subprocess.Popen(
            [sys.executable, "-m", "kit", "run", "03", "--profile", "ci",
             "--set", f"output_dir={tmp_path}"], cwd=REPO_ROOT, stdout=output,
            stderr=subprocess.STDOUT, start_new_session=True,
            env=os.environ | {"PYTHONPATH": str(REPO_ROOT), MARKER: tmp})
    remembered: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 150
        while not any((tmp_path / "time_concat").rglob("metrics.jsonl")):
            assert runner.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "no training run started: " + log.read_text()
            time.sleep(0.2)
        remembered = psutil.Process(runner.pid).children(recursive=True)
        workers = sum("ipykernel" not in _cmdline(p) for p in remembered)
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
        done_at_kill = len(list((tmp_path / "time_concat").rglob("DONE")))
        deadline = time.monotonic() + 20  # a trainer's next logging step, the poller's 1 s
        while (alive := _survivors(remembered, tmp)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive, _describe(alive)
        # each worker may end the run it was on (a preempted trainer that reached its last step
        # finishes it); none may go on to the next runs of its chain
        done = len(list((tmp_path / "time_concat").rglob("DONE")))
        assert done <= done_at_kill + workers, (done_at_kill, done)
        for lock in (tmp_path / "time_concat").rglob(".lock"):
            with lock.open("a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while still held
    finally:
        for process in _survivors(remembered, tmp):
            with contextlib.suppress(psutil.Error):
                process.kill()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, unmounted afterwards (skipped where it cannot be mounted: not root, no
    mount(8), not Linux)."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                                 capture_output=True, text=True, check=False)
    except OSError as error:
        pytest.skip(f"cannot mount a small tmpfs: {error}")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root on Linux): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def _temporaries(folder: Path) -> list[str]:
    return [path.name for path in folder.iterdir() if files.TEMPORARY.match(path.name)]


def test_a_full_disk_is_named_with_the_file_and_its_free_space(small_disk: Path) -> None:
    """torch.save through hashed_write on a full disk used to fail with `unexpected pos`, naming
    neither the cause nor the file; the previous file must stay and a later write, once space
    is freed, succeed."""
    path = small_disk / "state.pt"
    with files.hashed_write(path) as handle:
        torch.save({"weights": torch.ones(1000)}, handle)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 1_000_000)
    with pytest.raises(files.DiskFullError) as raised, files.hashed_write(path) as handle:
        torch.save({"weights": torch.zeros(300_000)}, handle)  # 1.2 MB
    message = str(raised.value)
    assert message.startswith(f"{path}: no space left on device") and "free of" in message
    assert "re-run" in message and raised.value.errno == errno.ENOSPC
    assert _temporaries(small_disk) == []
    assert files.verify(path, "") and torch.load(path)["weights"].sum() == 1000
    filler.unlink()  # space freed: the same write now succeeds
    with files.hashed_write(path) as handle:
        torch.save({"weights": torch.zeros(300_000)}, handle)
    assert files.verify(path, "") and torch.load(path)["weights"].shape == (300_000,)


def test_a_checkpoint_on_a_full_disk_stops_the_trainer_with_a_message(
        small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = small_disk / checkpoint.CHECKPOINT
    state = {"model": {"weight": torch.zeros(1_000_000)}}  # 4 MB on a 2 MB disk
    assert trainer.exit_code(lambda: checkpoint.write_checkpoint(path, state)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: no space left on device") and "Traceback" not in err
    assert not path.exists() and _temporaries(small_disk) == []


def _records(steps: range) -> str:
    return "".join(json.dumps({"step": step, "epoch": 0, "loss": 1.0 / step, "lr": 0.1,
                               "images_per_s": 100.0}) + "\n" for step in steps)


def test_a_metrics_line_torn_by_a_kill_is_left_out_of_the_curves(tmp_path: Path) -> None:
    """A kill mid-write leaves a last line without its end (and without a newline): the finished
    records are read, as a resumed run would keep them, and progress shows the last of them."""
    path = tmp_path / metrics.METRICS
    path.write_text(_records(range(1, 4)) + '{"step": 4, "epoch": 0, "lo')
    table = metrics.read_metrics(tmp_path)
    assert table["step"].to_list() == [1, 2, 3]
    assert progress.last_record(path)["step"] == 3
    path.write_text(_records(range(1, 4))[:-1])  # a complete last record without its newline
    assert metrics.read_metrics(tmp_path)["step"].to_list() == [1, 2, 3]


@pytest.mark.parametrize("bad", ['{"step": 2, "epoch": 0, "lo', "\0\0\0\0", "[1, 2]"])
def test_a_corrupted_metrics_line_is_refused_naming_the_file_and_line(
        tmp_path: Path, bad: str) -> None:
    """A bad line before the last (or a last one ended by a newline) is no kill's doing: polars
    said `error parsing line` with neither file nor line; it must say both and what to do."""
    path = tmp_path / metrics.METRICS
    lines = _records(range(1, 5)).splitlines(keepends=True)
    path.write_text("".join(lines[:1]) + bad + "\n" + "".join(lines[2:]))
    with pytest.raises(metrics.MetricsError, match=f"^{re.escape(str(path))}: line 2 is not a "
                                                   "JSON record.*delete that line.*run folder"):
        metrics.read_metrics(tmp_path)
    path.write_text(_records(range(1, 4)) + bad + "\n")
    with pytest.raises(metrics.MetricsError, match=f"^{re.escape(str(path))}: line 4 "):
        metrics.read_metrics(tmp_path)


def test_resuming_drops_a_corrupted_metrics_line_that_is_still_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the refusal above promises: a resumed run drops the bad line (it used to stop on a
    line that parses as JSON but is no record)."""
    path = tmp_path / metrics.METRICS
    lines = _records(range(1, 5)).splitlines(keepends=True)
    path.write_text(lines[0] + "[1, 2]\n" + "".join(lines[2:]))
    metrics.keep_metrics_until(path, 3)
    assert metrics.read_metrics(tmp_path)["step"].to_list() == [1, 3]
    assert f"{path}: line 2 is torn or corrupted, dropped" in capsys.readouterr().err
