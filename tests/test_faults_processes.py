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
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import psutil
import pytest
import torch

from kit.data.fixtures import write_image_folder
from kit.experiments.timecat import sweep, sweep_settings
from kit.experiments.timecat.sweep_settings import SweepSettings
from kit.files import files
from kit.files.paths import REPO_ROOT, importable_environment
from kit.launch import progress
from kit.params import params
from kit.report import page
from kit.runtime import processes
from kit.train import checkpoint, command, metrics
from kit.train.run_files import RunFolder

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
from kit.runtime.processes import ignoring_signals
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         preexec_fn=ignoring_signals((signal.SIGUSR1, signal.SIGINT)))
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="parent-death signals (prctl PR_SET_PDEATHSIG) exist on Linux only",
)
def test_a_child_started_by_the_kit_dies_when_its_parent_is_killed() -> None:
    """The preexec_fn of every launched process (local, warm, slurm) makes the child die with
    the process that started it, even when that one is killed outright."""
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE],
        stdout=subprocess.PIPE,
        text=True,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=importable_environment(),
    )
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


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="parent-death signals (prctl PR_SET_PDEATHSIG) exist on Linux only",
)
def test_killing_the_kit_run_group_ends_its_kernel_and_workers(tmp_path: Path) -> None:
    """SIGKILL to `kit run`'s process group (a scheduler, a closed terminal) reaches neither the
    kernel nor the warm workers (each in its own session): they must end with it and release the
    run folders' locks rather than train on for minutes."""
    tmp = str(tmp_path)
    log = tmp_path / "kit-run.log"
    with log.open("w") as output:
        runner = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kit",
                "run",
                "03",
                "--profile",
                "ci",
                "--set",
                f"output_dir={tmp_path}",
            ],
            cwd=REPO_ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=os.environ | {"PYTHONPATH": str(REPO_ROOT), MARKER: tmp},
        )
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
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
            capture_output=True,
            text=True,
            check=False,
        )
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
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = small_disk / RunFolder.CHECKPOINT
    state = {"model": {"weight": torch.zeros(1_000_000)}}  # 4 MB on a 2 MB disk
    assert command.exit_code(lambda: checkpoint.write_checkpoint(path, state)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: no space left on device") and "Traceback" not in err
    assert not path.exists() and _temporaries(small_disk) == []


def _records(steps: range) -> str:
    return "".join(
        json.dumps({"step": step, "epoch": 0, "loss": 1.0 / step, "lr": 0.1, "images_per_s": 100.0})
        + "\n"
        for step in steps
    )


def test_a_metrics_line_torn_by_a_kill_is_left_out_of_the_curves(tmp_path: Path) -> None:
    """A kill mid-write leaves a last line without its end (and without a newline): the finished
    records are read, as a resumed run would keep them, and progress shows the last of them."""
    path = tmp_path / RunFolder.METRICS
    path.write_text(_records(range(1, 4)) + '{"step": 4, "epoch": 0, "lo')
    table = metrics.read_metrics(tmp_path)
    assert table["step"].to_list() == [1, 2, 3]
    assert progress.last_record(path)["step"] == 3
    path.write_text(_records(range(1, 4))[:-1])  # a complete last record without its newline
    assert metrics.read_metrics(tmp_path)["step"].to_list() == [1, 2, 3]


@pytest.mark.parametrize("bad", ['{"step": 2, "epoch": 0, "lo', "\0\0\0\0", "[1, 2]"])
def test_a_corrupted_metrics_line_is_refused_naming_the_file_and_line(
    tmp_path: Path, bad: str
) -> None:
    """A bad line before the last (or a last one ended by a newline) is no kill's doing: polars
    said `error parsing line` with neither file nor line; it must say both and what to do."""
    path = tmp_path / RunFolder.METRICS
    lines = _records(range(1, 5)).splitlines(keepends=True)
    path.write_text("".join(lines[:1]) + bad + "\n" + "".join(lines[2:]))
    with pytest.raises(
        metrics.MetricsError,
        match=f"^{re.escape(str(path))}: line 2 is not a JSON record.*delete that line.*run folder",
    ):
        metrics.read_metrics(tmp_path)
    path.write_text(_records(range(1, 4)) + bad + "\n")
    with pytest.raises(metrics.MetricsError, match=f"^{re.escape(str(path))}: line 4 "):
        metrics.read_metrics(tmp_path)


def test_resuming_drops_a_corrupted_metrics_line_that_is_still_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the refusal above promises: a resumed run drops the bad line (it used to stop on a
    line that parses as JSON but is no record)."""
    path = tmp_path / RunFolder.METRICS
    lines = _records(range(1, 5)).splitlines(keepends=True)
    path.write_text(lines[0] + "[1, 2]\n" + "".join(lines[2:]))
    metrics.keep_metrics_until(path, 3)
    assert metrics.read_metrics(tmp_path)["step"].to_list() == [1, 3]
    assert f"{path}: line 2 is torn or corrupted, dropped" in capsys.readouterr().err


#: a process that imports the trainer once and then, for each order on its input, forks a
#: launcher in its own process group (what a test kills, as `kit run`'s group) whose child trains
#: a chain of runs in its own session and gets the parent-death signal (as a kernel's warm
#: worker): each cycle then costs a fork, not a Python start and a torch import
ZYGOTE = """
import json, os, sys, time, traceback
from kit.runtime.processes import dying_with_parent
from kit.train import command
print("ready", flush=True)
for line in sys.stdin:
    while True:  # reap the launchers killed so far
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    order = json.loads(line)
    if os.fork() == 0:
        os.setsid()
        with_launcher = dying_with_parent()
        chain = os.fork()
        if chain == 0:
            code = 1
            try:
                os.setsid()
                with_launcher()
                log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                code = command.main(order["argv"])
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(os.getpid(), chain, flush=True)
        time.sleep(600)
        os._exit(0)
"""


def _chain_configs(folder: Path, runs: int = 3) -> list[str]:
    """`python -m kit.train` arguments training a chain of tiny runs into `folder`."""
    argv = []
    for seed in range(runs):
        values = {
            "model": "resnet10",
            "width": 0.125,
            "num_classes": 4,
            "seed": seed,
            "data": {
                "kind": "synthetic",
                "image_size": 16,
                "synthetic": {
                    "num_train": 64,
                    "num_eval": 32,
                    "noise": 0.1,
                    "components": [{"weight": 1.0, "cues": ["colour"]}],
                },
            },
            "batch_size": 16,
            "iterations": 8,
            "lr": 0.01,
            "bn_recalibration_batches": 1,
            "eval_every": 8,
            "checkpoint_every": 4,
            "log_every": 2,
            "num_workers": 0,
            "output_dir": str(folder / f"run{seed}"),
        }
        config = folder / f"run{seed}.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(values))  # YAML reads JSON
        argv += ["--config", str(config)]
    return argv


class _Zygote:
    """The forking process of ZYGOTE, and the chains it started."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env=os.environ | {"PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"},
        )
        assert self.process.stdout is not None and self.process.stdin is not None
        assert self.process.stdout.readline() == "ready\n", self.process.communicate()
        self.started: list[psutil.Process] = []

    def chain(self, folder: Path) -> tuple[int, psutil.Process]:
        """Start training the chain in `folder`: the launcher's pid (its group's id) and the
        training process."""
        order = {"argv": _chain_configs(folder), "log": str(folder / "chain.log")}
        self.process.stdin.write(json.dumps(order) + "\n")
        self.process.stdin.flush()
        launcher, chain = map(int, self.process.stdout.readline().split())
        self.started += [psutil.Process(launcher), psutil.Process(chain)]
        return launcher, self.started[-1]

    def close(self) -> None:
        for process in self.started:
            with contextlib.suppress(psutil.Error):
                process.kill()
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _ended_within(process: psutil.Process, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(process) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _alive(process)


def _done(folder: Path) -> int:
    return len(list(folder.glob(f"run*/{RunFolder.DONE}")))


#: how long a stopped chain may take to end: its next logging step (two tiny steps) or the rest of
#: a run, on a loaded machine
STOP_BOUND_S = 20


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="parent-death signals (prctl PR_SET_PDEATHSIG) exist on Linux only",
)
def test_repeated_group_kills_across_a_chain_stop_it_every_time_and_resume_bit_identical(
    tmp_path: Path,
) -> None:
    """20 group kills at random moments of a chain of three runs trained in turn (in a run, at
    its last logging step, between runs): the launcher's group killed outright (the chain gets
    its parent-death SIGTERM); and, every fourth stop, SIGHUP to the chain's session instead (a
    closed terminal). Each time the chain must end within STOP_BOUND_S having finished at most the
    run it was in (a stop at a run's last logging step used to be forgotten by the next run, which
    trained on, and SIGHUP killed the chain without a checkpoint), and every round of kills must
    end with the weights and metrics of an uninterrupted chain."""
    zygote = _Zygote()
    try:
        launcher, chain = zygote.chain(tmp_path / "straight")
        began = time.monotonic()
        assert _ended_within(chain, 120), (tmp_path / "straight" / "chain.log").read_text()
        length = time.monotonic() - began
        os.killpg(launcher, signal.SIGKILL)
        assert _done(tmp_path / "straight") == 3, (tmp_path / "straight" / "chain.log").read_text()
        rng, kills, hangups, rounds = random.Random(34), 0, 0, 0
        while kills < 20:  # group kills of a running chain; the hangups come on top
            folder = tmp_path / f"round{rounds}"
            while _done(folder) < 3:
                launcher, chain = zygote.chain(folder)
                time.sleep(rng.uniform(0, length))
                done, running = _done(folder), _alive(chain)
                hangup = running and (kills + hangups) % 4 == 3
                if hangup:
                    os.killpg(chain.pid, signal.SIGHUP)
                else:
                    os.killpg(launcher, signal.SIGKILL)
                kills, hangups = kills + (running and not hangup), hangups + hangup
                assert _ended_within(chain, STOP_BOUND_S), f"kill {kills}: the chain trains on"
                os.killpg(launcher, signal.SIGKILL)
                assert _done(folder) <= done + 1, (
                    f"kill {kills}: runs of the chain started after the stop "
                    f"({done} finished before it, {_done(folder)} after)"
                )
            for name in ("run0", "run1", "run2"):
                _assert_same_run(folder / name, tmp_path / "straight" / name)
            rounds += 1
        logs = "".join(path.read_text() for path in tmp_path.glob("round*/chain.log"))
        assert hangups and "received SIGHUP" in logs, "SIGHUP is not taken as a stop"
        assert "Traceback" not in logs, logs[-3000:]
    finally:
        zygote.close()
    assert not [process for process in zygote.started if _alive(process)]


