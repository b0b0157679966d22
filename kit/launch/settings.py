"""Where and how training runs and steps start: LaunchSettings and its command-line form."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from kit.params import bounds
from kit.params.params import ParameterError, Strict, override_value

if TYPE_CHECKING:
    from kit.train.settings import TrainSettings


class LaunchSettings(Strict):
    """Where and how training runs start."""

    backend: Literal["inline", "local", "torchrun", "slurm"]
    #: runs trained at the same time on this node (local, torchrun)
    workers: int = Field(default=1, ge=1, le=bounds.PER_NODE)
    #: processes (GPUs) per run on each node
    nproc_per_node: int = Field(default=1, ge=1, le=bounds.PER_NODE)
    #: nodes per run (torchrun: start the same launch on each; slurm: nodes per job)
    nodes: int = Field(default=1, ge=1, le=bounds.CLUSTER)
    #: host:port of the first node, for torchrun on several nodes
    rdzv_endpoint: str | None = None
    #: prefix of the rendezvous ids (one per torchrun); the same on every node
    rdzv_id: str = Field(default="kit", min_length=1)
    #: submitit executor: `slurm` (sbatch) or `local` (the same jobs on this machine)
    cluster: Literal["slurm", "local"] = "slurm"
    partition: str | None = None
    account: str | None = None
    timeout_min: int = Field(default=24 * 60, ge=1, le=bounds.MINUTES)
    gpus_per_node: int = Field(default=0, ge=0, le=bounds.PER_NODE)
    #: GPUs of each worker's slot on this node (local, torchrun; unset: nproc_per_node, one per
    #: process); a step that starts its own processes (the faithful probe) is given more
    gpus_per_worker: int | None = Field(default=None, ge=1, le=bounds.PER_NODE)
    #: CPU cores per node a Slurm job asks for (unset: each process's loader workers + 1)
    cpus_per_node: int | None = Field(default=None, ge=1, le=bounds.CLUSTER)
    #: memory per node a Slurm job asks for, in GB (unset: an estimate from the loaders)
    mem_gb: int | None = Field(default=None, ge=1, le=bounds.CLUSTER)
    #: ask Slurm for whole nodes (`--exclusive`, all their memory) instead of cores and memory
    exclusive: bool = False
    #: jobs of the array running at once (None: no limit)
    max_concurrent: int | None = Field(default=None, ge=1, le=bounds.CLUSTER)
    #: the scheduler's notice before the time limit; the trainer checkpoints on it
    signal: Literal["USR1", "USR2"] = "USR1"
    signal_delay_s: int = Field(default=120, ge=10, le=bounds.SECONDS)
    #: shell lines run before each Slurm job (module load, activating the environment)
    setup: list[str] = Field(default_factory=list, max_length=bounds.LINES)

    @model_validator(mode="after")
    def _consistent(self) -> LaunchSettings:
        if self.backend == "torchrun" and self.nodes > 1 and not self.rdzv_endpoint:
            raise ValueError(
                "rdzv_endpoint: torchrun on several nodes needs the first node's host:port"
            )
        if self.backend in ("inline", "local") and self.nodes > 1:
            raise ValueError(
                f"nodes: the {self.backend} backend runs on one node; use torchrun or slurm"
            )
        if self.backend == "inline" and (self.workers > 1 or self.nproc_per_node > 1):
            raise ValueError(
                "workers, nproc_per_node: the inline backend trains in this "
                "process; use local or torchrun"
            )
        return self


#: memory of one process besides its loader workers (model, optimizer, CUDA context, pinned
#: batches), in GB: an estimate on the generous side
PROCESS_MEMORY_GB = 8.0
#: memory of one loader worker (its copy of the sample list, decoded images, batches handed over
#: through /dev/shm, which a job's memory limit counts), in GB: an estimate
WORKER_MEMORY_GB = 0.5


def sized_for_loaders(
    settings: LaunchSettings,
    workers: int,
    loaders: int,
    processes: int | None = None,
    cuda: bool = False,
) -> LaunchSettings:
    """`settings` with what a Slurm job asks for per node filled in where unset: each of the
    node's `processes` (default nproc_per_node) gets its loaders' `workers` + 1 cores,
    PROCESS_MEMORY_GB + WORKER_MEMORY_GB per worker of each of its `loaders`, and with `cuda`
    a GPU; without them Slurm grants one core per task (the loaders starve) and no GPU."""
    processes = processes or settings.nproc_per_node
    memory = processes * (PROCESS_MEMORY_GB + WORKER_MEMORY_GB * workers * loaders)
    return settings.model_copy(
        update={
            "cpus_per_node": settings.cpus_per_node or processes * (workers + 1),
            "mem_gb": settings.mem_gb or math.ceil(memory),
            "gpus_per_node": settings.gpus_per_node or (processes if cuda else 0),
        }
    )


def sized_for_training(
    trainings: Sequence[TrainSettings], settings: LaunchSettings
) -> LaunchSettings:
    """`sized_for_loaders` for training runs: their most loader workers, three persistent loaders
    each (training, BN recalibration, evaluation), a GPU per process when they train on cuda."""
    return sized_for_loaders(
        settings,
        max((training.num_workers for training in trainings), default=0),
        3,
        cuda=any(training.device == "cuda" for training in trainings),
    )


def parse_settings(pairs: list[str], base: LaunchSettings | None = None) -> LaunchSettings:
    """LaunchSettings from KEY=VALUE pairs of the command line (values read as YAML), over `base`
    (a profile's launch section) when given."""
    from pydantic import ValidationError

    values = base.model_dump() if base else {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator:
            raise ParameterError(f"the command line: --launch {pair!r} is not KEY=VALUE")
        values[key.strip()] = override_value(f"--launch {key.strip()}", value)
    try:
        return LaunchSettings(**values)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'launch'}: {e['msg']}" for e in error.errors()
        )
        raise ParameterError(f"the command line: launch settings: {problems}") from None
