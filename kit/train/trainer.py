"""Pretrain a ResNet with schedule-free AdamW: `python -m kit.train --config run.yaml [key=value]`.

The same module runs as one process or under `torchrun --nproc_per_node=N -m kit.train ...`
(NCCL on GPU, gloo on CPU); the global batch is split across ranks and only rank 0 logs and
saves. Each rank's model, optimizer and step are kit.train.step's Replica: steps run at y,
evaluation and saving at x, with BatchNorm statistics recomputed there.

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
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import yaml
from tqdm import tqdm

from kit.core import files, locks, machine, provenance
from kit.core.distributed import Process, barrier, ranks_on_node, start_process
from kit.core.params import ParameterError
from kit.core.paths import resolve
from kit.core.processes import (
    DONE,
    finished_through,
)
from kit.data import kinds
from kit.data import pipeline as kit_data
from kit.data.preflight import writable_problems
from kit.train.checkpoint import (
    CHECKPOINT,
    NonFiniteLossError,
    check_finite,
    check_same_run,
    kept_message,
    read_checkpoint,
    refuse_missing_snapshots,
    restore_rng_states,
    rng_states,
    write_checkpoint,
    write_snapshot,
)
from kit.train.metrics import (
    METRICS,
    append_record,
    keep_metrics_until,
    tensorboard_scalars,
)
from kit.train.settings import TrainSettings, replica_problem
from kit.train.step import Replica
from kit.train.stopping import (
    STOP_CHECK_EVERY,
    Preempted,
    StopFlag,
    loader_failures,
)
from kit.train.watchdog import Watchdog

#: no progress-bar monitor thread: a thread holding a lock while a process forks leaves that lock
#: held forever in the child (loader workers start from a fork server, kit.data.workers, but other
#: libraries may still fork)
tqdm.monitor_interval = 0

#: one provenance record per start of the run (kit.core.provenance)
PROVENANCE = "provenance.jsonl"


def placement(out: Path, process: Process) -> str:
    """Where this rank runs, for its log: a launcher's pinning can be checked there."""
    return (
        f"{out.name}: rank {process.rank}/{process.world_size} on {process.device}, "
        f"cpus {sorted(os.sched_getaffinity(0))}, {torch.get_num_threads()} threads, "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
    )


@contextlib.contextmanager
def holding_run_folder(out: Path, process: Process) -> Iterator[None]:
    """Rank 0 holds the run folder's lock; every rank learns whether it got it, so that a
    refused launch stops all ranks instead of leaving them waiting for rank 0."""
    with contextlib.ExitStack() as stack:
        refusal = ""
        if process.main:
            try:
                stack.enter_context(locks.hold(out, "training"))
            except locks.FolderLocked as error:
                refusal = str(error)
        if process.world_size > 1:
            shared = [refusal]
            dist.broadcast_object_list(shared, src=0)
            refusal = shared[0]
        if refusal:
            raise locks.FolderLocked(refusal)
        yield


def train(settings: TrainSettings) -> Path:
    """Train (or resume, or skip when finished) one run; returns its output folder."""
    return train_in_turn([settings])[0]


def train_in_turn(trainings: list[TrainSettings], watch: bool = False) -> list[Path]:
    """Train runs one after another in this process, each exactly as it would train alone (its
    own seeds, folder, lock and checkpoints); every configuration is validated before the first
    starts. Under torchrun or srun the ranks join one process group for all the runs: starting
    Python and importing torch costs seconds per launch, and a group started once never meets a
    previous group's rendezvous. With `watch` (the command line's trainers), a rank that makes no
    progress for stall_timeout_s ends its process (kit.train.watchdog). Returns the runs' output
    folders."""
    devices = {settings.device for settings in trainings}
    if len(devices) > 1:
        raise ParameterError(
            f"device: runs trained in turn share one process and its device, "
            f"but these ask for {', '.join(sorted(devices))}"
        )
    with StopFlag().installed() as stop:  # before the group starts: a stop then is kept too
        process = start_process(
            trainings[0].device, max(settings.group_timeout_s for settings in trainings)
        )
        try:
            watchdog = Watchdog(enabled=watch)
            return [
                _train_on(settings, process, stop, trainings[:index], watchdog)
                for index, settings in enumerate(trainings)
            ]
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