def _assert_same_run(resumed: Path, straight: Path) -> None:
    a, b = (
        torch.load(folder / RunFolder.CHECKPOINT, weights_only=True)
        for folder in (resumed, straight)
    )
    assert a["step"] == b["step"]
    for name, tensor in b["model"].items():
        assert torch.equal(a["model"][name], tensor), f"{resumed}: {name}"
    rows_a, rows_b = metrics.read_metrics(resumed), metrics.read_metrics(straight)
    for column in ("step", "loss", "eval_accuracy", "eval_loss"):
        assert rows_a[column].to_list() == rows_b[column].to_list(), f"{resumed}: {column}"


@pytest.mark.parametrize("ends_it", ["loader_timeout_s", "stall_timeout_s"])
def test_a_stuck_loader_worker_becomes_an_error_naming_the_run(
    tmp_path: Path, ends_it: str
) -> None:
    """A loader worker that never hands over a batch (here one blocked opening a FIFO planted
    among the images; after a fork while another thread held a lock, one blocked in a futex and
    ignored SIGTERM): the trainer waited for it forever. Now the loader's timeout, or else the
    watchdog, ends the run within its limit (the first batch also starts the fork server) with
    a message naming it, and no worker is left behind."""
    root = write_image_folder(
        tmp_path / "images", ("ant", "bee", "cat", "dog"), {"train": 4, "val": 2}
    )
    os.mkfifo(root / "train" / "ant" / "stuck.png")  # in 16 of 17 first batches
    out = tmp_path / "run"
    limits = (
        {"loader_timeout_s": 15, "stall_timeout_s": 120}
        if ends_it == "loader_timeout_s"
        else {"loader_timeout_s": 300, "stall_timeout_s": 15}
    )
    values = {
        "model": "resnet10",
        "width": 0.125,
        "num_classes": 4,
        "seed": 0,
        "data": {
            "kind": "imagefolder",
            "root": str(root),
            "image_size": 16,
            "verify_images": False,
        },
        "batch_size": 16,
        "iterations": 40,
        "lr": 0.01,
        "bn_recalibration_batches": 1,
        "log_every": 5,
        "num_workers": 1,
        "output_dir": str(out),
    } | limits
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(values))
    with (tmp_path / "err.txt").open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "kit.train", "--config", str(config)],
            stderr=err,
            stdout=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            env=os.environ | {"PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"},
        )
    trainer_process, below = psutil.Process(process.pid), []
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(psutil.Error):
                below += [p for p in trainer_process.children(recursive=True) if p not in below]
            time.sleep(0.2)
        message = (tmp_path / "err.txt").read_text()
        assert process.poll() == 1, f"still waiting for its loader after 120 s: {message[-3000:]}"
        assert f"error: {out}: " in message and ends_it in message, message[-3000:]
        if ends_it == "loader_timeout_s":
            assert "DataLoader timed out after 15 seconds at step 0" in message, message[-3000:]
            assert "Traceback" not in message
        else:
            assert "made no progress for 15 s while at step 1" in message, message[-3000:]
        _, alive = psutil.wait_procs(below, timeout=10)
        assert not alive, _describe(alive)
    finally:
        for leftover in [trainer_process, *below]:
            with contextlib.suppress(psutil.Error):
                leftover.kill()


