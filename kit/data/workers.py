"""How loader workers start: forked by a fork server, never forked from the training process.

A worker forked from the training process inherits every lock another thread holds at that
moment (a progress bar's monitor, the training loader's queue feeders, logging); one held by a
thread that does not exist in the child is never released, and the child hangs in a futex
straight after fork. This happened at a BatchNorm recalibration deep in a chain of runs, with the
other rank left waiting in an all-reduce until the group timeout. A fork server is a
single-threaded process started once per training process (by fork and exec, which is safe with
threads); it imports PRELOAD once and forks each worker from that clean state, so a worker starts
in about the time a fork takes and never inherits a held lock. What it costs against forking,
per run, is measured by benchmarks/loader_start.py (docs/decisions.md).

A worker gets its dataset pickled instead of inherited: in-memory datasets (CIFAR's arrays) are
copied to each worker once per loader, which the same benchmark measures.

The server starts with the stop signals blocked, and so do the workers it forks: a stop sent to
every process of a run (the runner's stop, a scheduler's) reaches the trainer, which checkpoints
and ends; its fork server and workers then end with it. Had they died of the signal first, the
trainer would have failed on its lost workers instead of saving.
"""

from __future__ import annotations

import multiprocessing
import signal
from multiprocessing import forkserver, resource_tracker
from multiprocessing.context import BaseContext

#: how every loader's workers start (benchmarks/loader_start.py compares "fork" and "spawn")
START_METHOD = "forkserver"
#: what the fork server imports once, before it forks any worker: torch, torchvision and the
#: kit's datasets and transforms
PRELOAD = ["kit.data.pipeline"]
#: the signals the fork server and its workers never act on (blocked, as the trainer's handlers
#: cannot be inherited through exec): they end with the trainer instead
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def context(method: str | None = None) -> BaseContext:
    """The multiprocessing context loader workers start from (START_METHOD unless `method`)."""
    chosen = multiprocessing.get_context(method or START_METHOD)
    if chosen.get_start_method() == "forkserver":
        chosen.set_forkserver_preload(PRELOAD)  # read when the server starts, once per process
        _start_server()
    return chosen


def _start_server() -> None:
    """Start this process's fork server now (a no-op once it runs), with STOP_SIGNALS blocked
    in it: a signal that comes meanwhile stays pending for this process, never lost. The
    resource tracker starts first: starting it unblocks SIGINT and SIGTERM in the caller."""
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
