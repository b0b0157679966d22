"""What the step loop of kit.train.trainer.train_run does besides stepping, in the loop's order:
at a logging step, the window's loss exchanged between the ranks, its metrics row and, at x where
due, the evaluation, the snapshot and the checkpoint; at a stop agreed between logging steps, the
checkpoint with the unlogged window; after the last step, the replicas compared and the DONE
marker. `Run` is what these share with the loop (the run being trained on this rank), `Window`
the steps since the last logging step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from kit.data import hardware
from kit.data import pipeline as kit_data
from kit.runtime.distributed import Process
from kit.train import run_folder
from kit.train.checkpoint import (
    NonFiniteLossError,
    check_finite,
    kept_message,
    rng_states,
    write_checkpoint,
    write_snapshot,
)
from kit.train.metrics import append_record
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings
from kit.train.step import Replica
from kit.train.watchdog import Watchdog


@dataclass(kw_only=True)
class Run:
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


@dataclass(kw_only=True)
class Window:
    """The steps since the last logging step (`carried` of them taken before a resumption), when
    this process's first of them began, and the seconds its steps waited for their batches."""

    steps: int = 0
    carried: int = 0
    start: float = field(default_factory=time.perf_counter)
    data_wait: float = 0.0


def every(step: int, interval: int) -> bool:
    """Whether `step` is one of every `interval` steps (never for 0)."""
    return interval > 0 and step % interval == 0


def exchange_window(run: Run, window: Window, stop_requested: bool) -> tuple[float, bool]:
    """The window's mean loss over every rank, refused when a step of it was not finite, and
    whether any rank was asked to stop (one exchange for both)."""
    run.watchdog.beat(f"exchanging the loss at step {run.at.step}")
    loss, bad_step, stopping = run.replica.take_window(window.steps, stop_requested)
    if bad_step is not None:
        raise NonFiniteLossError(
            f"{run.out}: the training loss (or the optimizer's update) became non-finite at "
            f"step {bad_step}; training stopped and {run.kept()}"
        )
    return loss, stopping


def log_evaluate_save(
    run: Run,
    window: Window,
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
    periodic = every(step, settings.eval_every) or every(step, settings.checkpoint_every)
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


def _record(run: Run, loss: float, window: Window) -> dict[str, Any]:
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


def _log(run: Run, record: dict[str, Any]) -> None:
    """Rank 0: the row into metrics.jsonl and the trackers, and the progress bar on."""
    append_record(run.folder.metrics, record)
    run.log_scalars(record)
    run.progress.set_postfix_str(
        f"loss {record['loss']:.3f}, {record['images_per_s']:.0f} img/s", refresh=False
    )  # update() redraws, at most every mininterval
    run.progress.update(run.at.step - run.progress.n)


def _save(run: Run, extra: dict[str, Any]) -> None:
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


def save_unlogged_window(run: Run, window: Window) -> None:
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


def finish(run: Run) -> None:
    """After the last step: replicas checked identical, the DONE marker written."""
    run.progress.close()
    if run.process.world_size > 1:
        run.watchdog.beat("comparing the replicas after the last step")
        run.replica.check_replicas_identical()
    if run.process.main:
        run.folder.mark_done(run.at.step, run.process.world_size)