def test_a_stop_sent_to_every_process_of_a_trainer_with_loader_workers_checkpoints_it(
    tmp_path: Path,
) -> None:
    """The runner's stop (and a scheduler's) signals every process of a run: the loader workers
    died of it first, and the trainer failed on its lost workers with a traceback instead of
    saving. The fork server and its workers now never act on the stop: the trainer checkpoints,
    exits with status 75, and they end after it."""
    out = tmp_path / "run"
    values = {
        "model": "resnet10",
        "width": 0.125,
        "num_classes": 4,
        "seed": 0,
        "data": {
            "kind": "synthetic",
            "image_size": 16,
            "synthetic": {
                "num_train": 64,
                "num_eval": 32,
                "noise": 0.1,
                "components": [{"weight": 1.0, "cues": ["colour"]}],
            },
        },
        "batch_size": 16,
        "iterations": 20000,
        "lr": 0.01,
        "bn_recalibration_batches": 1,
        "log_every": 5,
        "num_workers": 1,
        "output_dir": str(out),
    }
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(values))
    process = subprocess.Popen(
        [sys.executable, "-m", "kit.train", "--config", str(config)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=REPO_ROOT,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"},
    )
    tree = [psutil.Process(process.pid)]
    try:
        deadline = time.monotonic() + 120
        while not (out / RunFolder.METRICS).exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.1)
        tree += tree[0].children(recursive=True)
        assert len(tree) > 1, _describe(tree)  # the loader's worker(s) among them
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        assert process.returncode == processes.PREEMPTED_EXIT, err[-3000:]
        assert f"preempted: {out}: stopped by a preemption signal" in err and "Traceback" not in err
        _, alive = psutil.wait_procs(tree[1:], timeout=15)
        assert not alive, _describe(alive)
    finally:
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.kill()