def _train_on(
    settings: TrainSettings,
    process: Process,
    stop: StopFlag,
    before: list[TrainSettings],
    watchdog: Watchdog,
) -> Path:
    """One run on this rank, after the machine checks that run's settings call for; none when
    a stop was asked for earlier in the chain (`before`: the runs trained before it)."""
    if stop.anywhere(process):
        after = f"after {resolve(before[-1].output_dir)} " if before else ""
        raise Preempted(
            f"stopped by a preemption signal {after}before "
            f"{resolve(settings.output_dir)} started; run it again to resume"
        )
    if settings.compile and (missing := machine.compiler_problems()):
        raise machine.MachineError("\n".join(missing))
    shared = machine.loader_shared_memory(
        ranks_on_node(dict(os.environ)),
        settings.num_workers,
        settings.micro_batch or settings.batch_size // process.world_size,
        settings.data.image_size,
        kinds.get(settings.data.kind).held_bytes(settings.data),
    )
    if settings.num_workers and (short := machine.shm_problems(shared)):
        raise machine.MachineError("\n".join(short))
    unwritable = writable_problems(resolve(settings.output_dir))
    if unwritable:  # before the lock file is made there
        raise ParameterError("; ".join(unwritable))
    with (
        holding_run_folder(resolve(settings.output_dir), process),
        contextlib.ExitStack() as closing,
    ):
        return _train(settings, process, stop, closing, watchdog)


# ---------------------------------------------------------------------------------------------
# The run on this rank
# ---------------------------------------------------------------------------------------------


@dataclass
class Position:
    """Where a run is: optimizer steps taken, its epoch, and batches taken of that epoch."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    #: steps since the last logging step, when a stop came between two
    window_steps: int = 0


@dataclass
class _Window:
    """The steps since the last logging step (`carried` of them taken before a resumption), and
    when this process's first of them began."""

    steps: int = 0
    carried: int = 0
    start: float = field(default_factory=time.perf_counter)


def _every(step: int, interval: int) -> bool:
    """Whether `step` is one of every `interval` steps (never for 0)."""
    return interval > 0 and step % interval == 0


