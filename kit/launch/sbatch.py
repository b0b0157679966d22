"""Exported plans: run configs, sbatch scripts and a submit chain for submitting by hand.

`python -m kit launch plan ...` writes every run's config and a ready sbatch array script; with a
profile it also exports notebook 03's extraction and probing as sbatch scripts, and submit.sh
chains them (afterok).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from kit.files import files
from kit.files.paths import REPO_ROOT, resolve
from kit.launch.runs import LOGS, write_configs
from kit.launch.settings import LaunchSettings, sized_for_training
from kit.runtime.processes import PREEMPTED_EXIT, PREEMPTED_MARKER
from kit.train.settings import TrainSettings


def resource_options(settings: LaunchSettings, tasks_per_node: int) -> list[str]:
    """sbatch's resource options: GPUs per node, and either whole nodes (`exclusive`) or the
    cores and memory the loaders need (LaunchSettings.cpus_per_node and mem_gb, which
    kit.launch.settings.sized_for_loaders fills in), cores split over the node's tasks."""
    options = [f"--gpus-per-node={settings.gpus_per_node}"] * bool(settings.gpus_per_node)
    if settings.exclusive:
        options += ["--exclusive", "--mem=0"]
    if settings.cpus_per_node:
        options.append(f"--cpus-per-task={cpus_per_task(settings.cpus_per_node, tasks_per_node)}")
    if settings.mem_gb and not settings.exclusive:
        options.append(f"--mem={settings.mem_gb}G")
    return options


def cpus_per_task(cpus_per_node: int, tasks_per_node: int) -> int:
    """The cores each task gets: the node's cores (LaunchSettings.cpus_per_node) split over its
    tasks."""
    return max(1, cpus_per_node // tasks_per_node)


def srun_options(settings: LaunchSettings) -> list[str]:
    """srun's own options: the cores of each task again, since some Slurm versions (22.05 among
    them) do not pass sbatch's --cpus-per-task on to srun, and each task's loader workers would
    then share one core."""
    if not settings.cpus_per_node:
        return []
    return [f"--cpus-per-task={cpus_per_task(settings.cpus_per_node, settings.nproc_per_node)}"]


def _sbatch(
    name: str, settings: LaunchSettings, out: Path, command: str, array: str | None = None
) -> str:
    """An sbatch script (out/<name>.sbatch) whose `srun` starts nproc_per_node processes of
    `command` on each node, which form one job from Slurm's variables. A command stopped by the
    signal creates the marker KIT_PREEMPTED_MARKER names (kit.runtime.processes) after saving, and
    the job requeues itself when the marker exists (or srun passed on exit status 75)."""
    options = [
        f"--job-name=kit-{name}",
        *[f"--array={array}"] * bool(array),
        f"--nodes={settings.nodes}",
        f"--ntasks-per-node={settings.nproc_per_node}",
        f"--time={settings.timeout_min}",
        f"--signal={settings.signal}@{settings.signal_delay_s}",
        "--requeue",
        f"--output={out / LOGS}/{name}_" + ("%A_%a.log" if array else "%j.log"),
        *resource_options(settings, settings.nproc_per_node),
    ]
    options += [f"--partition={settings.partition}"] * bool(settings.partition)
    options += [f"--account={settings.account}"] * bool(settings.account)
    marker = shlex.quote(str(out / LOGS)) + f'/{name}_"$SLURM_JOB_ID".preempted'
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {option}" for option in options),
            "",
            f"# written by `python -m kit launch plan`; submit with: sbatch {out / name}.sbatch",
            *settings.setup,
            f"cd {shlex.quote(str(REPO_ROOT))}",
            f'export PYTHONPATH={shlex.quote(str(REPO_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}"',
            'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
            f"export {PREEMPTED_MARKER}={marker}",
            f'rm -f "${PREEMPTED_MARKER}"',
            " ".join(
                [
                    "srun",
                    "--kill-on-bad-exit=1",
                    *srun_options(settings),
                    shlex.quote(sys.executable),
                    command,
                ]
            ),
            "status=$?",
            (
                f'if [ -e "${PREEMPTED_MARKER}" ] || [ "$status" -eq {PREEMPTED_EXIT} ]; then'
                "  # checkpointed on the signal: run again"
            ),
            '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
            "fi",
            'exit "$status"',
            "",
        ]
    )


def sbatch_script(run_files: Sequence[Path], settings: LaunchSettings, out: Path) -> str:
    """A Slurm array, one run per task (its config read from out/runs.txt)."""
    limit = f"%{settings.max_concurrent}" if settings.max_concurrent else ""
    runs = shlex.quote(str(out / "runs.txt"))
    return _sbatch(
        "train",
        settings,
        out,
        f'-m kit.train --config "$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {runs})"',
        f"0-{len(run_files) - 1}{limit}",
    )


def _write_script(path: Path, text: str) -> Path:
    files.write_text(path, text)
    path.chmod(0o755)
    return path


def export_plan(
    trainings: Sequence[TrainSettings], settings: LaunchSettings, out: str | Path
) -> Path:
    """Every run's config under out/configs, their list in out/runs.txt and out/train.sbatch
    (asking for the cores and memory the runs' loaders need)."""
    out = resolve(out)
    settings = sized_for_training(trainings, settings)
    written = list(write_configs(trainings, out).values())
    (out / LOGS).mkdir(parents=True, exist_ok=True)
    files.write_text(out / "runs.txt", "".join(f"{path}\n" for path in written))
    return _write_script(out / "train.sbatch", sbatch_script(written, settings, out))


def export_step(
    name: str, module_args: Sequence[str], settings: LaunchSettings, out: str | Path
) -> Path:
    """out/<name>.sbatch: one job running `python -m <module_args>` (see launch_step)."""
    out = resolve(out)
    (out / LOGS).mkdir(parents=True, exist_ok=True)
    return _write_script(
        out / f"{name}.sbatch", _sbatch(name, settings, out, f"-m {shlex.join(module_args)}")
    )


def export_chain(scripts: Sequence[Path], out: str | Path) -> Path:
    """out/submit.sh: submits the scripts in order, each once the previous one has succeeded
    (`--dependency=afterok`: for an array, once every task has)."""
    lines = [
        "#!/bin/bash",
        "# written by `python -m kit launch plan`: each job starts once the previous one succeeded",
        "set -euo pipefail",
        "job=",
    ]
    for script in scripts:
        lines += [
            f'job="$(sbatch --parsable ${{job:+--dependency=afterok:$job}} '
            f'{shlex.quote(str(script))})"',
            'job="${job%%;*}"',
            f'echo "{script.name}: job $job"',
        ]
    return _write_script(resolve(out) / "submit.sh", "\n".join(lines) + "\n")
