"""Start training runs on this machine, on several nodes, or as a Slurm array: one seam.

Backends (LaunchSettings.backend):
- `inline`: in this process, one run after another (debugging, tiny runs).
- `local`: `workers` runs at a time, each in its own process(es) pinned to its own GPUs
  (CUDA_VISIBLE_DEVICES) or, without CUDA, its own CPU cores (affinity and OMP_NUM_THREADS).
- `torchrun`: like `local`, but every run under its own torchrun (never two runs in one process
  group, whose stale rendezvous keys break the next); with `nodes` > 1 the same launch is started
  on every node and each run meets at `rdzv_endpoint` under its own rendezvous id.
- `slurm`: an array of jobs through submitit, one run per job; each task starts torchrun (or the
  trainer directly for one process), forwards the preemption signal to the trainers, waits for
  their checkpoint and requeues the job.

The caller decides which runs are pending (finished runs have a DONE marker); a run is finished
when its DONE marker exists, whatever launched it, so any backend can resume any run.
`python -m kit.launch plan ...` writes every run's config and a ready sbatch array script.

A step after training (notebook 03's feature extraction, its probes) is one command launched the
same way (`launch_step`: inline, one process or torchrun on this node, one Slurm job); `python -m
kit.launch extract|probe --profile P` starts them, and `plan --profile P` exports notebook 03's
runs, extraction and probing as sbatch scripts with submit.sh chaining them (afterok).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from kit.core.files import atomic_write
from kit.core.params import ParameterError, Strict
from kit.core.paths import REPO_ROOT, resolve
from kit.core.processes import (
    DONE,
    PREEMPTED_EXIT,
    child_environment,
    ignoring_signals,
    module_main,
    rendezvous_port,
    signal_tree,
)
from kit.core.progress import KeptBar
from kit.launch.warm import WarmProcesses
from kit.train.settings import TrainSettings

CONFIGS = "configs"
LOGS = "logs"
JOBS = "slurm_jobs.json"


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


@dataclass
class Launched:
    """What a launch did: runs finished now, runs that failed (with their logs), Slurm jobs."""

    finished: list[str] = field(default_factory=list)
    failed: dict[str, Path] = field(default_factory=dict)
    #: run name -> job id of the jobs submitted or still queued/running (slurm)
    submitted: dict[str, str] = field(default_factory=dict)

    def check(self) -> Launched:
        """Raise naming the log of every run that failed."""
        if self.failed:
            raise RuntimeError("training failed: " + "; ".join(
                f"{name} (see {log})" for name, log in self.failed.items()))
        return self


def run_name(config: TrainSettings, work_dir: Path) -> str:
    """A run's name: its folder relative to the work folder (or absolute), `/` as `__`."""
    out = resolve(config.output_dir)
    try:
        relative = out.relative_to(work_dir)
    except ValueError:
        relative = Path(str(out).lstrip(os.sep))
    return str(relative).replace(os.sep, "__")


def is_finished(config: TrainSettings) -> bool:
    """Whether a run has finished (its DONE marker exists), whatever launched it."""
    return (resolve(config.output_dir) / DONE).exists()


def write_configs(configs: Sequence[TrainSettings], work_dir: Path) -> dict[str, Path]:
    """Each run's YAML under work_dir/configs, by run name (replaced atomically)."""
    folder = work_dir / CONFIGS
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for config in configs:
        name = run_name(config, work_dir)
        path = folder / f"{name}.yaml"
        with atomic_write(path) as handle:
            handle.write(yaml.safe_dump(config.model_dump(), sort_keys=False).encode())
        files[name] = path
    return files


def launch(configs: list[TrainSettings], settings: LaunchSettings, work_dir: str | Path,
           wait: bool = True) -> Launched:
    """Train the given runs with the chosen backend (all of them: the caller leaves out the
    finished ones). For slurm, `wait=False` returns once the array is submitted; calling again
    later reports the jobs still queued or running and submits only runs without a live job."""
    work_dir = resolve(work_dir)
    files = write_configs(configs, work_dir)
    runs = dict(zip(files, configs))
    if settings.backend == "inline":
        return _inline(runs)
    if settings.backend == "slurm":
        return _slurm({name: SlurmTask(train_args(files[name]), settings) for name in runs},
                      settings, work_dir, wait, lambda name, _: is_finished(runs[name]))
    return _local(runs, files, settings, work_dir / LOGS, wait)


