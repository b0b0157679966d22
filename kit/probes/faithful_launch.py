"""The authors' probe from a notebook: each probe's job run in this process, or a group of them
under one torchrun of `python -m kit.probes.faithful --jobs`, and the probe as the registry
names it (`faithful`)."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from kit.data import kinds
from kit.data.settings import DataSettings
from kit.files.files import atomic_write
from kit.files.paths import REPO_ROOT
from kit.launch.local import module_command
from kit.launch.settings import LaunchSettings
from kit.probes.base import ImageProbe, ImageProbeJob
from kit.probes.faithful import OPTIONS, faithful_identity, finished_result, run_faithful
from kit.probes.rows import ProbeError
from kit.probes.selection import ProbeResult
from kit.probes.settings import FaithfulProbeSettings
from kit.runtime.processes import child_environment, dying_with_parent, signal_tree


def _job_arguments(job: ImageProbeJob) -> list[str]:
    """One probe's command line for `main`; its dataset description is written to
    output/data.yaml."""
    settings, output = job.settings, Path(job.output)
    output.mkdir(parents=True, exist_ok=True)
    data_file = output / "data.yaml"
    with atomic_write(data_file) as handle:
        handle.write(job.data_config.model_dump_json().encode())  # JSON is YAML
    arguments = [
        "--checkpoints",
        *map(str, job.checkpoints),
        "--data",
        str(data_file),
        "--num-classes",
        str(job.num_classes),
        "--output",
        str(output),
        "--weight-decays",
        *map(str, job.weight_decays),
        "--milestones",
        *map(str, settings.milestones),
    ]
    for name in (*OPTIONS, "precision", "device"):
        arguments += [f"--{name.replace('_', '-')}", str(getattr(settings, name))]
    return arguments + [
        "--bn-batch",
        str(settings.bn_batch or 0),
        "--workers",
        str(settings.workers),
    ]


def _finished_job(job: ImageProbeJob) -> ProbeResult | None:
    identity = faithful_identity(
        job.checkpoints, job.data_config, job.num_classes, job.settings, job.weight_decays
    )
    return finished_result(Path(job.output), identity, job.settings.epochs)


def launch_faithful_all(
    jobs: Sequence[ImageProbeJob], folder: Path, progress: bool = True
) -> list[ProbeResult]:
    """`run_faithful` of every job, from a notebook, in groups of the same process count (the
    authors ran each kind of target on its own number of GPUs: `setups`): a group of one
    process in this process, a larger one as every unfinished probe of it in turn under one
    torchrun of `python -m kit.probes.faithful --jobs folder/probes-<n>.json` (DDP; its
    processes start and join their group once for all its probes), logging to
    `folder/probe-<n>.log`. Finished probes are read back without starting anything.
    Interrupted, the torchrun is stopped (each probe's state is saved every epoch, so running
    again resumes). Results come in the jobs' order."""
    groups: dict[int, list[int]] = {}
    for index, job in enumerate(jobs):
        groups.setdefault(job.settings.processes, []).append(index)
    results: dict[int, ProbeResult] = {}
    for count, indices in sorted(groups.items()):
        group = [jobs[index] for index in indices]
        done = (
            _launch_group(group, count, Path(folder))
            if count > 1
            else [
                run_faithful(
                    job.checkpoints,
                    job.data_config,
                    job.num_classes,
                    job.output,
                    job.settings,
                    job.weight_decays,
                    progress,
                )
                for job in group
            ]
        )
        results.update(zip(indices, done, strict=True))
    return [results[index] for index in range(len(jobs))]


