"""Commands on this node's devices: pinned slots, warm workers, and the local/torchrun backends.

`local` runs `workers` commands at a time, each in its own process(es) pinned to its own GPUs
(CUDA_VISIBLE_DEVICES) or, without CUDA, its own CPU cores (affinity and OMP_NUM_THREADS).
`torchrun` does the same with every command under its own torchrun, whose ranks form one process
group for all the runs the command trains in turn (a group is never started twice in one
torchrun: stale rendezvous keys broke the second); with `nodes` > 1 the same launch is started
on every node and each command meets at `rdzv_endpoint` under its own rendezvous id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.files.paths import REPO_ROOT
from kit.launch.progress import Progress, last_record
from kit.launch.runs import Launched, is_finished, train_args
from kit.launch.settings import LaunchSettings
from kit.launch.warm import WarmProcesses
from kit.params.params import ParameterError
from kit.readout.numbers import counted
from kit.runtime.processes import child_environment, ignoring_signals, signal_tree
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings


def single_process(settings: LaunchSettings) -> bool:
    """Whether a command starts as the module itself: one process, and not the torchrun backend."""
    return settings.backend != "torchrun" and settings.nproc_per_node * settings.nodes == 1


def module_command(
    module_args: Sequence[str], settings: LaunchSettings, rdzv_id: str, endpoint: str | None = None
) -> list[str]:
    """The command running `python -m <module_args>` (a trainer, an extraction): the module
    itself for one process (except under the torchrun backend), else under one torchrun
    (standalone on one node, a rendezvous across nodes)."""
    program = ["-m", *module_args]
    if single_process(settings):
        return [sys.executable, *program]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={settings.nproc_per_node}",
    ]
    if settings.nodes == 1:
        command.append("--standalone")
    else:
        command += [
            f"--nnodes={settings.nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint or settings.rdzv_endpoint}",
            f"--rdzv-id={rdzv_id}",
        ]
    return command + program


@dataclass(frozen=True)
class Slot:
    """The devices of one concurrent worker: GPUs, or CPU cores and a thread count. A GPU is
    named as CUDA_VISIBLE_DEVICES names it: an index, or a `GPU-…`/`MIG-…` UUID, as schedulers
    set it (Slurm's GPU binding and some clusters' prologues give UUIDs)."""

    gpus: tuple[str, ...]
    cpus: tuple[int, ...]
    threads: int

    def environment(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": str(self.threads)}
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        return env


def slots(settings: LaunchSettings) -> list[Slot]:
    """Disjoint devices for each worker: gpus_per_worker (default nproc_per_node) GPUs each, or
    an equal share of this process's CPU cores when there is no GPU."""
    import torch

    workers, per_run = settings.workers, settings.gpus_per_worker or settings.nproc_per_node
    cpus = sorted(os.sched_getaffinity(0))
    if torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = (
            [g.strip() for g in visible.split(",") if g.strip()]
            if visible
            else [str(index) for index in range(torch.cuda.device_count())]
        )
        if workers * per_run > len(gpus):
            raise ParameterError(
                f"workers x GPUs per worker: {workers} x {per_run} GPUs exceed "
                f"the {len(gpus)} visible GPUs"
            )
        share = len(cpus) // workers
        return [
            Slot(
                tuple(gpus[w * per_run : (w + 1) * per_run]),
                tuple(cpus[w * share : (w + 1) * share]) or tuple(cpus),
                max(1, share // settings.nproc_per_node),
            )
            for w in range(workers)
        ]
    if workers > len(cpus):
        raise ParameterError(
            f"workers: {workers} workers exceed the {len(cpus)} CPU cores this process may use"
        )
    share = len(cpus) // workers
    return [
        Slot((), tuple(cpus[w * share : (w + 1) * share]), max(1, share // per_run))
        for w in range(workers)
    ]


def ignore_preemption_signals(cpus: tuple[int, ...] = ()) -> Callable[[], None]:
    """In the child before exec: pin it to `cpus`, and ignore USR1/USR2 so that torchrun, which
    has no handler for them, is not killed when a scheduler signals every process; the trainers
    install their own handlers."""
    return ignoring_signals((signal.SIGUSR1, signal.SIGUSR2), cpus)


#: this process's warm workers (kit.launch.warm), started by `warm`
WARM = WarmProcesses()


def warm(settings: LaunchSettings, device: str) -> None:
    """Start now the processes a local launch on CPU will run its commands in: they import torch
    while this process goes on (call it before importing torch). Nothing for other backends,
    for torchrun groups or on a GPU."""
    if settings.backend == "local" and single_process(settings) and device == "cpu":
        WARM.start(settings.workers)


def _start(command: Sequence[str], slot: Slot, log: Path) -> subprocess.Popen:
    """Start a launched command on a slot's devices, its output (and errors) into `log`: in a
    warm process when one is waiting (CPU slots only), else in a new one."""
    env = child_environment(command, slot.environment())
    if not slot.gpus and (process := WARM.run(command, env, slot.cpus, log)) is not None:
        return process
    with log.open("w") as output:
        return subprocess.Popen(
            command,
            env=env,
            cwd=REPO_ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=ignore_preemption_signals(slot.cpus),
        )


def _stop(processes: Sequence[subprocess.Popen]) -> None:
    """Interrupted: the commands still running get SIGUSR1 (trainers checkpoint, a step keeps
    what it finished) and are waited for."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        signal_tree(process, signal.SIGUSR1)
    for process in running:
        process.wait()


def run_command(name: str, module_args: Sequence[str], settings: LaunchSettings, log: Path) -> int:
    """Run `python -m <module_args>` as one process or one torchrun on one slot of this node's
    devices, its output into `log`; its exit status."""
    log.parent.mkdir(parents=True, exist_ok=True)
    (slot,) = slots(settings.model_copy(update={"workers": 1}))
    process = _start(module_command(module_args, settings, f"{settings.rdzv_id}-{name}"), slot, log)
    try:
        return process.wait()
    finally:
        _stop([process])


def run_cost(settings: TrainSettings) -> float:
    """A run's relative compute: images seen times the width's square (a convolution's cost)."""
    return settings.iterations * settings.batch_size * settings.width**2


def chains(runs: dict[str, TrainSettings], count: int) -> list[list[str]]:
    """The runs dealt into at most `count` lists of about equal cost (costliest first, each to
    the least loaded list), each list to be trained in turn by one process."""
    loads = [0.0] * count
    dealt: list[list[str]] = [[] for _ in range(count)]
    for name in sorted(runs, key=lambda name: -run_cost(runs[name])):
        least = loads.index(min(loads))
        dealt[least].append(name)
        loads[least] += run_cost(runs[name])
    return [chain for chain in dealt if chain]


@dataclass
class _Running:
    """A chain of runs trained in turn by one command on one slot."""

    process: subprocess.Popen
    slot: Slot
    log: Path
    chain: list[str]


def _start_chain(
    chain: list[str], slot: Slot, files: dict[str, Path], settings: LaunchSettings, log_dir: Path
) -> _Running:
    """One command training the chain's runs in turn (`--config` repeated), on the slot."""
    log = log_dir / f"{chain[0]}.log"
    command = module_command(
        train_args(files[chain[0]])
        + [arg for name in chain[1:] for arg in ("--config", str(files[name]))],
        settings,
        f"{settings.rdzv_id}-{chain[0]}",
    )
    return _Running(_start(command, slot, log), slot, log, chain)


def _ended(
    entry: _Running, runs: dict[str, TrainSettings], progress: Progress, launched: Launched
) -> None:
    """Close a finished command's bars and record each run of its chain as finished or failed;
    a worker killed by a signal is named, with the run and step it was at and the runs queued
    behind it, in the error and in the chain's log (which the killed worker could not write)."""
    for name in entry.chain:
        progress.finish(name, runs[name])
        if is_finished(runs[name]):
            launched.finished.append(name)
        else:
            launched.failed[name] = entry.log
    unfinished = [name for name in entry.chain if name in launched.failed]
    code = entry.process.returncode
    if unfinished and code is not None and code < 0:
        cause = killed_line(entry.process.pid, -code, unfinished, runs, entry.log)
        with contextlib.suppress(OSError), entry.log.open("a") as log:
            log.write(f"\n{cause}\n")
        launched.causes.update(dict.fromkeys(unfinished, cause))


def killed_line(
    pid: int, number: int, unfinished: list[str], runs: dict[str, TrainSettings], log: Path
) -> str:
    """What a worker killed by signal `number` while training the first of `unfinished` did
    not finish: that run at its last logged step, and the runs queued behind it."""
    record = last_record(RunFolder.of(runs[unfinished[0]]).metrics)
    step = f"step {record['step']}" if record else "its first logged step"
    try:
        name = f" ({signal.Signals(number).name})"
    except ValueError:
        name = ""
    queued = (
        f"; {counted(len(unfinished) - 1, 'run')} queued behind it in that worker did not start "
        f"({', '.join(unfinished[1:])})"
        if len(unfinished) > 1
        else ""
    )
    return (
        f"worker pid {pid} killed by signal {number}{name} at {step} of {unfinished[0]}"
        f"{queued} (log {log}); run it again to resume"
    )


def run_chains(
    runs: dict[str, TrainSettings], files: dict[str, Path], settings: LaunchSettings, log_dir: Path
) -> Launched:
    """Run `workers` commands at a time, each pinned to its slot, until all runs have ended. The
    runs are dealt into one chain per slot, trained in turn by one command (one process, or one
    torchrun whose ranks keep their group from run to run): starting Python and importing torch
    costs seconds a run, as much as a small CPU run trains."""
    log_dir.mkdir(parents=True, exist_ok=True)
    free = slots(settings)
    queue = chains(runs, len(free))
    running: list[_Running] = []
    launched, progress = Launched(), Progress(len(runs))
    try:
        while queue or running:
            while queue and free:
                running.append(_start_chain(queue.pop(0), free.pop(0), files, settings, log_dir))
                for name in running[-1].chain:
                    progress.start(name, runs[name])
            time.sleep(0.2)
            for entry in list(running):
                if entry.process.poll() is None:
                    for name in entry.chain:
                        progress.update(name, runs[name])
                    continue
                running.remove(entry)
                free.append(entry.slot)
                _ended(entry, runs, progress, launched)
    finally:
        _stop([entry.process for entry in running])
        progress.close()
    return launched
