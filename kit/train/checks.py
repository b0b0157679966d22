"""What refuses a run before it trains, beyond its settings' values (kit.train.settings checks
those): the machine (a C compiler for `compile`, /dev/shm for the loader workers, a writable run
folder) and the ranks it runs on (the batch split, BatchNorm recalibration). Each error names the
key or the path, as a refused setting does.
"""

from __future__ import annotations

import os
from pathlib import Path

from kit.data import kinds
from kit.data.preflight import folder_of_its_own, writable_problems
from kit.params.params import ParameterError
from kit.runtime import machine
from kit.runtime.distributed import Process, ranks_on_node
from kit.train.settings import TrainSettings, replica_problem


def check_machine(settings: TrainSettings, process: Process, out: Path) -> None:
    """Refuse a run the machine cannot hold (a compiler for `compile`, shared memory for the
    loader workers) or a run folder that cannot be written or lies among the sources, before its
    lock file is made there."""
    if settings.compile and (missing := machine.compiler_problems()):
        raise machine.MachineError("\n".join(missing))
    shared = machine.loader_shared_memory(
        ranks_on_node(dict(os.environ)),
        settings.num_workers,
        settings.micro_batch or settings.batch_size // process.world_size,
        settings.data.image_size,
        kinds.get(settings.data.kind).held_bytes(settings.data),
    )
    if settings.num_workers and (short := machine.shm_problems(shared)):
        raise machine.MachineError("\n".join(short))
    if unwritable := folder_of_its_own(out) or writable_problems(out):
        raise ParameterError("; ".join(unwritable))


def check_ranks(settings: TrainSettings, process: Process) -> None:
    """Refuse a batch (or micro-batch) that does not split evenly across the ranks, and several
    ranks without BatchNorm recalibration (their replicas would not stay identical)."""
    if settings.batch_size % process.world_size:
        raise ParameterError(
            f"batch_size: {settings.batch_size} is not divisible by the {process.world_size} ranks"
        )
    if settings.micro_batch and settings.batch_size % (process.world_size * settings.micro_batch):
        raise ParameterError(
            f"micro_batch: batch_size {settings.batch_size} is not divisible by "
            f"{process.world_size} ranks x micro_batch {settings.micro_batch}"
        )
    if problem := replica_problem(settings.bn_recalibration_batches, process.world_size):
        raise ParameterError(problem)
