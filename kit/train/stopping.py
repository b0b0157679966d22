"""How a trainer stops other than by finishing: on a stop request, and on a stuck loader.

A preemption signal (kit.runtime.processes.PREEMPTION_SIGNALS: a scheduler's notice, a kill, a
closed terminal) sets a StopFlag that holds for the whole chain of runs the process trains in
turn: the step loop (kit.train.trainer.train_run) checkpoints within STOP_CHECK_EVERY steps and
raises Preempted, and a request that came at a run's last logging step or between two runs starts
no further run (a flag per run used to forget it, and a killed launcher's worker trained the rest
of its chain). Every rank agrees on the flag before each run (`refuse_start`), so no rank waits
alone in the next run's collectives.

A loader that gives no batch within `loader_timeout_s` or loses a worker raises torch's bare
RuntimeError, which names neither the run nor the step; `loader_failures` turns it into a
LoaderError (kit.data.workers) that does, and kills the loader's workers (a worker stuck straight
after fork ignores SIGTERM).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from kit.data import workers
from kit.runtime.distributed import Process
from kit.runtime.processes import PREEMPTION_SIGNALS, signal_handlers

#: steps between two agreements on a stop request outside logging steps: at most a second or two
#: of ImageNet training on a GPU node, and one host synchronisation in 20 steps
STOP_CHECK_EVERY = 20


class Preempted(RuntimeError):
    """A preemption signal stopped the run after its checkpoint was written; run it again."""


class StopFlag:
    """Set by a preemption signal; the step loop reads it every few steps, and a chain
    of runs before each run (one flag for the whole chain: a request is never dropped)."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopFlag]:
        """Catch the preemption signals for the block (main thread only: elsewhere Python
        cannot install handlers, and the caller keeps its own)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        with signal_handlers(PREEMPTION_SIGNALS, self._request):
            yield self

    def _request(self, number: int, _frame: object) -> None:
        self.requested = True
        print(
            f"received {signal.Signals(number).name}: checkpointing within "
            f"{STOP_CHECK_EVERY} steps and starting no further run",
            file=sys.stderr,
            flush=True,
        )

    def refuse_start(self, process: Process, run: Path, after: Path | None) -> None:
        """Raise Preempted before `run` starts when any rank was asked to stop earlier in the
        chain (`after`: the run trained before it, if any); every rank agrees first."""
        if self.anywhere(process):
            previous = f"after {after} " if after else ""
            raise Preempted(
                f"stopped by a preemption signal {previous}before {run} started; "
                "run it again to resume"
            )

    def anywhere(self, process: Process) -> bool:
        """Whether any rank was asked to stop (one small all-reduce: every rank then stops, or
        none does, so that no rank waits alone in the next run's collectives)."""
        if process.world_size == 1:
            return self.requested
        asked = torch.tensor(int(self.requested), device=process.device)
        dist.all_reduce(asked, op=dist.ReduceOp.MAX)
        self.requested = bool(asked.item())
        return self.requested


def loader_failures(
    out: Path, step: Callable[[], int], timeout_s: float
) -> contextlib.AbstractContextManager[None]:
    """A loader that timed out or lost a worker becomes a LoaderError naming the run `out` and
    the step it was at (kit.data.workers.loader_failures); its workers are killed."""
    return workers.loader_failures(
        lambda error: (
            f"{out}: {error} at step {step()} (loader_timeout_s: {timeout_s:g}): a loader worker "
            "is stuck or died. The last checkpoint is kept; run it again to resume"
        )
    )