@dataclass
class _Run:
    """One run being trained on this rank: its parts, its position and what it writes."""

    settings: TrainSettings
    process: Process
    out: Path
    trainer: Replica
    data: kit_data.RunData
    at: Position
    #: the step of the last checkpoint written (None before the first)
    last_saved: int | None
    progress: tqdm
    log_scalars: Callable[[dict[str, Any]], None]
    watchdog: Watchdog = field(default_factory=lambda: Watchdog(enabled=False))

    def train_steps(self, stop: StopFlag) -> None:
        """Step to the last iteration; every logging step, log the window's loss, evaluate and
        save where due, and stop (checkpointed) when a preemption signal asked."""
        batches = self.batches()
        window = _Window(self.at.window_steps, self.at.window_steps)
        while self.at.step < self.settings.iterations:
            self.watchdog.beat(
                f"at step {self.at.step + 1} (its batch, forward and backward)",
                arm=not self.settings.compile or window.steps > 0,
            )
            self.trainer.step(*next(batches))
            self.at.step, self.at.batch_in_epoch = self.at.step + 1, self.at.batch_in_epoch + 1
            window.steps += 1
            final = self.at.step == self.settings.iterations
            evaluate = final or _every(self.at.step, self.settings.eval_every)
            save = final or _every(self.at.step, self.settings.checkpoint_every)
            snapshot = self.at.step in self.settings.snapshot_steps
            if evaluate or save or snapshot or self.at.step % self.settings.log_every == 0:
                if self.logging_step(window, evaluate, save, final, stop.requested, snapshot):
                    stop.requested = True  # asked on another rank: this one's chain stops too
                window = _Window()
            elif self.at.step % STOP_CHECK_EVERY == 0:
                self.watchdog.beat(f"agreeing on a stop at step {self.at.step}")
                if self.trainer.stop_asked(stop.requested):
                    stop.requested = True
                    self.stop_between_logs(window)

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's batches on its device from the run's position on, epoch after epoch."""
        while True:
            self.data.order.set_position(self.at.epoch, self.at.batch_in_epoch)
            yield from self.trainer.on_device(self.data.train)
            self.at.epoch, self.at.batch_in_epoch = self.at.epoch + 1, 0

    def logging_step(
        self,
        window: _Window,
        evaluate: bool,
        save: bool,
        final: bool,
        stop_requested: bool,
        snapshot: bool = False,
    ) -> bool:
        """Log the window's mean loss (refusing a non-finite one), evaluate, snapshot and save at
        x where due; a preemption signal on any rank saves here and stops the run (at the last
        step, the run finishes and the chain stops after it). Whether any rank was asked to
        stop."""
        self.watchdog.beat(f"exchanging the loss at step {self.at.step}")
        loss, bad_step, preempted = self.trainer.take_window(window.steps, stop_requested)
        kept = kept_message(self.out / CHECKPOINT, self.last_saved)
        # an uninterrupted run passes through x only where it evaluates or saves periodically:
        # where else it goes there (a snapshot, the end, a stop), y and the generators are kept
        at_y = (
            self.trainer.at_y()
            if (preempted or final or snapshot)
            and not _every(self.at.step, self.settings.eval_every)
            and not _every(self.at.step, self.settings.checkpoint_every)
            else {}
        )
        save = save or preempted
        if bad_step is not None:
            raise NonFiniteLossError(
                f"{self.out}: the training loss became non-finite at step "
                f"{bad_step}; training stopped and {kept}"
            )
        record = self.record(loss, window)
        # the metrics row goes first: a run killed before its checkpoint replaces it drops the
        # row on resumption and logs it again
        recalibration = self.watchdog.beating(
            self.data.recalibration, f"recalibrating BatchNorm at step {self.at.step}"
        )
        with (
            self.trainer.evaluation_point(recalibration)
            if evaluate or save or snapshot
            else contextlib.nullcontext()
        ):
            if evaluate:
                record["eval_accuracy"], record["eval_loss"] = self.trainer.evaluate(
                    self.watchdog.beating(self.data.eval, f"evaluating at step {self.at.step}")
                )
            if self.process.main:
                self.log(record)
            if snapshot:  # before the checkpoint: a kill between them trains this step again
                self.watchdog.beat(f"saving the snapshot of step {self.at.step}")
                write_snapshot(
                    self.trainer.module,
                    self.settings,
                    self.at.step,
                    self.out,
                    kept,
                    self.process.main,
                )
            if save:
                self.watchdog.beat(f"saving the checkpoint of step {self.at.step}")
                self.save(at_y, kept)
        if at_y and not (final or preempted):  # a snapshot alone: back to y exactly
            self.trainer.back_to(at_y)
        self.last_saved = self.at.step if save else self.last_saved
        if preempted and not final:
            self.preempted()
        return preempted

    def stop_between_logs(self, window: _Window) -> None:
        """A stop agreed between logging steps: the checkpoint of this step at x, holding y and
        every rank's unlogged window, then Preempted."""
        extra = {
            "parameters_at_y": self.trainer.parameters_at_y(),
            "window": self.trainer.window_state(window.steps),
        }
        recalibration = self.watchdog.beating(
            self.data.recalibration, f"recalibrating BatchNorm at step {self.at.step}"
        )
        with self.trainer.evaluation_point(recalibration):
            self.watchdog.beat(f"saving the checkpoint of step {self.at.step}")
            self.save(extra, kept_message(self.out / CHECKPOINT, self.last_saved))
        self.last_saved = self.at.step
        self.preempted()

    def preempted(self) -> NoReturn:
        """After a stop's checkpoint: every rank waits for rank 0's write, then leaves."""
        self.progress.close()
        self.watchdog.beat(f"waiting for rank 0's checkpoint of step {self.at.step}")
        barrier()  # no rank exits (and srun kills no rank) before rank 0 has saved
        raise Preempted(
            f"{self.out}: stopped by a preemption signal at step {self.at.step} "
            f"after writing {self.out / CHECKPOINT}; run it again to resume"
        )

    def record(self, loss: float, window: _Window) -> dict[str, Any]:
        """The metrics row of this logging step, before evaluation."""
        return {
            "step": self.at.step,
            "epoch": self.at.epoch,
            "loss": loss,
            "lr": self.trainer.optimizer.param_groups[0]["scheduled_lr"],
            "images_per_s": (window.steps - window.carried)
            * self.settings.batch_size
            / (time.perf_counter() - window.start),
            "eval_accuracy": None,
            "eval_loss": None,
        }

    def log(self, record: dict[str, Any]) -> None:
        """Rank 0: the row into metrics.jsonl and TensorBoard, and the progress bar on."""
        append_record(self.out / METRICS, record)
        self.log_scalars(record)
        self.progress.set_postfix(
            loss=f"{record['loss']:.3f}", img_s=f"{record['images_per_s']:.0f}", refresh=False
        )  # update() redraws, at most every mininterval
        self.progress.update(self.at.step - self.progress.n)

    def save(self, at_y: dict[str, Any], kept: str) -> None:
        """The checkpoint at this step (rank 0 writes it), refused when not finite."""
        state = {
            **self.trainer.state(),
            "rng": rng_states(),
            "step": self.at.step,
            "epoch": self.at.epoch,
            "batch_in_epoch": self.at.batch_in_epoch,
            "config": self.settings.model_dump(),
            **at_y,
        }
        check_finite(state, self.out, kept)  # replicas are identical: every rank stops
        if self.process.main:
            write_checkpoint(self.out / CHECKPOINT, state)

    def finish(self) -> None:
        """After the last step: replicas checked identical, the DONE marker written."""
        self.progress.close()
        if self.process.world_size > 1:
            self.watchdog.beat("comparing the replicas after the last step")
            self.trainer.check_replicas_identical()
        if self.process.main:
            done = {"step": self.at.step, "ranks": self.process.world_size}
            files.write_text(self.out / DONE, json.dumps(done) + "\n")


