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
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

#: how every loader's workers start (benchmarks/loader_start.py compares "fork" and "spawn")
START_METHOD = "forkserver"
#: what the fork server imports once, before it forks any worker: torch, torchvision and the
#: kit's datasets and transforms
PRELOAD = ["kit.data.pipeline"]


def context(method: str | None = None) -> BaseContext:
    """The multiprocessing context loader workers start from (START_METHOD unless `method`)."""
    chosen = multiprocessing.get_context(method or START_METHOD)
    if chosen.get_start_method() == "forkserver":
        chosen.set_forkserver_preload(PRELOAD)  # read when the server starts, once per process
    return chosen
