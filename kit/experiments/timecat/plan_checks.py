"""What `kit check` and `kit run` find of a time-concat plan before anything starts: settings its
trainings cannot finish with on the launch's ranks, and this machine against the plan: free disk
for what its checkpoints and feature cache still have to write (as kit.experiments.timecat.estimates
counts it) and, where the launch runs here, its memory at the peak (kit.experiments.timecat.memory),
CUDA, the compiler and /dev/shm.
"""

from __future__ import annotations

from kit.data import kinds
from kit.experiments.timecat import estimates, memory
from kit.experiments.timecat.planning import plan, runs_dir
from kit.experiments.timecat.settings import TimecatSettings
from kit.runtime import machine
from kit.train.settings import replica_problem


def replica_problems(params: TimecatSettings) -> list[str]:
    """Settings the plan's trainings cannot finish with on the launch's ranks (`kit check`):
    `train.bn_recalibration_batches: 0` on more than one process."""
    train, launch = params.train, params.launch
    if train is None or not plan(params).trainings:
        return []
    problem = replica_problem(train.bn_recalibration_batches, launch.nproc_per_node * launch.nodes)
    return [f"train.{problem}"] if problem else []


def machine_problems(params: TimecatSettings) -> list[str]:
    """This machine against the plan (`kit check`): free disk under run_root for what its
    checkpoints and feature cache still have to write; and where the launch runs here (not
    slurm), CUDA and a GPU per process, the compiler for `compile`, and /dev/shm for the
    training loaders."""
    needed, written = estimates.left_to_write(params)
    besides = f" (besides the {machine.byte_size(written)} written)" if written else ""
    problems = machine.disk_problems(
        runs_dir(params), needed, f"the plan's checkpoints and feature cache{besides}"
    )
    launch, train = params.launch, params.train
    if launch.backend == "slurm":
        return problems  # the compute nodes check themselves when the processes start
    problems += memory.memory_problems(params)
    if "cuda" in (params.device, train.device if train else None):
        problems += machine.cuda_problems(launch.nproc_per_node * launch.workers)
    if train is not None and plan(params).trainings:
        if train.compile:
            problems += machine.compiler_problems("train.compile")
        batch = train.micro_batch or train.batch_size // launch.nproc_per_node
        problems += machine.shm_problems(
            machine.loader_shared_memory(
                launch.nproc_per_node * launch.workers,
                train.num_workers,
                batch,
                train.data.image_size,
                kinds.get(train.data.kind).held_bytes(train.data),
            )
        )
    return problems


def machine_lines(params: TimecatSettings) -> list[str]:
    """What `kit check` says of this machine against the plan: its memory at the peak (as
    kit.experiments.timecat.memory costs it) and the disk it still has to write, each beside
    what this machine has."""
    needed, _ = estimates.left_to_write(params)
    free = machine.disk_free(runs_dir(params))
    return [
        memory.describe(params),
        f"disk: about {machine.byte_size(needed)} still to write under {runs_dir(params)}, "
        f"{machine.byte_size(free)} free",
    ]