def _train(
    settings: TrainSettings,
    process: Process,
    stop: StopFlag,
    closing: contextlib.ExitStack,
    watchdog: Watchdog | None = None,
) -> Path:
    """Train one run on this rank, from its checkpoint when it has one."""
    out = resolve(settings.output_dir)
    if _finished(settings, out, process):
        return out
    _check_batch_split(settings, process)
    if problem := replica_problem(settings.bn_recalibration_batches, process.world_size):
        raise ParameterError(problem)
    print(placement(out, process), flush=True)
    run = _start_run(settings, process, out, closing)
    run.watchdog = watchdog or run.watchdog
    # a first step that compiles takes minutes: watched from the beat after it
    with (
        run.watchdog.watching(
            out, process.rank, settings.stall_timeout_s, armed=not settings.compile
        ),
        loader_failures(out, lambda: run.at.step, settings.loader_timeout_s),
    ):
        run.train_steps(stop)
        run.finish()
    return out


def _finished(settings: TrainSettings, out: Path, process: Process) -> bool:
    """Whether the run has finished (said by rank 0); a folder holding another run's settings
    is refused."""
    if (out / "config.yaml").exists():
        check_same_run(yaml.safe_load((out / "config.yaml").read_text()), settings, out)
    if not finished_through(out, settings.iterations):
        return False
    refuse_missing_snapshots(settings, settings.iterations, out)
    if process.main:
        print(f"{out}: finished ({DONE} present), not training again")
    return True


def _check_batch_split(settings: TrainSettings, process: Process) -> None:
    """Refuse a batch (or micro-batch) that does not split evenly across the ranks."""
    if settings.batch_size % process.world_size:
        raise ParameterError(
            f"batch_size: {settings.batch_size} is not divisible by the {process.world_size} ranks"
        )
    if settings.micro_batch and settings.batch_size % (process.world_size * settings.micro_batch):
        raise ParameterError(
            f"micro_batch: batch_size {settings.batch_size} is not divisible by "
            f"{process.world_size} ranks x micro_batch {settings.micro_batch}"
        )


def _start_run(
    settings: TrainSettings, process: Process, out: Path, closing: contextlib.ExitStack
) -> _Run:
    """This rank's data, trainer and position (from the checkpoint, if any); rank 0 readies
    the run folder."""
    run_data = kit_data.build(
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
    trainer = Replica(settings=settings, process=process)
    at = _resume(trainer, out / CHECKPOINT)
    refuse_missing_snapshots(settings, at.step, out)
    if process.main:
        _ready_folder(settings, out, at.step)
    progress = tqdm(
        total=settings.iterations,
        initial=at.step,
        desc=out.name,
        unit="step",
        disable=None if process.main else True,
    )  # None: only on a terminal
    return _Run(
        settings,
        process,
        out,
        trainer,
        run_data,
        at,
        last_saved=at.step if (out / CHECKPOINT).exists() else None,
        progress=progress,
        log_scalars=closing.enter_context(tensorboard_scalars(settings, out, at.step, process)),
    )


def _resume(trainer: Replica, checkpoint: Path) -> Position:
    """Restore the trainer and the generators from the checkpoint; where the run is."""
    if not checkpoint.exists():
        return Position()
    state = read_checkpoint(checkpoint)
    trainer.load(state)
    restore_rng_states(state["rng"])
    window = state.get("window", {}).get("steps", 0)
    return Position(state["step"], state["epoch"], state["batch_in_epoch"], window)


def _ready_folder(settings: TrainSettings, out: Path, step: int) -> None:
    """Rank 0: the run folder made, dead writers' temporaries removed, the DONE marker of a run
    now extended removed, config.yaml written, this start's provenance appended, metrics after
    the resumed step dropped."""
    out.mkdir(parents=True, exist_ok=True)
    files.remove_stale_temporaries(out)
    (out / DONE).unlink(missing_ok=True)  # a run finished at fewer steps, now extended
    with files.atomic_write(out / "config.yaml") as handle:  # other ranks may be reading it
        handle.write(yaml.safe_dump(settings.model_dump(), sort_keys=False).encode())
    provenance.append(out / PROVENANCE)
    keep_metrics_until(out / METRICS, step)