#: a sitecustomize module for the kernel of the `kit run` below (PYTHONPATH puts it first): right
#: after the KIT_TEST_KILL_AFTER-th result file notebook 03 writes into its output folder (a
#: parquet by polars, a JSON by kit.report.outputs.write_json), it names that file in
#: `killed_after.txt` beside the folder and SIGKILLs `kit run`'s process group, then itself;
#: right after the KIT_TEST_PAUSE_AFTER-th, it names the file in `paused_after.txt` and waits
#: for `go_on.txt` there before the kernel goes on
KILL_HOOK = """
import os, sys
if os.environ.get("KIT_TEST_KILL_AFTER") and "ipykernel_launcher" in " ".join(sys.orig_argv):
    import signal
    import time
    from pathlib import Path

    import polars

    from kit.report import outputs

    folder, written = Path(os.environ["KIT_TEST_KILL_DIR"]), []

    def after(path):
        if Path(path).parent != folder:
            return
        written.append(Path(path).name)
        if len(written) == int(os.environ.get("KIT_TEST_PAUSE_AFTER", "0")):
            (folder.parent / "paused_after.txt").write_text(Path(path).name)
            deadline = time.monotonic() + 300
            while not (folder.parent / "go_on.txt").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if len(written) == int(os.environ["KIT_TEST_KILL_AFTER"]):
            (folder.parent / "killed_after.txt").write_text(Path(path).name)
            runner = os.getppid()
            if os.getpgid(runner) == runner:  # the test started it in a session of its own
                os.killpg(runner, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

    def write_parquet(self, file, *args, _write=polars.DataFrame.write_parquet, **kwargs):
        _write(self, file, *args, **kwargs)
        after(file)

    def write_json(path, content, _write=outputs.write_json):
        _write(path, content)
        after(path)

    polars.DataFrame.write_parquet, outputs.write_json = write_parquet, write_json
"""


