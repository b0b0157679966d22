"""A rank that stops making progress fails, naming its run and what it waited in, well before the
process group's timeout.

A rank waiting in a collective call for a hung peer (a loader worker deadlocked after fork, a
device that stopped answering) would otherwise sit idle until `group_timeout_s` (30 minutes by
default) and then fail with a bare timeout, the node wasted meanwhile. The trainer beats the
watchdog at every training step, evaluation batch and save; a thread checks the beats, and one
older than `stall_timeout_s` ends the process: it prints the run, the rank and what it was doing,
dumps every thread's stack (faulthandler), kills the process's children (a worker stuck after
fork ignores SIGTERM), and exits with status 1, so the launcher (torchrun, Slurm, the kit's local
backend) sees the failure at once and ends the other ranks. The last checkpoint stays: running the
same command again resumes.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil

#: the exit status of a process the watchdog ended
STALLED_EXIT = 1

T = TypeVar("T")


def kill_children() -> None:
    """SIGKILL every process this one started, and theirs (loader workers, a fork server)."""
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.send_signal(signal.SIGKILL)
    psutil.wait_procs(children, timeout=5)


class Watchdog:
    """Beats from the step loop; a thread that ends the process when they stop for `limit_s`.
    Disabled (`enabled=False`), it only takes the beats: a trainer called as a library (the
    inline backend, in a notebook's kernel) must not end the process it runs in."""

    def __init__(
        self,
        enabled: bool = True,
        exit_process: Callable[[int], object] = os._exit,
        end_children: Callable[[], None] = kill_children,
    ) -> None:
        self.enabled, self.exit_process, self.end_children = enabled, exit_process, end_children
        self.limit_s: float = 0.0
        self.run: Path | None = None
        self.rank = 0
        self.what = ""
        self.last = time.monotonic()
        self.armed = False
        self.fired = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self, what: str, arm: bool = True) -> None:
        """Progress: the rank is now doing `what` (cheap enough for every step); `arm=False`
        leaves a watchdog that is not armed yet unarmed (a step that compiles the model)."""
        self.last, self.what = time.monotonic(), what
        self.armed = self.enabled and (arm or self.armed)

    @contextlib.contextmanager
    def watching(
        self, run: Path, rank: int, limit_s: float, armed: bool = True
    ) -> Iterator[Watchdog]:
        """Watch one run (beats older than `limit_s` end the process); `armed=False` waits for
        the first beat (a first step that compiles the model takes as long as it takes)."""
        self.run, self.rank, self.limit_s = run, rank, limit_s
        self.last, self.what = time.monotonic(), "starting the run"
        self.armed = armed and self.enabled
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="kit-watchdog", daemon=True)
            self._thread.start()
        try:
            yield self
        finally:
            self.armed = False

    def beating(self, items: Iterable[T], what: str) -> Iterator[T]:
        """`items`, with a beat before each is asked for and after it came."""
        iterator = iter(items)
        while True:
            self.beat(what)
            try:
                item = next(iterator)
            except StopIteration:
                return
            yield item

    def _watch(self) -> None:
        while not self.fired.is_set():
            time.sleep(max(0.05, min(self.limit_s / 10, 5.0)) if self.limit_s else 1.0)
            if self.armed and time.monotonic() - self.last > self.limit_s:
                self._fire()

    def _fire(self) -> None:
        self.fired.set()
        print(
            f"error: {self.run}: rank {self.rank} made no progress for {self.limit_s:.0f} s "
            f"while {self.what} (stall_timeout_s): a loader worker or another rank is hung. "
            "Ending this process rather than waiting out group_timeout_s; the last checkpoint "
            "is kept, run it again to resume. Every thread's stack follows.",
            file=sys.stderr,
            flush=True,
        )
        with contextlib.suppress(Exception):
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        self.end_children()
        self.exit_process(STALLED_EXIT)
