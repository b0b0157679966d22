"""Pretrain a ResNet with schedule-free AdamW: `python -m kit.train --config run.yaml [key=value]`.

The same module runs as one process or under `torchrun --nproc_per_node=N -m kit.train ...`
(NCCL on GPU, gloo on CPU); the global batch is split across ranks and only rank 0 logs and
saves. Each rank's model, optimizer and step are kit.train.step's Replica: steps run at y,
evaluation and saving at x, with BatchNorm statistics recomputed there.

Read `train_run` first: it is one run on one rank, top to bottom. Around it, as context managers,
are the run folder's lock (kit.train.run_folder), the watchdog and the loader-failure handling;
around the chain of runs, the stop signals' handlers (kit.train.stopping) and the process group
(`train_in_turn`). Inside it come the checks (kit.train.checks), resuming or starting, the step
loop with its logging, evaluation, snapshots, checkpoints and stops where due, and the finish;
the helpers it calls follow it in the loop's order.

Preemption: a checkpoint (model at x, optimizer, RNG states, data position, step) is replaced
atomically every `checkpoint_every` steps and at the end; restarting the same command resumes
exactly where it stopped, and a finished run (its DONE marker) is never trained again. Checkpoints
are hashed and never hold NaN or infinity (kit.train.checkpoint). Resuming drops a metrics line
torn by a kill and the temporary files of writers that died.

SIGTERM, SIGHUP, SIGUSR1 or SIGUSR2 (a scheduler's notice before preemption or the time limit,
a kill, a closed terminal) makes every rank stop within STOP_CHECK_EVERY steps
(kit.train.stopping): the ranks agree on the flag at every logging step (in the exchange of the
window's loss) and every STOP_CHECK_EVERY steps between them (one small all-reduce; torchrun and
Slurm kill about 30 s after their notice, less than a `log_every` of 500 ImageNet steps takes).
The checkpoint is written there (with the unlogged part of the window, so that the resumed run
logs what an uninterrupted one would), every rank waits until rank 0 has saved it, and the
process leaves the launcher's preemption marker (kit.core.processes.PREEMPTED_MARKER) and exits
with PREEMPTED_EXIT ("resume me"). The request holds for the whole chain of runs the process trains
in turn: one that came at a run's last logging step, or between two runs, lets that run finish
and starts no other (kit.train.stopping). Rank 0 holds the run folder's lock (kit.core.locks)
while it trains, so a second launch into the same folder is refused naming the holder.

Distributed runs start under torchrun, or under plain `srun` (Slurm's variables are read when
torchrun's are absent), so `srun --ntasks=N python -m kit.train ...` is one job of N ranks.

The step loop never waits for the device except every `log_every` steps, where the loss
accumulated on the device is read, checked for NaN/inf and logged to `metrics.jsonl`.

Nothing hangs in silence: loader workers start from a fork server (kit.data.workers), a loader
that gives no batch for `loader_timeout_s` stops the run naming it (LoaderError), and under the
command line a rank that makes no progress for `stall_timeout_s` ends its process long before
the group timeout (kit.train.watchdog).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from tqdm import tqdm

from kit.core.distributed import Process, barrier, start_process
from kit.core.params import ParameterError
from kit.core.paths import resolve
from kit.core.threads import numerics_threads
from kit.data import hardware
from kit.data import pipeline as kit_data
from kit.train import checks, run_folder
from kit.train.checkpoint import (
    NonFiniteLossError,
    check_finite,
    kept_message,
    refuse_missing_snapshots,
    rng_states,
    write_checkpoint,
    write_snapshot,
)
from kit.train.metrics import append_record, tracking
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings
from kit.train.step import Replica
from kit.train.stopping import STOP_CHECK_EVERY, Preempted, StopFlag, loader_failures
from kit.train.watchdog import Watchdog

#: no progress-bar monitor thread: a thread holding a lock while a process forks leaves that lock
#: held forever in the child (loader workers start from a fork server, kit.data.workers, but other
#: libraries may still fork)
tqdm.monitor_interval = 0


def train(settings: TrainSettings) -> Path:
    """Train (or resume, or skip when finished) one run; returns its output folder."""
    return train_in_turn([settings])[0]


def train_in_turn(trainings: list[TrainSettings], *, watch: bool = False) -> list[Path]:
    """Train runs one after another in this process, each exactly as it would train alone (its
    own seeds, folder, lock and checkpoints); every configuration is validated before the first
    starts. Under torchrun or srun the ranks join one process group for all the runs: starting
    Python and importing torch costs seconds per launch, and a group started once never meets a
    previous group's rendezvous. A stop requested anywhere in the chain starts no further run.
    With `watch` (the command line's trainers), a rank that makes no progress for
    stall_timeout_s ends its process (kit.train.watchdog). Returns the runs' output folders."""
    devices = {settings.device for settings in trainings}
    if len(devices) > 1:
        raise ParameterError(
            f"device: runs trained in turn share one process and its device, "
            f"but these ask for {', '.join(sorted(devices))}"
        )
    with (
        StopFlag().installed() as stop,  # before the group starts: a stop then is kept too
        _process_group(trainings) as process,
    ):
        watchdog = Watchdog(enabled=watch)
        outs: list[Path] = []
        for settings in trainings:
            out = resolve(settings.output_dir)
            stop.refuse_start(process, out, after=outs[-1] if outs else None)
            outs.append(train_run(settings=settings, process=process, stop=stop, watchdog=watchdog))
        return outs


def train_run(
    *, settings: TrainSettings, process: Process, stop: StopFlag, watchdog: Watchdog
) -> Path:
    """Train one run on this rank, top to bottom: the checks its settings call for, the run
    folder's lock, resuming from the checkpoint (or starting), the steps with their logging,
    evaluation, snapshots and checkpoints where due, a stop agreed by every rank when a
    preemption signal came, and the finish (replicas compared, DONE). A finished run is not
    trained again. Returns the run's output folder."""
    out = resolve(settings.output_dir)
    checks.check_machine(settings, process, out)
    with (
        run_folder.holding_run_folder(out, process),
        numerics_threads(process.device.type == "cpu"),
    ):
        if run_folder.finished(settings, out, process):
            return out
        checks.check_ranks(settings, process)
        print(run_folder.placement(out, process), flush=True)

        # Start, or resume where the checkpoint left the model, the generators and the data.
        data = _data(settings, process)
        replica = Replica(settings=settings, process=process)
        at = run_folder.resume(replica, out)
        refuse_missing_snapshots(settings, at.step, out)
        if process.main:
            run_folder.ready_folder(settings, out, at.step)

        # The steps, logged to the trackers too where asked, watched (a first step that compiles
        # takes minutes: from the beat after it), a stuck loader named.
        with (
            tracking(settings, out, at.step, process) as log_scalars,
            watchdog.watching(
                out, process.rank, settings.stall_timeout_s, armed=not settings.compile
            ),
            loader_failures(out, lambda: at.step, settings.loader_timeout_s),
        ):
            run = _Run(
                settings=settings,
                process=process,
                out=out,
                replica=replica,
                data=data,
                at=at,
                last_saved=at.step if RunFolder(out).checkpoint.exists() else None,
                progress=_progress_bar(settings, out, at.step, process),
                log_scalars=log_scalars,
                watchdog=watchdog,
            )
            batches = _batches(run)
            window = _Window(steps=at.window_steps, carried=at.window_steps)
            while at.step < settings.iterations:
                watchdog.beat(
                    f"at step {at.step + 1} (its batch, forward and backward)",
                    arm=not settings.compile or window.steps > 0,
                )
                waiting = time.perf_counter()
                images, labels = next(batches)
                window.data_wait += time.perf_counter() - waiting
                replica.step(images, labels)
                at.step, at.batch_in_epoch = at.step + 1, at.batch_in_epoch + 1
                window.steps += 1
                final = at.step == settings.iterations
                snapshot = at.step in settings.snapshot_steps
                # a snapshot is a finished model: its own accuracy is logged as a last step's is
                evaluate = final or snapshot or _every(at.step, settings.eval_every)
                save = final or _every(at.step, settings.checkpoint_every)
                if evaluate or save or snapshot or at.step % settings.log_every == 0:
                    # every rank's loss and stop request, exchanged once; a stop on any rank
                    # saves here, and at the last step lets the run finish but the chain stop
                    loss, stopping = _exchange_window(run, window, stop.requested)
                    stop.requested = stop.requested or stopping
                    _log_evaluate_save(
                        run,
                        window,
                        loss,
                        evaluate=evaluate,
                        save=save or stopping,
                        snapshot=snapshot,
                        leaving=final or stopping,
                    )
                    if stopping and not final:
                        _stop(run)
                    window = _Window()
                elif at.step % STOP_CHECK_EVERY == 0:
                    watchdog.beat(f"agreeing on a stop at step {at.step}")
                    if stop.anywhere(process):
                        _save_unlogged_window(run, window)
                        _stop(run)
            _finish(run)
    return out


# ---------------------------------------------------------------------------------------------
# Around the run: the process group; at its start, what the loop's helpers share
# (the run folder's lock, a finished run and resuming are kit.train.run_folder's)
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _process_group(trainings: list[TrainSettings]) -> Iterator[Process]:
    """This rank, in one process group for all the runs (when there are several ranks), the
    group destroyed after them."""
    process = start_process(
        trainings[0].device, max(settings.group_timeout_s for settings in trainings)
    )
    try:
        yield process
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@dataclass(kw_only=True)
class _Run:
    """One run being trained on this rank: what the loop's helpers share."""

    settings: TrainSettings
    process: Process
    out: Path
    replica: Replica
    data: kit_data.RunData
    at: run_folder.Position
    #: the step of the last checkpoint written (None before the first)
    last_saved: int | None
    progress: tqdm
    log_scalars: Callable[[dict[str, Any]], None]
    watchdog: Watchdog

    @property
    def folder(self) -> RunFolder:
        return RunFolder(self.out)

    def kept(self) -> str:
        """What the run keeps when it stops on a non-finite value, for the message."""
        return kept_message(self.folder.checkpoint, self.last_saved)


def _data(settings: TrainSettings, process: Process) -> kit_data.RunData:
    """This rank's loaders: its share of the training batches, evaluation, recalibration."""
    return kit_data.build(
        settings.data,
        settings.num_classes,
        settings.seed,
        settings.batch_size,
        process.rank,
        process.world_size,
        settings.num_workers,
        settings.bn_recalibration_batches,
        pin_memory=process.device.type == "cuda",
        micro_batch=settings.micro_batch,
        timeout_s=settings.loader_timeout_s,
    )


def _progress_bar(settings: TrainSettings, out: Path, step: int, process: Process) -> tqdm:
    """Rank 0's progress bar, from the resumed step; shown only on a terminal."""
    return tqdm(
        total=settings.iterations,
        initial=step,
        desc=out.name,
        unit="step",
        disable=None if process.main else True,
    )


# ---------------------------------------------------------------------------------------------
# The steps: batches, logging, evaluation, checkpoints, stops
# ---------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Window:
    """The steps since the last logging step (`carried` of them taken before a resumption), when
    this process's first of them began, and the seconds its steps waited for their batches."""

    steps: int = 0
    carried: int = 0
    start: float = field(default_factory=time.perf_counter)
    data_wait: float = 0.0


def _every(step: int, interval: int) -> bool:
    """Whether `step` is one of every `interval` steps (never for 0)."""
    return interval > 0 and step % interval == 0


def _batches(run: _Run) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's batches on its device from the run's position on, epoch after epoch."""
    while True:
        run.data.order.set_position(run.at.epoch, run.at.batch_in_epoch)
        yield from run.replica.on_device(run.data.train)
        run.at.epoch, run.at.batch_in_epoch = run.at.epoch + 1, 0


def _exchange_window(run: _Run, window: _Window, stop_requested: bool) -> tuple[float, bool]:
    """The window's mean loss over every rank, refused when a step of it was not finite, and
    whether any rank was asked to stop (one exchange for both)."""
    run.watchdog.beat(f"exchanging the loss at step {run.at.step}")
    loss, bad_step, stopping = run.replica.take_window(window.steps, stop_requested)
    if bad_step is not None:
        raise NonFiniteLossError(
            f"{run.out}: the training loss became non-finite at step "
            f"{bad_step}; training stopped and {run.kept()}"
        )
    return loss, stopping


def _log_evaluate_save(
    run: _Run,
    window: _Window,
    loss: float,
    *,
    evaluate: bool,
    save: bool,
    snapshot: bool,
    leaving: bool,
) -> None:
    """A logging step: the window's metrics row, and at x where due the evaluation (into the
    row), the snapshot and the checkpoint; then back to y, exactly, unless the run is `leaving`
    (it ends or stops here)."""
    step, settings = run.at.step, run.settings
    # an uninterrupted run passes through x only where it evaluates or saves periodically:
    # where else it goes there (a snapshot, the end, a stop), y and the generators are kept
    periodic = _every(step, settings.eval_every) or _every(step, settings.checkpoint_every)
    at_y = run.replica.at_y() if (leaving or snapshot) and not periodic else {}
    record = _record(run, loss, window)
    # the metrics row goes first: a run killed before its checkpoint replaces it drops the
    # row on resumption and logs it again
    recalibration = run.watchdog.beating(
        run.data.recalibration, f"recalibrating BatchNorm at step {step}"
    )
    with (
        run.replica.evaluation_point(recalibration)
        if evaluate or save or snapshot
        else contextlib.nullcontext()
    ):
        if evaluate:
            record["eval_accuracy"], record["eval_loss"] = run.replica.evaluate(
                run.watchdog.beating(run.data.eval, f"evaluating at step {step}")
            )
        if run.process.main:
            _log(run, record)
        if snapshot:  # before the checkpoint: a kill between them trains this step again
            run.watchdog.beat(f"saving the snapshot of step {step}")
            write_snapshot(
                run.replica.module, settings, step, run.out, run.kept(), run.process.main
            )
        if save:
            _save(run, at_y)
    if at_y and not leaving:  # a snapshot alone: back to y exactly
        run.replica.back_to(at_y)


def _record(run: _Run, loss: float, window: _Window) -> dict[str, Any]:
    """The metrics row of this logging step, before evaluation (kit.train.metrics says what
    each number is)."""
    steps = window.steps - window.carried  # taken by this process
    return {
        "step": run.at.step,
        "epoch": run.at.epoch,
        "loss": loss,
        "lr": run.replica.optimizer.param_groups[0]["scheduled_lr"],
        "images_per_s": steps * run.settings.batch_size / (time.perf_counter() - window.start),
        "data_wait_s": window.data_wait / steps,
        "gpu_memory_gib": run.replica.peak_memory_gib(),
        "decode_fallbacks": hardware.FALLBACKS.take(),
        "eval_accuracy": None,
        "eval_loss": None,
    }


def _log(run: _Run, record: dict[str, Any]) -> None:
    """Rank 0: the row into metrics.jsonl and the trackers, and the progress bar on."""
    append_record(run.folder.metrics, record)
    run.log_scalars(record)
    run.progress.set_postfix_str(
        f"loss {record['loss']:.3f}, {record['images_per_s']:.0f} img/s", refresh=False
    )  # update() redraws, at most every mininterval
    run.progress.update(run.at.step - run.progress.n)


def _save(run: _Run, extra: dict[str, Any]) -> None:
    """The checkpoint at this step, at x (rank 0 writes it), with `extra` (y, the generators,
    an unlogged window); refused when not finite."""
    run.watchdog.beat(f"saving the checkpoint of step {run.at.step}")
    state = {
        **run.replica.state(),
        "rng": rng_states(),
        "step": run.at.step,
        "epoch": run.at.epoch,
        "batch_in_epoch": run.at.batch_in_epoch,
        "config": run.settings.model_dump(),
        **extra,
    }
    check_finite(state, run.out, run.kept())  # replicas are identical: every rank stops
    if run.process.main:
        write_checkpoint(run.folder.checkpoint, state)
    run.last_saved = run.at.step


def _save_unlogged_window(run: _Run, window: _Window) -> None:
    """A stop agreed between logging steps: the checkpoint of this step at x, holding y and
    every rank's unlogged window (the resumed run logs what an uninterrupted one would)."""
    extra = {
        "parameters_at_y": run.replica.parameters_at_y(),
        "window": run.replica.window_state(window.steps),
    }
    recalibration = run.watchdog.beating(
        run.data.recalibration, f"recalibrating BatchNorm at step {run.at.step}"
    )
    with run.replica.evaluation_point(recalibration):
        _save(run, extra)


def _stop(run: _Run) -> NoReturn:
    """After a stop's checkpoint: every rank waits for rank 0's write, then leaves."""
    run.progress.close()
    run.watchdog.beat(f"waiting for rank 0's checkpoint of step {run.at.step}")
    barrier()  # no rank exits (and srun kills no rank) before rank 0 has saved
    raise Preempted(
        f"{run.out}: stopped by a preemption signal at step {run.at.step} "
        f"after writing {run.folder.checkpoint}; run it again to resume"
    )


def _finish(run: _Run) -> None:
    """After the last step: replicas checked identical, the DONE marker written."""
    run.progress.close()
    if run.process.world_size > 1:
        run.watchdog.beat("comparing the replicas after the last step")
        run.replica.check_replicas_identical()
    if run.process.main:
        run.folder.mark_done(run.at.step, run.process.world_size)
