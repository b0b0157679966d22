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

A worker gets its dataset pickled instead of inherited, so a dataset held in memory keeps its
arrays as tensors (`shareable`): pickled to the first worker, torch moves such a tensor into
shared memory, and every worker receives a handle (a file descriptor the fork server passes on)
and maps the same pages, where a numpy array would be copied into every worker of every loader
(benchmarks/shared_dataset.py).

A loader that gives no batch within its timeout (`timeout`: the trainer's loader_timeout_s,
feature extraction's feature_loader_timeout_s, the authors' probe's faithful.loader_timeout_s) or
loses a worker raises torch's bare RuntimeError, which names neither what was being read nor
where; `loader_failures` turns it into a LoaderError that does, and kills the loader's workers
(a worker stuck straight after fork ignores SIGTERM).

The server starts with the stop signals blocked, and so do the workers it forks: a stop sent to
every process of a run (the runner's stop, a scheduler's) reaches the trainer, which checkpoints
and ends; its fork server and workers then end with it. Had they died of the signal first, the
trainer would have failed on its lost workers instead of saving.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Callable, Iterator
from multiprocessing import forkserver, resource_tracker
from multiprocessing.context import BaseContext

import numpy as np
import torch

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


def shareable(array: np.ndarray) -> torch.Tensor:
    """`array` as a tensor, for a dataset held in memory (CIFAR's images and labels). Pickled to
    a loader worker (torch's reductions), it is moved into shared memory the first time, once,
    and every worker receives a handle to it instead of a copy and reads the same pages; a
    loader without workers never pickles it and uses no shared memory. /dev/shm then holds it
    (kit.runtime.machine.shm_problems counts it through DatasetKind.held_bytes_per_image)."""
    return torch.from_numpy(np.ascontiguousarray(array))


class LoaderError(RuntimeError):
    """A data loader gave no batch within its timeout, or lost a worker; its message names what
    was being read (a run and its step, the checkpoints being extracted, a probe's folder)."""


def kill_loader_workers() -> None:
    """SIGKILL the loader workers this process started (its multiprocessing children): a worker
    stuck straight after fork ignores SIGTERM, and a stopped one cannot act on it."""
    for child in multiprocessing.active_children():
        with contextlib.suppress(OSError, ValueError):
            child.kill()
            child.join(timeout=5)


@contextlib.contextmanager
def loader_failures(describe: Callable[[str], str]) -> Iterator[None]:
    """A loader in the block that timed out or lost a worker (torch's RuntimeError, 'DataLoader
    timed out after ...' or '... worker ... exited unexpectedly', names neither what was read
    nor where) becomes a LoaderError saying `describe(torch's message)`; its workers are killed,
    not left stuck."""
    try:
        yield
    except RuntimeError as error:
        if not str(error).startswith("DataLoader"):
            raise
        kill_loader_workers()
        raise LoaderError(describe(str(error))) from None
