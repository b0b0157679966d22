"""Processes and their signals: exit statuses, the preemption marker, signal handling, child
commands."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from kit.files import files
from kit.files.paths import importable_environment

#: the trainer's exit status after a preemption checkpoint (kit.train exits with it)
PREEMPTED_EXIT = 75

#: how long a collective call waits for every rank before failing (torch's NCCL default is 10
#: minutes; a rank saving a checkpoint or opening a large dataset can take longer)
DEFAULT_GROUP_TIMEOUT_S = 1800

#: the environment variable naming the file a preempted command creates (kit.launch sets it for
#: Slurm jobs): the job requeues itself when the file exists after its processes ended, whatever
#: exit status torchrun or srun passed on (torchrun turns a worker's 75 into 1)
PREEMPTED_MARKER = "KIT_PREEMPTED_MARKER"


def mark_preempted() -> None:
    """Create the file PREEMPTED_MARKER names, if it names one: this command stopped on a
    preemption signal after saving what it had, and should run again."""
    marker = os.environ.get(PREEMPTED_MARKER)
    if marker:
        with files.atomic_write(Path(marker)) as handle:
            handle.write(f"{socket.gethostname()} pid {os.getpid()}\n".encode())


def rendezvous_port(job_id: int) -> int:
    """The rendezvous port of a Slurm job's processes: derived from its id, so the same on every
    node and different for concurrent jobs."""
    return 20000 + job_id % 20000


@contextlib.contextmanager
def signal_handlers(numbers: Iterable[int], handler: Callable[[int, Any], Any]) -> Iterator[None]:
    """`handler` catches the signals `numbers` during the block; their previous handlers are
    restored after it (main thread only, as for signal.signal)."""
    previous = {number: signal.signal(number, handler) for number in numbers}
    try:
        yield
    finally:
        for number, earlier in previous.items():
            signal.signal(number, earlier)


def signal_tree(process: subprocess.Popen, number: int) -> None:
    """Send a signal to a process and all its descendants (torchrun starts its workers in their
    own sessions, so a process group does not reach them)."""
    try:
        below = [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        below = []
    for pid in [process.pid, *below]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)


def child_environment(
    command: Sequence[str], extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a launched command: the repository importable, `extra` (a slot's
    devices), and for a single process torchrun's variables saying so (a process started
    inside a Slurm allocation then does not take Slurm's for a group)."""
    env = importable_environment() | (extra or {})
    if command[2] != "torch.distributed.run":
        env |= {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    return env


#: the signal a child of the kit gets when the process that started it dies (Linux): a trainer
#: takes SIGTERM as preemption (a checkpoint within a few steps, then PREEMPTED_EXIT), an
#: idle warm worker (kit.launch.warm), which does not ignore it, just ends
PARENT_DEATH_SIGNAL = signal.SIGTERM
#: prctl(2)'s option for the parent-death signal (linux/prctl.h)
_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, loaded in the parent (loading a library after fork can deadlock); None
    where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(None, use_errno=True).prctl


def dying_with_parent(number: int = PARENT_DEATH_SIGNAL) -> Callable[[], None]:
    """A `preexec_fn` (or part of one): the child gets signal `number` when the process starting
    it dies, however it dies, so that no worker outlives a killed parent, trains on and holds its
    run folder (prctl(2), PR_SET_PDEATHSIG; nothing where not Linux). The setting survives exec.

    The kernel sends it when the *thread* that started the child ends: the kit starts children
    from the main thread (the CLI's, or a notebook kernel's, where cells run), which ends with the
    process. A parent that died before prctl is caught by comparing the parent's pid: the child
    then exits before exec. Call it in the parent; the returned function runs in the child."""
    prctl, parent = _prctl(), os.getpid()

    def prepare() -> None:
        if prctl is None:
            return
        if prctl(_PR_SET_PDEATHSIG, int(number), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before prctl: nobody to outlive
            os._exit(128 + int(number))

    return prepare


def ignoring_signals(numbers: Sequence[int], cpus: Sequence[int] = ()) -> Callable[[], None]:
    """A `preexec_fn`: pin the child to `cpus` (all when empty) and ignore the signals `numbers`
    before exec; ignored signals stay ignored through exec, so there is no moment at which the
    new program could be killed by one before it sets its own handlers. The child also dies with
    its parent (`dying_with_parent`; SIGKILL when PARENT_DEATH_SIGNAL is among those ignored)."""
    dying = dying_with_parent(
        signal.SIGKILL if PARENT_DEATH_SIGNAL in numbers else PARENT_DEATH_SIGNAL
    )

    def prepare() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        for number in numbers:
            signal.signal(number, signal.SIG_IGN)
        dying()

    return prepare


#: the signals that stop a trainer or a launched step (checkpointed, "resume me"): a
#: scheduler's notices (USR1, USR2), a plain stop (TERM) and a closed terminal (HUP)
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def module_main(module: str) -> Callable[[list[str]], int]:
    """The `main(argv)` that `python -m module` runs: the module's own, or its package's
    `__main__`'s (`kit.train`, `kit`)."""
    target = importlib.import_module(module)
    if hasattr(target, "__path__"):
        target = importlib.import_module(f"{module}.__main__")
    return target.main


#: seconds a process this one started may stay stopped (SIGSTOP, Ctrl-Z in its terminal) before
#: the heartbeat names it: a stopped worker makes no progress, and nothing else says why
STOPPED_BOUND_S = 30.0


class StoppedWatch:
    """The processes this one started (at any depth: a notebook's kernel, its training workers)
    that are stopped, each named once it has been seen stopped for `bound_s` seconds."""

    def __init__(self, bound_s: float = STOPPED_BOUND_S) -> None:
        self.bound_s = bound_s
        self.since: dict[int, float] = {}

    def lines(self, now: float | None = None) -> list[str]:
        """One line per process stopped for at least `bound_s`, naming its pid and command."""
        now = time.monotonic() if now is None else now
        stopped = {}
        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return []
        for child in children:
            try:
                if child.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                    stopped[child.pid] = " ".join(child.cmdline()[:8]) or child.name()
            except psutil.Error:  # ended meanwhile
                continue
        self.since = {pid: self.since.get(pid, now) for pid in stopped}
        return [
            f"process pid {pid} ({command}) has been stopped for {now - self.since[pid]:.0f} s "
            f"and makes no progress: resume it with `kill -CONT {pid}`, or stop the run"
            for pid, command in stopped.items()
            if now - self.since[pid] >= self.bound_s
        ]