def _inline(runs: dict[str, TrainSettings]) -> Launched:
    from kit.train import trainer as train  # torch only where training happens

    launched = Launched()
    for name, config in runs.items():
        train.train(config)
        launched.finished.append(name)
    return launched


# ---------------------------------------------------------------------------------------------
# Processes on this node: commands, pinning, progress
# ---------------------------------------------------------------------------------------------

def train_args(config_file: Path) -> list[str]:
    """`python -m` arguments training one run."""
    return ["kit.train", "--config", str(config_file)]


def _single_process(settings: LaunchSettings) -> bool:
    """Whether a command starts as the module itself: one process, and not the torchrun backend."""
    return settings.backend != "torchrun" and settings.nproc_per_node * settings.nodes == 1


def module_command(module_args: Sequence[str], settings: LaunchSettings, rdzv_id: str,
                   endpoint: str | None = None) -> list[str]:
    """The command running `python -m <module_args>` (a trainer, an extraction): the module
    itself for one process (except under the torchrun backend), else under one torchrun
    (standalone on one node, a rendezvous across nodes)."""
    program = ["-m", *module_args]
    if _single_process(settings):
        return [sys.executable, *program]
    command = [sys.executable, "-m", "torch.distributed.run",
               f"--nproc-per-node={settings.nproc_per_node}"]
    if settings.nodes == 1:
        command.append("--standalone")
    else:
        command += [f"--nnodes={settings.nodes}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint={endpoint or settings.rdzv_endpoint}",
                    f"--rdzv-id={rdzv_id}"]
    return command + program


@dataclass(frozen=True)
class Slot:
    """The devices of one concurrent worker: GPUs, or CPU cores and a thread count."""

    gpus: tuple[int, ...]
    cpus: tuple[int, ...]
    threads: int

    def environment(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": str(self.threads)}
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus))
        return env


