"""The time-concat experiment's steps as jobs: feature extraction and probing run alone, under
torchrun or srun, launched with a profile's launch settings, or exported as chained sbatch
scripts; they fill the same cache the notebook reads."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch.distributed as dist
import yaml

from kit.experiments.timecat.measure import probe_all, task_features
from kit.experiments.timecat.planning import (
    Representation,
    features_dir,
    initialise,
    plan,
    refuse_changed_runs,
    runs_dir,
)
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.experiments.timecat.settings import NOTEBOOK, TimecatSettings
from kit.files import files
from kit.files.paths import resolve
from kit.launch import backends as kit_launch
from kit.launch import sbatch
from kit.launch.runs import Launched, is_finished
from kit.launch.settings import LaunchSettings, sized_for_loaders
from kit.params import params as kit_params
from kit.params.params import ParameterError
from kit.probes import registry
from kit.probes.base import FeatureProbe, shared_gpus
from kit.readout.numbers import counted
from kit.report import outputs
from kit.runtime import distributed, processes
from kit.train import trainer as train

#: in the feature cache: what the last complete extraction covered
EXTRACTED = "extracted.json"


Step = Literal["extract", "probe"]


def _extraction_record(
    params: TimecatSettings, representations: list[Representation]
) -> dict[str, object] | None:
    """What the cached features depend on, cheap to compare: tasks, probe rows, seed, dtype,
    training settings, and each checkpoint's path, size and modification time (None while one
    is missing). The cache itself still checks content on every read."""
    checkpoints = sorted({str(c) for rep in representations for c in rep.checkpoints})
    try:
        stats = [[c, os.stat(c).st_size, os.stat(c).st_mtime_ns] for c in checkpoints]
    except FileNotFoundError:
        return None
    return params.model_dump(
        mode="json", include={"tasks", "train", "probe_train_rows", "base_seed", "feature_dtype"}
    ) | {"checkpoints": stats}


def extraction_finished(params: TimecatSettings) -> bool:
    """Whether an extraction step completed for exactly these parameters and checkpoints."""
    record = _extraction_record(params, plan(params).representations)
    marker = features_dir(params) / EXTRACTED
    return record is not None and marker.exists() and json.loads(marker.read_text()) == record


@contextlib.contextmanager
def _stopped_by_preemption() -> Iterator[None]:
    """A preemption signal (Slurm's notice, SIGTERM) stops the step with train.Preempted, exit
    status 75, on which a Slurm job requeues itself: finished cache entries are kept (each is
    renamed into place complete), the others are extracted by the next run."""

    def stop(number: int, _frame: object) -> None:
        raise train.Preempted(
            f"{signal.Signals(number).name}: stopped; cache entries finished "
            "so far are kept, run it again to extract the rest"
        )

    with processes.signal_handlers(processes.PREEMPTION_SIGNALS, stop):
        yield


def extract_step(params: TimecatSettings) -> int:
    """Extract every feature probe_all reads into its cache, as one process or one rank of a
    torchrun/srun group (gloo on CPU, NCCL on GPU; each rank extracts its shard). Unfinished or
    changed training runs are refused before anything is extracted. Returns the number of
    cache entries the probes read (extracted now or found)."""
    process = distributed.start_process(params.device)
    print(
        f"extracting features: rank {process.rank}/{process.world_size} on {process.device}",
        flush=True,
    )
    try:
        experiment = plan(params)
        refuse_changed_runs(experiment.trainings)
        unfinished = [
            str(resolve(t.output_dir)) for t in experiment.trainings if not is_finished(t)
        ]
        if unfinished:
            raise ParameterError(
                f"not finished: {counted(len(unfinished), 'training run')}, so there is nothing "
                f"to extract from yet: {', '.join(unfinished[:5])}"
            )
        if process.main:
            initialise(experiment.initial)
        if dist.is_initialized():
            dist.barrier()
        with _stopped_by_preemption():
            found = [
                task_features(task, experiment.representations, params, progress=process.main)
                for task in params.tasks
            ]
        if process.main:
            with files.atomic_write(features_dir(params) / EXTRACTED) as handle:
                handle.write(
                    json.dumps(
                        _extraction_record(params, experiment.representations), indent=1
                    ).encode()
                )
        return len(
            {
                entry.path
                for task in found
                for entry in [
                    *task.train,
                    *task.eval,
                    *task.single.values(),
                    *(found for shift in task.extra for found in shift.sets),
                ]
            }
        )
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def probe_step(params: TimecatSettings) -> Path:
    """Probe every representation (features from the cache; missing ones are extracted here)
    and write the results and diagnostics tables notebook 03 writes; returns the results file.
    One process: probing reads cached features and needs no group."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ParameterError(
            "the probe step runs as one process, not under torchrun or srun with several tasks"
        )
    measured = probe_all(plan(params).representations, params)
    out = outputs.output_dir(params.output_dir)
    measured.diagnostics.write_parquet(out / TIME_CONCAT.diagnostics)
    measured.results.write_parquet(out / TIME_CONCAT.results)
    return out / TIME_CONCAT.results


