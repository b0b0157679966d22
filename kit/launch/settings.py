"""Where and how training runs and steps start: LaunchSettings and its command-line form."""

from __future__ import annotations

from typing import Literal

import yaml
from pydantic import Field, model_validator

from kit.core.params import ParameterError, Strict


class LaunchSettings(Strict):
    """Where and how training runs start."""

    backend: Literal["inline", "local", "torchrun", "slurm"]
    #: runs trained at the same time on this node (local, torchrun)
    workers: int = Field(default=1, ge=1)
    #: processes (GPUs) per run on each node
    nproc_per_node: int = Field(default=1, ge=1)
    #: nodes per run (torchrun: start the same launch on each; slurm: nodes per job)
    nodes: int = Field(default=1, ge=1)
    #: host:port of the first node, for torchrun on several nodes
    rdzv_endpoint: str | None = None
    #: prefix of the rendezvous ids (one per run); the same on every node
    rdzv_id: str = Field(default="kit", min_length=1)
    #: submitit executor: `slurm` (sbatch) or `local` (the same jobs on this machine)
    cluster: Literal["slurm", "local"] = "slurm"
    partition: str | None = None
    account: str | None = None
    timeout_min: int = Field(default=24 * 60, ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    cpus_per_task: int | None = Field(default=None, ge=1)
    #: jobs of the array running at once (None: no limit)
    max_concurrent: int | None = Field(default=None, ge=1)
    #: the scheduler's notice before the time limit; the trainer checkpoints on it
    signal: Literal["USR1", "USR2"] = "USR1"
    signal_delay_s: int = Field(default=120, ge=10)
    #: shell lines run before each Slurm job (module load, activating the environment)
    setup: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> LaunchSettings:
        if self.backend == "torchrun" and self.nodes > 1 and not self.rdzv_endpoint:
            raise ValueError("rdzv_endpoint: torchrun on several nodes needs the first node's "
                             "host:port")
        if self.backend in ("inline", "local") and self.nodes > 1:
            raise ValueError(f"nodes: the {self.backend} backend runs on one node; use torchrun "
                             "or slurm")
        if self.backend == "inline" and (self.workers > 1 or self.nproc_per_node > 1):
            raise ValueError("workers, nproc_per_node: the inline backend trains in this "
                             "process; use local or torchrun")
        return self


def parse_settings(pairs: list[str], base: LaunchSettings | None = None) -> LaunchSettings:
    """LaunchSettings from KEY=VALUE pairs of the command line (values read as YAML), over `base`
    (a profile's launch section) when given."""
    from pydantic import ValidationError

    values = base.model_dump() if base else {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator:
            raise ParameterError(f"the command line: --launch {pair!r} is not KEY=VALUE")
        values[key.strip()] = yaml.safe_load(value)
    try:
        return LaunchSettings(**values)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'launch'}: {e['msg']}"
                             for e in error.errors())
        raise ParameterError(f"the command line: launch settings: {problems}") from None
