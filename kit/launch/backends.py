"""Start training runs, or one step after them, with the chosen backend: the one seam.

Backends (LaunchSettings.backend):
- `inline`: in this process, one run after another (debugging, tiny runs).
- `local`: `workers` runs at a time, each in its own process(es) pinned to its own GPUs or CPU
  cores (kit.launch.local).
- `torchrun`: like `local`, but each worker's runs under one torchrun, on one node or the same
  launch started on every node (kit.launch.local).
- `slurm`: an array of jobs through submitit, one run per job, requeued on preemption
  (kit.launch.slurm).

The caller decides which runs are pending; a run is finished when its DONE marker exists,
whatever launched it, so any backend can resume any run. A step after training (notebook 03's
feature extraction, its probes) is one command launched the same way (`launch_step`).
kit.launch.sbatch exports the same runs and steps as sbatch scripts instead.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from kit.files.paths import resolve
from kit.launch import local, slurm
from kit.launch.runs import LOGS, Launched, is_finished, train_args, write_configs
from kit.launch.settings import LaunchSettings, sized_for_training
from kit.params.params import ParameterError
from kit.runtime.processes import module_main
from kit.train.settings import TrainSettings


def launch(
    trainings: list[TrainSettings],
    settings: LaunchSettings,
    work_dir: str | Path,
    wait: bool = True,
) -> Launched:
    """Train the given runs with the chosen backend (all of them: the caller leaves out the
    finished ones). For slurm, `wait=False` returns once the array is submitted; calling again
    later reports the jobs still queued or running and submits only runs without a live job."""
    work_dir = resolve(work_dir)
    files = write_configs(trainings, work_dir)
    runs = dict(zip(files, trainings, strict=True))
    if settings.backend == "inline":
        return _inline(runs)
    if settings.backend == "slurm":
        settings = sized_for_training(trainings, settings)
        return slurm.submit(
            {name: slurm.SlurmTask(train_args(files[name]), settings) for name in runs},
            settings,
            work_dir,
            wait,
            lambda name, _: is_finished(runs[name]),
        )
    if not wait:
        raise ParameterError(
            f"backend: {settings.backend} trains while this process waits; wait=False is for slurm"
        )
    return local.run_chains(runs, files, settings, work_dir / LOGS)


def _inline(runs: dict[str, TrainSettings]) -> Launched:
    from kit.train import trainer as train  # torch only where training happens

    launched = Launched()
    for name, training in runs.items():
        train.train(training)
        launched.finished.append(name)
    return launched


def launch_step(
    name: str,
    module_args: Sequence[str],
    settings: LaunchSettings,
    work_dir: str | Path,
    wait: bool = True,
) -> Launched:
    """Run one command, `python -m <module_args>`, as one job with the chosen backend: in this
    process (inline: the module's `main`), as one process or one torchrun on this node's
    devices (local, torchrun; its log is work_dir/logs/<name>.log), or as a Slurm job through
    submitit (`wait=False` returns once it is submitted; called again while it is queued or
    running, it submits nothing). The command exits 0 when done and 75 when a preemption
    signal stopped it (Slurm then requeues it)."""
    work_dir = resolve(work_dir)
    launched = Launched()
    if settings.backend == "inline":
        code = module_main(module_args[0])(list(module_args[1:]))
        if code:
            raise RuntimeError(f"python -m {shlex.join(module_args)}: exited with status {code}")
        launched.finished.append(name)
        return launched
    if settings.backend == "slurm":
        return slurm.submit(
            {name: slurm.SlurmTask(module_args, settings)},
            settings,
            work_dir,
            wait,
            lambda _, succeeded: succeeded,
        )
    if not wait:
        raise ParameterError(
            f"backend: {settings.backend} runs {name} while this process "
            "waits; wait=False is for slurm"
        )
    log = work_dir / LOGS / f"{name}.log"
    if local.run_command(name, module_args, settings, log) == 0:
        launched.finished.append(name)
    else:
        launched.failed[name] = log
    return launched