def write_job_parameters(params: TimecatSettings, path: Path) -> Path:
    """The merged parameters as one file that a job layers over its profile (`-f`), so that it
    sees exactly what the notebook saw, papermill's injected values included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with files.atomic_write(path) as handle:
        handle.write(yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False).encode())
    return path


def job_args(step: Step, profile: str, parameters_file: Path) -> list[str]:
    """`python -m` arguments of a step."""
    return ["kit", step, "--profile", profile, "-f", str(parameters_file)]


def probe_processes(params: TimecatSettings) -> int:
    """The processes (GPUs) the probe step starts (an image probe's own torchrun, or one)."""
    return registry.get(params.probe_kind).processes(params.probe)


def step_settings(step: Step, settings: LaunchSettings, params: TimecatSettings) -> LaunchSettings:
    """The launch settings of a step, sized for its loaders: extraction uses all of them (every
    GPU of the node, or several nodes); probing is one process given as many GPUs as the
    processes it starts (probe_processes), which it runs under its own torchrun, or for a probe
    of cached features on CUDA the node's GPUs, its fits shared over them (kit.probes.parallel)."""
    cuda = params.device == "cuda"
    if step == "extract":
        return sized_for_loaders(settings, params.feature_workers, 1, cuda=cuda)
    processes = gpus = probe_processes(params)
    if cuda and isinstance(registry.get(params.probe_kind), FeatureProbe):
        gpus = shared_gpus(params.probe, settings.gpus_per_node or settings.nproc_per_node)
    own = registry.get(params.probe_kind).workers(params.probe)
    workers = own if processes > 1 and own is not None else params.feature_workers
    single = settings.model_copy(
        update={
            "nproc_per_node": 1,
            "nodes": 1,
            "workers": 1,
            "gpus_per_worker": gpus,
            "gpus_per_node": min(settings.gpus_per_node, gpus) or (gpus if cuda else 0),
        }
    )
    return sized_for_loaders(single, workers, 1, processes=processes, cuda=cuda)


def launch_step(
    step: Step, params: TimecatSettings, settings: LaunchSettings | None = None, wait: bool = True
) -> Launched:
    """Run a step as a job with the profile's launch settings (or `settings`): in this process
    (inline), as one process or one torchrun on this node (local, torchrun; log in
    <run_root>/logs/<step>.log), or as a Slurm job (`wait=False` returns once submitted)."""
    folder = runs_dir(params)
    parameters_file = write_job_parameters(params, folder / "jobs" / f"{NOTEBOOK}.parameters.yaml")
    return kit_launch.launch_step(
        step,
        job_args(step, params.profile, parameters_file),
        step_settings(step, settings or params.launch, params),
        folder,
        wait,
    )


def launch_extraction(params: TimecatSettings, wait: bool = True) -> bool:
    """Extract every feature the probes need as a launched job unless a finished extraction
    covers these parameters and checkpoints; returns whether they are all extracted now (False:
    a Slurm job is still queued or running). A failed job is named with its log."""
    if extraction_finished(params):
        return True
    launch_step("extract", params, wait=wait).check()
    return extraction_finished(params)


def export_jobs(params: TimecatSettings, settings: LaunchSettings, out: str | Path) -> list[Path]:
    """Ready-to-submit Slurm scripts in `out`: train.sbatch (the notebook's training runs, an
    array; absent when nothing is trained), extract.sbatch, probe.sbatch, and submit.sh, which
    submits them in that order, each after the previous one succeeded."""
    out = resolve(out)
    trainings = plan(params).trainings
    scripts = [sbatch.export_plan(trainings, settings, out)] if trainings else []
    parameters_file = write_job_parameters(params, out / f"{NOTEBOOK}.parameters.yaml")
    scripts += [
        sbatch.export_step(
            step,
            job_args(step, params.profile, parameters_file),
            step_settings(step, settings, params),
            out,
        )
        for step in ("extract", "probe")
    ]
    return [*scripts, sbatch.export_chain(scripts, out)]


def load_settings(
    profile: str, parameter_files: list[Path], overrides: list[str], check_inputs: bool = False
) -> TimecatSettings:
    """Notebook 03's parameters for a profile, files and KEY=VALUE overrides; with
    `check_inputs`, refused (naming file and key) when the data, checkpoints or packages they
    name cannot be read (kit.params.params.check_inputs), as `kit run` refuses them, before a
    step computes anything."""
    loaded, sources = kit_params.load(
        NOTEBOOK, profile, parameter_files, kit_params.parse_overrides(overrides)
    )
    assert isinstance(loaded, TimecatSettings)
    if check_inputs:
        kit_params.check_inputs(NOTEBOOK, loaded, sources)
    return loaded