def slots(settings: LaunchSettings) -> list[Slot]:
    """Disjoint devices for each worker: nproc_per_node GPUs each, or an equal share of this
    process's CPU cores when there is no GPU."""
    import torch

    workers, per_run = settings.workers, settings.nproc_per_node
    cpus = sorted(os.sched_getaffinity(0))
    if torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = ([int(g) for g in visible.split(",") if g.strip()] if visible
                else list(range(torch.cuda.device_count())))
        if workers * per_run > len(gpus):
            raise ParameterError(f"workers x nproc_per_node: {workers} x {per_run} GPUs exceed "
                                 f"the {len(gpus)} visible GPUs")
        share = len(cpus) // workers
        return [Slot(tuple(gpus[w * per_run:(w + 1) * per_run]),
                     tuple(cpus[w * share:(w + 1) * share]) or tuple(cpus),
                     max(1, share // per_run)) for w in range(workers)]
    if workers > len(cpus):
        raise ParameterError(f"workers: {workers} workers exceed the {len(cpus)} CPU cores this "
                             "process may use")
    share = len(cpus) // workers
    return [Slot((), tuple(cpus[w * share:(w + 1) * share]), max(1, share // per_run))
            for w in range(workers)]


def _ignore_preemption_signals(cpus: tuple[int, ...] = ()) -> Callable[[], None]:
    """In the child before exec: pin it to `cpus`, and ignore USR1/USR2 so that torchrun, which
    has no handler for them, is not killed when a scheduler signals every process; the trainers
    install their own handlers."""
    return ignoring_signals((signal.SIGUSR1, signal.SIGUSR2), cpus)


#: this process's warm workers (kit.warm), started by `warm`
WARM = WarmProcesses()


def warm(settings: LaunchSettings, device: str) -> None:
    """Start now the processes a local launch on CPU will run its commands in: they import torch
    while this process goes on (call it before importing torch). Nothing for other backends,
    for torchrun groups or on a GPU."""
    if settings.backend == "local" and _single_process(settings) and device == "cpu":
        WARM.start(settings.workers)


def _start(command: Sequence[str], slot: Slot, log: Path) -> subprocess.Popen:
    """Start a launched command on a slot's devices, its output (and errors) into `log`: in a
    warm process when one is waiting (CPU slots only), else in a new one."""
    env = child_environment(command, slot.environment())
    if not slot.gpus and (process := WARM.run(command, env, slot.cpus, log)) is not None:
        return process
    with log.open("w") as output:
        return subprocess.Popen(command, env=env,
                                cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT,
                                preexec_fn=_ignore_preemption_signals(slot.cpus))


def _stop(processes: Sequence[subprocess.Popen]) -> None:
    """Interrupted: the commands still running get SIGUSR1 (trainers checkpoint, a step keeps
    what it finished) and are waited for."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        signal_tree(process, signal.SIGUSR1)
    for process in running:
        process.wait()


def last_record(metrics: Path) -> dict[str, Any] | None:
    """The last complete row of a run's metrics.jsonl (None before the first)."""
    try:
        with metrics.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            lines = handle.read().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines[:-1]):  # the part after the last newline may be torn
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


class Progress:
    """One bar per running run (a `KeptBar`), read from its metrics.jsonl: step/total, loss,
    images/s."""

    def __init__(self) -> None:
        self.bars: dict[str, KeptBar] = {}

    def start(self, name: str, config: TrainSettings) -> None:
        self.bars[name] = KeptBar(total=config.iterations, desc=name, unit="step",
                                  position=len(self.bars), leave=True)

    def update(self, name: str, config: TrainSettings) -> None:
        record = last_record(resolve(config.output_dir) / "metrics.jsonl")
        bar = self.bars[name]
        if record and record["step"] > bar.n:
            if bar.n == 0:  # a run that waited its turn in a chain: its clock starts when it did,
                bar.reset(total=bar.total)  # as its first record's rate dates it
                bar.start_t -= record["step"] * config.batch_size / max(record["images_per_s"],
                                                                        1e-9)
            bar.set_postfix(loss=f"{record['loss']:.3f}", img_s=f"{record['images_per_s']:.0f}",
                            refresh=False)
            bar.update(record["step"] - bar.n)

    def finish(self, name: str, config: TrainSettings) -> None:
        self.update(name, config)
        self.bars[name].close()


def run_cost(config: TrainSettings) -> float:
    """A run's relative compute: images seen times the width's square (a convolution's cost)."""
    return config.iterations * config.batch_size * config.width ** 2


def chains(runs: dict[str, TrainSettings], count: int) -> list[list[str]]:
    """The runs dealt into at most `count` lists of about equal cost (costliest first, each to
    the least loaded list), each list to be trained in turn by one process."""
    loads, dealt = [0.0] * count, [[] for _ in range(count)]
    for name in sorted(runs, key=lambda name: -run_cost(runs[name])):
        least = loads.index(min(loads))
        dealt[least].append(name)
        loads[least] += run_cost(runs[name])
    return [chain for chain in dealt if chain]


def _local(runs: dict[str, TrainSettings], files: dict[str, Path], settings: LaunchSettings,
           log_dir: Path, wait: bool) -> Launched:
    """Run `workers` processes at a time, each pinned to its slot, until all runs have ended.
    Single-process runs are dealt into one chain per slot, trained in turn by one process:
    starting Python and importing torch costs seconds a run, as much as a small CPU run trains.
    Runs under torchrun get a process (group) each."""
    if not wait:
        raise ParameterError(f"backend: {settings.backend} trains while this process waits; "
                             "wait=False is for slurm")
    log_dir.mkdir(parents=True, exist_ok=True)
    free = slots(settings)
    single = _single_process(settings)
    queue = chains(runs, len(free)) if single else [[name] for name in runs]
    running: list[tuple[subprocess.Popen, Slot, Path, list[str]]] = []
    launched, progress = Launched(), Progress()
    try:
        while queue or running:
            while queue and free:
                chain, slot = queue.pop(0), free.pop(0)
                log = log_dir / f"{chain[0]}.log"
                command = module_command(
                    train_args(files[chain[0]]) + [arg for name in chain[1:]
                                                   for arg in ("--config", str(files[name]))],
                    settings, f"{settings.rdzv_id}-{chain[0]}")
                running.append((_start(command, slot, log), slot, log, chain))
                for name in chain:
                    progress.start(name, runs[name])
            time.sleep(0.2)
            for entry in list(running):
                process, slot, log, chain = entry
                if process.poll() is None:
                    for name in chain:
                        progress.update(name, runs[name])
                    continue
                running.remove(entry)
                free.append(slot)
                for name in chain:
                    progress.finish(name, runs[name])
                    if is_finished(runs[name]):
                        launched.finished.append(name)
                    else:
                        launched.failed[name] = log
    finally:
        _stop([process for process, _, _, _ in running])
    return launched


# ---------------------------------------------------------------------------------------------
# Slurm through submitit
# ---------------------------------------------------------------------------------------------

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
        command = module_command(self.module_args, self.settings, f"{self.settings.rdzv_id}-"
                                 f"{job.job_id}", f"{job.hostnames[0]}:{port}")
        self.process = subprocess.Popen(command, env=child_environment(command), cwd=REPO_ROOT,
                                        preexec_fn=_ignore_preemption_signals())
        code = self._wait()
        if code == PREEMPTED_EXIT:  # stopped by a signal submitit did not see: requeue as if
            os.kill(os.getpid(), job._usr_sig())
            time.sleep(60)  # submitit's handler exits from here
        if code != 0:
            raise RuntimeError(f"python -m {shlex.join(self.module_args)}: exited with status "
                               f"{code}")
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
    the node's processes), the preemption signal, requeue on it."""
    import submitit

    folder.mkdir(parents=True, exist_ok=True)
    setup = [*settings.setup, f"export SUBMITIT_PREEMPT_SIGNAL={settings.signal}"]
    if settings.cluster == "local":
        made = submitit.LocalExecutor(folder=folder)
        made.update_parameters(timeout_min=settings.timeout_min, tasks_per_node=1,
                               gpus_per_node=settings.gpus_per_node,
                               signal_delay_s=settings.signal_delay_s, setup=setup)
        return made
    made = submitit.SlurmExecutor(folder=folder, max_num_timeout=100)
    extra = {"signal": f"{settings.signal}@{settings.signal_delay_s}"}
    if settings.account:
        extra["account"] = settings.account
    made.update_parameters(
        time=settings.timeout_min, nodes=settings.nodes, ntasks_per_node=1,
        gpus_per_node=settings.gpus_per_node or None, partition=settings.partition,
        cpus_per_task=settings.cpus_per_task, array_parallelism=settings.max_concurrent or 256,
        signal_delay_s=settings.signal_delay_s, setup=setup, additional_parameters=extra)
    return made


def _slurm(tasks: dict[str, SlurmTask], settings: LaunchSettings, work_dir: Path, wait: bool,
           finished: Callable[[str, bool], bool]) -> Launched:
    """Submit the tasks as one array, except those with a live job recorded in work_dir; when
    waiting, `finished(name, job succeeded)` says which ended well."""
    folder = work_dir / "submitit"
    record_path = work_dir / JOBS
    recorded = json.loads(record_path.read_text()) if record_path.exists() else {}
    launched = Launched()
    alive = {name: job_id for name, job_id in recorded.items()
             if name in tasks and _job_alive(settings, folder, job_id)}
    to_submit = [name for name in tasks if name not in alive]
    jobs = {}
    if to_submit:
        made = executor(settings, folder)
        with made.batch():
            for name in to_submit:
                jobs[name] = made.submit(tasks[name])
    launched.submitted = alive | {name: job.job_id for name, job in jobs.items()}
    record_path.write_text(json.dumps(recorded | launched.submitted, indent=1))
    if not wait:
        return launched
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
    return launched


def _job_alive(settings: LaunchSettings, folder: Path, job_id: str) -> bool:
    """Whether a recorded job is still queued or running (Slurm's accounting says)."""
    if settings.cluster == "local":
        return False  # a local job ends with the process that submitted it
    import submitit

    state = submitit.SlurmJob(folder, job_id).state
    return state in ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING",
                     "RESIZING", "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED")


# ---------------------------------------------------------------------------------------------
# One step after training (feature extraction, probing) as a job
# ---------------------------------------------------------------------------------------------

def launch_step(name: str, module_args: Sequence[str], settings: LaunchSettings,
                work_dir: str | Path, wait: bool = True) -> Launched:
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
        return _slurm({name: SlurmTask(module_args, settings)}, settings, work_dir, wait,
                      lambda _, succeeded: succeeded)
    if not wait:
        raise ParameterError(f"backend: {settings.backend} runs {name} while this process "
                             "waits; wait=False is for slurm")
    log = work_dir / LOGS / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    (slot,) = slots(settings.model_copy(update={"workers": 1}))
    command = module_command(module_args, settings, f"{settings.rdzv_id}-{name}")
    process = _start(command, slot, log)
    try:
        code = process.wait()
    finally:
        _stop([process])
    if code == 0:
        launched.finished.append(name)
    else:
        launched.failed[name] = log
    return launched


# ---------------------------------------------------------------------------------------------
# Exported plans: configs and sbatch scripts for submitting by hand
# ---------------------------------------------------------------------------------------------

def _sbatch(name: str, settings: LaunchSettings, out: Path, command: str,
            array: str | None = None) -> str:
    """An sbatch script (out/<name>.sbatch) whose `srun` starts nproc_per_node processes of
    `command` on each node, which form one job from Slurm's variables; a command stopped by the
    signal (exit 75) requeues its job."""
    options = [f"--job-name=kit-{name}", *[f"--array={array}"] * bool(array),
               f"--nodes={settings.nodes}", f"--ntasks-per-node={settings.nproc_per_node}",
               f"--time={settings.timeout_min}",
               f"--signal={settings.signal}@{settings.signal_delay_s}", "--requeue",
               f"--output={out / LOGS}/{name}_" + ("%A_%a.log" if array else "%j.log")]
    options += [f"--gpus-per-node={settings.gpus_per_node}"] * bool(settings.gpus_per_node)
    options += [f"--cpus-per-task={settings.cpus_per_task}"] * bool(settings.cpus_per_task)
    options += [f"--partition={settings.partition}"] * bool(settings.partition)
    options += [f"--account={settings.account}"] * bool(settings.account)
    return "\n".join([
        "#!/bin/bash", *(f"#SBATCH {option}" for option in options), "",
        f"# written by `python -m kit.launch plan`; submit with: sbatch {out / name}.sbatch",
        *settings.setup,
        f"cd {shlex.quote(str(REPO_ROOT))}",
        f'export PYTHONPATH={shlex.quote(str(REPO_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f"srun --kill-on-bad-exit=1 {shlex.quote(sys.executable)} {command}",
        "status=$?",
        f'if [ "$status" -eq {PREEMPTED_EXIT} ]; then  # checkpointed on the signal: run again',
        '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
        "fi",
        'exit "$status"', ""])


def sbatch_script(files: Sequence[Path], settings: LaunchSettings, out: Path) -> str:
    """A Slurm array, one run per task (its config read from out/runs.txt)."""
    limit = f"%{settings.max_concurrent}" if settings.max_concurrent else ""
    runs = shlex.quote(str(out / "runs.txt"))
    return _sbatch("train", settings, out,
                   f'-m kit.train --config "$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {runs})"',
                   f"0-{len(files) - 1}{limit}")


def _write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def export_plan(configs: Sequence[TrainSettings], settings: LaunchSettings, out: str | Path) -> Path:
    """Every run's config under out/configs, their list in out/runs.txt and out/train.sbatch."""
    out = resolve(out)
    files = list(write_configs(configs, out).values())
    (out / LOGS).mkdir(parents=True, exist_ok=True)
    (out / "runs.txt").write_text("".join(f"{path}\n" for path in files))
    return _write_script(out / "train.sbatch", sbatch_script(files, settings, out))


def export_step(name: str, module_args: Sequence[str], settings: LaunchSettings,
                out: str | Path) -> Path:
    """out/<name>.sbatch: one job running `python -m <module_args>` (see launch_step)."""
    out = resolve(out)
    (out / LOGS).mkdir(parents=True, exist_ok=True)
    return _write_script(out / f"{name}.sbatch",
                         _sbatch(name, settings, out, f"-m {shlex.join(module_args)}"))


def export_chain(scripts: Sequence[Path], out: str | Path) -> Path:
    """out/submit.sh: submits the scripts in order, each once the previous one has succeeded
    (`--dependency=afterok`: for an array, once every task has)."""
    lines = ["#!/bin/bash", "# written by `python -m kit.launch plan`: each job starts once the "
             "previous one succeeded", "set -euo pipefail", "job="]
    for script in scripts:
        lines += [f'job="$(sbatch --parsable ${{job:+--dependency=afterok:$job}} '
                  f'{shlex.quote(str(script))})"', 'job="${job%%;*}"',
                  f'echo "{script.name}: job $job"']
    return _write_script(resolve(out) / "submit.sh", "\n".join(lines) + "\n")


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