def _notebook_03s_alone(top: Path) -> Callable[[str, list[str]], list[str]]:
    """shutil.copytree's `ignore` copying notebook 03's run alone from the main job's folder
    `top`: there, the other notebooks' files and folders are left out."""
    mine = ("03_time_concat", ".03_time_concat", "time_concat", ".lock", "index.html")

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if not n.startswith(mine)] if Path(folder) == top else []

    return ignore


def _results(folder: Path, written_in: Path) -> dict[str, object]:
    """Notebook 03's result files in `folder`, the path of the folder they were written in
    replaced: each parquet's rows, the summary without its what-ran lines (they hold the wall
    time)."""

    def timeless(value: object) -> object:
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if k != "ran"}
        return [timeless(v) for v in value] if isinstance(value, list) else value

    found: dict[str, object] = {}
    for path in sorted(folder.glob("time_concat_*")):
        if path.suffix == ".parquet":
            frame = pl.read_parquet(path).with_columns(
                pl.col(pl.Utf8).str.replace_all(str(written_in), "<out>", literal=True)
            )
            found[path.name] = repr(frame.to_dicts())  # repr: NaN equals NaN
        elif path.suffix == ".json":
            found[path.name] = timeless(
                json.loads(path.read_text().replace(str(written_in), "<out>"))
            )
    return found


#: notebook 03 is killed after its first result write (a run of its own, about 25 s on 2 cores,
#: most of it probing), which leaves new files beside old ones as a kill after any middle write
#: does; the run after it is held, not killed, right after its last write, where every file is
#: new but the run unfinished (on disk what a kill there leaves: the kit writes nothing between a
#: result write and the kill), then completes. KIT_TEST_KILL_EVERY_WRITE=1 kills it after every
#: one of its seven writes in turn before that
EVERY_WRITE = os.environ.get("KIT_TEST_KILL_EVERY_WRITE") == "1"


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="parent-death signals (prctl PR_SET_PDEATHSIG) exist on Linux only",
)
def test_notebook_03_killed_after_its_result_writes_leaves_a_folder_marked_incomplete(
    tmp_path: Path, runner_output
) -> None:
    """The real notebook 03 (ci profile), run again over a finished run's folder and killed,
    with `kit run`'s whole process group, right after its first result write (EVERY_WRITE:
    after each in turn), then run again, held right after its last write and let go: after the
    kill, and while held, the folder mixes new files with old ones or holds an unfinished run's,
    so it must say it is incomplete, notebook 04 must not reuse its results and the report must
    refuse it; after the kill no kit process may be left; the run let go completes, over the
    killed run's folder, with the same results as the uninterrupted run. Each run skips the
    finished training runs and reads the cached features, but probes again (two runs, where a
    kill after the last write would take a third)."""
    finished = runner_output("03_time_concat")
    assert finished.returncode == 0, finished.stderr[-3000:]
    # notebook 04 adds to 03's feature cache: copied once it has ended, 03's files alone
    assert runner_output("04_when_concat_helps").returncode == 0
    folder = tmp_path / "ci"
    shutil.copytree(finished.output_dir, folder, ignore=_notebook_03s_alone(finished.output_dir))
    expected = _results(folder, finished.output_dir)
    record = folder / f"03_time_concat{params.RECORD_SUFFIX}"  # the same run, moved here
    record.write_text(record.read_text().replace(str(finished.output_dir), str(folder)))
    assert len(expected) >= 7, sorted(expected)  # training, results, table 3, summary, ...
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_HOOK)
    loaded, _ = params.load("04_when_concat_helps", "ci", output_dir=str(folder))
    (shared,) = [cell for cell in sweep_settings.cells(loaded) if cell.shared]
    assert sweep.notebook03_results(loaded, shared) is not None  # the finished run's, reused
    killed_after: list[str] = []
    try:
        _kill_after_each_write(tmp_path, folder, hook, len(expected), killed_after, loaded, shared)
    finally:
        for process in _survivors([], str(tmp_path)):
            with contextlib.suppress(psutil.Error):
                process.kill()
    *killed, held = killed_after
    assert len(set(killed)) == len(killed) and set(killed_after) <= set(expected)
    assert len(killed) == (len(expected) if EVERY_WRITE else 1), killed_after
    assert held not in killed or EVERY_WRITE, killed_after  # the first write and the last
    assert page.incomplete_notebooks(folder) == []
    assert sweep.notebook03_results(loaded, shared) is not None
    assert page.write_report("ci", folder).exists()
    assert _results(folder, folder) == expected


