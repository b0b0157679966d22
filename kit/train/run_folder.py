"""A run's folder, around its steps (kit.train.trainer): the lock rank 0 holds while it trains,
whether the run has finished, where a rank runs, resuming from the checkpoint, and readying the
folder at a start (config.yaml, the provenance record, metrics cut back to the resumed step)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from kit.files import files, locks
from kit.runtime import provenance
from kit.runtime.distributed import Process
from kit.train.checkpoint import (
    check_same_run,
    read_checkpoint,
    refuse_missing_snapshots,
    restore_rng_states,
)
from kit.train.metrics import keep_metrics_until
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings
from kit.train.step import Replica


@contextlib.contextmanager
def holding_run_folder(out: Path, process: Process) -> Iterator[None]:
    """Rank 0 holds the run folder's lock; every rank learns whether it got it, so that a
    refused launch stops all ranks instead of leaving them waiting for rank 0."""
    with contextlib.ExitStack() as stack:
        refusal = ""
        if process.main:
            try:
                stack.enter_context(locks.hold(out, "training"))
            except locks.FolderLocked as error:
                refusal = str(error)
        if process.world_size > 1:
            shared = [refusal]
            dist.broadcast_object_list(shared, src=0)
            refusal = shared[0]
        if refusal:
            raise locks.FolderLocked(refusal)
        yield


def finished(settings: TrainSettings, out: Path, process: Process) -> bool:
    """Whether the run has finished (said by rank 0); a folder holding another run's settings
    is refused."""
    folder = RunFolder(out)
    saved = folder.read_config()
    if saved is not None:
        check_same_run(saved, settings, out)
    if not folder.finished_through(settings.iterations):
        return False
    refuse_missing_snapshots(settings, settings.iterations, out)
    if process.main:
        print(f"{out}: finished ({RunFolder.DONE} present), not training again")
    return True


def placement(out: Path, process: Process) -> str:
    """Where this rank runs, for its log: a launcher's pinning can be checked there."""
    return (
        f"{out.name}: rank {process.rank}/{process.world_size} on {process.device}, "
        f"cpus {sorted(os.sched_getaffinity(0))}, {torch.get_num_threads()} threads, "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
    )


@dataclass(kw_only=True)
class Position:
    """Where a run is: optimizer steps taken, its epoch, and batches taken of that epoch."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    #: steps since the last logging step, when a stop came between two
    window_steps: int = 0


def resume(replica: Replica, out: Path) -> Position:
    """Restore the replica and the generators from the run's checkpoint; where the run is (its
    start without one)."""
    checkpoint = RunFolder(out).checkpoint
    if not checkpoint.exists():
        return Position()
    state = read_checkpoint(checkpoint)
    replica.load(state)
    restore_rng_states(state["rng"])
    return Position(
        step=state["step"],
        epoch=state["epoch"],
        batch_in_epoch=state["batch_in_epoch"],
        window_steps=state.get("window", {}).get("steps", 0),
    )


def ready_folder(settings: TrainSettings, out: Path, step: int) -> None:
    """Rank 0: the run folder made, dead writers' temporaries removed, the DONE marker of a run
    now extended removed, config.yaml written, this start's provenance appended, metrics after
    the resumed step dropped."""
    folder = RunFolder(out)
    out.mkdir(parents=True, exist_ok=True)
    files.remove_stale_temporaries(out)
    folder.done.unlink(missing_ok=True)  # a run finished at fewer steps, now extended
    folder.write_config(settings)
    provenance.append(folder.provenance)
    keep_metrics_until(folder.metrics, step)