def _launch_group(jobs: Sequence[ImageProbeJob], processes: int, folder: Path) -> list[ProbeResult]:
    """The unfinished probes of `jobs` in turn under one torchrun of `processes` processes, then
    every probe's result read back; a failed torchrun is reported with its log's errors."""
    code = 0
    log = folder / f"probe-{processes}.log"
    pending = [job for job in jobs if _finished_job(job) is None]
    if pending:
        folder.mkdir(parents=True, exist_ok=True)
        listing = folder / f"probes-{processes}.json"
        with atomic_write(listing) as handle:
            handle.write(json.dumps([_job_arguments(job) for job in pending], indent=1).encode())
        code = _run_logged(
            module_command(
                ["kit.probes.faithful", "--jobs", str(listing)],
                LaunchSettings(backend="torchrun", nproc_per_node=processes),
                rdzv_id=f"faithful{processes}",
            ),
            log,
        )
    results = [_finished_job(job) for job in jobs]
    if code != 0 or any(result is None for result in results):
        lines = log.read_text().splitlines()
        errors = list(dict.fromkeys(line for line in lines if line.startswith("error:")))
        raise ProbeError(
            f"the faithful probes of {processes} processes in {folder} failed "
            f"(exit status {code}); see {log}:\n" + "\n".join(errors or lines[-15:])
        )
    return [result for result in results if result is not None]


def _run_logged(command: list[str], log: Path) -> int:
    """Run `command` from the repository, its output to `log`; stopped with this process, and
    ended by the kernel when this process is killed outright (dying_with_parent)."""
    with log.open("w") as handle:
        process = subprocess.Popen(
            command,
            env=child_environment(command),
            cwd=REPO_ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            preexec_fn=dying_with_parent(),
        )
        try:
            return process.wait()
        except BaseException:
            signal_tree(process, signal.SIGTERM)
            process.wait()
            raise


class FaithfulProbe(ImageProbe):
    """The authors' probe as `kit.probes.registry` names it: `faithful`. It runs on images
    through frozen backbones, not on cached features, each kind of target with its own setup
    (`FaithfulProbeSettings.for_probe`) and weight decays (`FaithfulProbeSettings.grid`)."""

    settings = FaithfulProbeSettings

    def describe(self, settings: FaithfulProbeSettings, tasks: Mapping[str, DataSettings]) -> str:
        """What the probe does with `settings`, in one sentence, with each task's weight
        decays."""
        grids = "; ".join(
            f"{task} {settings.grid(task, data.kind)}" for task, data in tasks.items()
        )
        return (
            f"the authors' probe on images: BatchNorm1d + linear heads on the frozen "
            f"backbones ({settings.precision}), SGD lr {settings.lr} Nesterov, "
            f"{settings.epochs} epochs (x0.1 after epochs {settings.milestones}), "
            + (
                _setups(settings)
                if settings.setups
                else f"global batch {settings.batch_size} over {settings.processes} process(es)"
            )
            + f"; weight decays {grids}"
        )

    def processes(self, settings: FaithfulProbeSettings) -> int:
        """The most any target's probes take (`processes`)."""
        return settings.processes

    def workers(self, settings: FaithfulProbeSettings) -> int:
        return settings.workers

    def job(
        self,
        settings: FaithfulProbeSettings,
        task: str,
        data: DataSettings,
        num_classes: int,
        checkpoints: Sequence[Path],
        output: Path,
    ) -> ImageProbeJob:
        """The probe of one target with its setup and its task's weight decays."""
        own = settings.for_probe(kinds.get(data.kind).probe_grid, len(checkpoints) > 1)
        return ImageProbeJob(
            checkpoints, data, num_classes, output, own, settings.grid(task, data.kind)
        )

    def run_all(
        self, jobs: Sequence[ImageProbeJob], folder: Path, progress: bool = True
    ) -> list[ProbeResult]:
        """`launch_faithful_all`."""
        return launch_faithful_all(jobs, folder, progress)


def _setups(settings: FaithfulProbeSettings) -> str:
    """Each named target's processes x batch and BatchNorm handling, in a few words."""
    return "per target " + ", ".join(
        f"{name} {setup.processes} x {setup.batch_size}{' SyncBN' if setup.sync_bn else ''}"
        for name, setup in settings.setups.items()
    )