def _kill_after_each_write(
    tmp_path: Path,
    folder: Path,
    hook: Path,
    writes: int,
    killed_after: list[str],
    loaded: SweepSettings,
    shared: sweep_settings.Cell,
) -> None:
    """`kit run 03` into `folder`, killed by the hook after its first result write
    (EVERY_WRITE: after each in turn), and a last run held after its last write and left to
    finish (each file written before a kill or the hold listed in `killed_after`); after each
    kill and while held, the folder is marked incomplete and refused."""
    kills = range(1, writes + 1) if EVERY_WRITE else [1]
    for write in [*kills, writes + 1]:
        for name in ("killed_after.txt", "paused_after.txt", "go_on.txt"):
            (tmp_path / name).unlink(missing_ok=True)
        log = tmp_path / f"kit-run-{write}.log"
        with log.open("w") as output:
            runner = subprocess.Popen(
                [sys.executable, "-m", "kit", "run", "03", "--profile", "ci"]
                + ["--set", f"output_dir={folder}"],
                cwd=REPO_ROOT,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=os.environ
                | {
                    "PYTHONPATH": f"{hook}{os.pathsep}{REPO_ROOT}",
                    "KIT_TEST_KILL_AFTER": str(write),
                    "KIT_TEST_PAUSE_AFTER": str(writes if write > writes else 0),
                    "KIT_TEST_KILL_DIR": str(folder),
                    MARKER: str(tmp_path),
                },
            )
        if write > writes:  # the last run: held after its last write, then let go
            deadline = time.monotonic() + 600
            while not (tmp_path / "paused_after.txt").exists():
                assert runner.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "never held: " + log.read_text()[-3000:]
                time.sleep(0.2)
            killed_after.append((tmp_path / "paused_after.txt").read_text())
            try:
                _assert_refused(folder, loaded, shared, f"held after {killed_after[-1]}")
            finally:
                (tmp_path / "go_on.txt").touch()
        code = runner.wait(timeout=600)
        if not (tmp_path / "killed_after.txt").exists():
            assert code == 0, log.read_text()[-3000:]
            break
        killed_after.append((tmp_path / "killed_after.txt").read_text())
        assert code == -signal.SIGKILL, log.read_text()[-3000:]
        deadline = time.monotonic() + 20
        while (alive := _survivors([], str(tmp_path))) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive, _describe(alive)
        _assert_refused(folder, loaded, shared, f"killed after {killed_after[-1]}")
    else:
        pytest.fail(f"still killed after {writes + 1} writes: {killed_after}")


def _assert_refused(
    folder: Path, loaded: SweepSettings, shared: sweep_settings.Cell, where: str
) -> None:
    """Notebook 03's run in `folder` is marked incomplete, notebook 04 does not reuse its
    results and the report refuses the folder."""
    assert page.incomplete_notebooks(folder) == ["03_time_concat"], where
    assert not (folder / f"03_time_concat{params.RECORD_SUFFIX}").exists(), where
    assert sweep.notebook03_results(loaded, shared) is None, where
    with pytest.raises(page.ReportError, match=f"{folder}: the last run of 03_time_concat"):
        page.write_report("ci", folder)
