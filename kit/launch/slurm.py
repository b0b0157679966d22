"""The slurm backend: commands as submitit jobs that forward preemption and requeue themselves.

Each job's task (one per node) starts torchrun (or the module directly for one process), passes
the scheduler's signal on to the trainers, waits for their checkpoint and requeues the job (see
submitit's documentation on checkpointing and preemption). Submitted jobs are recorded in the
work folder, so a later launch submits only commands without a live job.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.files import files
from kit.files.paths import REPO_ROOT
from kit.launch.local import ignore_preemption_signals, module_command
from kit.launch.runs import Launched
from kit.launch.settings import LaunchSettings
from kit.runtime.processes import (
    PREEMPTED_EXIT,
    PREEMPTED_MARKER,
    child_environment,
    rendezvous_port,
    signal_tree,
)

JOBS = "slurm_jobs.json"
#: Slurm job states of a job still queued or running
LIVE_STATES = (
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
)


class SlurmTask:
    """One command (`python -m <module_args>`: a run's trainer, an extraction) as a submitit
    job: each task (one per node) starts its torchrun (or the module for a single process) and
    waits for it. On the scheduler's signal submitit calls `checkpoint`, which passes the
    signal to the processes, waits for them to save what they have (a checkpoint, finished
    cache entries) and exit, and requeues the same command; a command preempted on its own
    (SIGTERM, exit status 75) requeues the same way."""

    def __init__(self, module_args: Sequence[str], settings: LaunchSettings) -> None:
        self.module_args, self.settings = list(module_args), settings
        self.process: subprocess.Popen | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"module_args": self.module_args, "settings": self.settings, "process": None}

    def __call__(self) -> str:
        import submitit

        job = submitit.JobEnvironment()
        port = rendezvous_port(int(str(job.job_id).split("_")[0]))
        command = module_command(
            self.module_args,
            self.settings,
            f"{self.settings.rdzv_id}-{job.job_id}",
            f"{job.hostnames[0]}:{port}",
        )
        marker = Path(job.paths.folder) / f"{job.job_id}.preempted"
        marker.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            command,
            env=child_environment(command) | {PREEMPTED_MARKER: str(marker)},
            cwd=REPO_ROOT,
            preexec_fn=ignore_preemption_signals(),
        )
        code = self._wait()
        if code == PREEMPTED_EXIT or marker.exists():  # a signal submitit did not see: requeue
            os.kill(os.getpid(), job._usr_sig())  # as if submitit had seen it
            time.sleep(60)  # submitit's handler exits from here
        if code != 0:
            raise RuntimeError(
                f"python -m {shlex.join(self.module_args)}: exited with status {code}"
            )
        return shlex.join(self.module_args)

    def _wait(self) -> int:
        """Poll rather than block: a blocking wait holds the lock the signal handler's own
        wait needs."""
        assert self.process is not None
        while (code := self.process.poll()) is None:
            time.sleep(0.5)
        return code

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        if self.process is not None and self.process.poll() is None:
            signal_tree(self.process, signal.SIGUSR1)
            self._wait()
        return submitit.helpers.DelayedSubmission(SlurmTask(self.module_args, self.settings))


def executor(settings: LaunchSettings, folder: Path) -> Any:
    """A submitit executor with the launch's resources: one task per node (torchrun starts
    the node's processes) with the node's cores and memory (or the whole node), the
    preemption signal, requeue on it."""
    import submitit

    folder.mkdir(parents=True, exist_ok=True)
    setup = [*settings.setup, f"export SUBMITIT_PREEMPT_SIGNAL={settings.signal}"]
    if settings.cluster == "local":
        made = submitit.LocalExecutor(folder=folder)
        made.update_parameters(
            timeout_min=settings.timeout_min,
            tasks_per_node=1,
            gpus_per_node=settings.gpus_per_node,
            signal_delay_s=settings.signal_delay_s,
            setup=setup,
        )
        return made
    slurm = submitit.SlurmExecutor(folder=folder, max_num_timeout=100)
    slurm.update_parameters(**slurm_parameters(settings), setup=setup)
    return slurm


def slurm_parameters(settings: LaunchSettings) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters of a launch (setup aside)."""
    extra: dict[str, Any] = {"signal": f"{settings.signal}@{settings.signal_delay_s}"}
    if settings.account:
        extra["account"] = settings.account
    if settings.exclusive:
        extra["exclusive"] = True
    return {
        "time": settings.timeout_min,
        "nodes": settings.nodes,
        "ntasks_per_node": 1,
        "gpus_per_node": settings.gpus_per_node or None,
        "partition": settings.partition,
        "cpus_per_task": settings.cpus_per_node,
        "mem": "0" if settings.exclusive else (f"{settings.mem_gb}GB" if settings.mem_gb else None),
        "array_parallelism": settings.max_concurrent or 256,
        "signal_delay_s": settings.signal_delay_s,
        "additional_parameters": extra,
    }


def submit(
    tasks: dict[str, SlurmTask],
    settings: LaunchSettings,
    work_dir: Path,
    wait: bool,
    finished: Callable[[str, bool], bool],
) -> Launched:
    """Submit the tasks as one array, except those with a live job recorded in work_dir; when
    waiting, `finished(name, job succeeded)` says which ended well."""
    folder = work_dir / "submitit"
    record_path = work_dir / JOBS
    recorded = json.loads(record_path.read_text()) if record_path.exists() else {}
    launched = Launched()
    alive = {
        name: job_id
        for name, job_id in recorded.items()
        if name in tasks and _job_alive(settings, folder, job_id)
    }
    to_submit = [name for name in tasks if name not in alive]
    jobs = {}
    if to_submit:
        made = executor(settings, folder)
        with made.batch():
            for name in to_submit:
                jobs[name] = made.submit(tasks[name])
    launched.submitted = alive | {name: job.job_id for name, job in jobs.items()}
    files.write_text(record_path, json.dumps(recorded | launched.submitted, indent=1))
    if wait:
        _wait_for(jobs, finished, launched)
    return launched


def _wait_for(
    jobs: dict[str, Any], finished: Callable[[str, bool], bool], launched: Launched
) -> None:
    """Wait for every submitted job; record each as finished or failed (with its error log)."""
    for name, job in jobs.items():
        try:
            job.result()
            succeeded = True
        except Exception:  # noqa: BLE001 - the job's own log holds the cause
            succeeded = False
        if finished(name, succeeded):
            launched.finished.append(name)
        else:
            launched.failed[name] = Path(job.paths.stderr)


def _job_alive(settings: LaunchSettings, folder: Path, job_id: str) -> bool:
    """Whether a recorded job is still queued or running (Slurm's accounting says)."""
    if settings.cluster == "local":
        return False  # a local job ends with the process that submitted it
    import submitit

    return submitit.SlurmJob(folder, job_id).state in LIVE_STATES
