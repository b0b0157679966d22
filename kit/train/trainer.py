"""Pretrain a ResNet with schedule-free AdamW: `python -m kit.train --config run.yaml [key=value]`.

The same module runs as one process or under `torchrun --nproc_per_node=N -m kit.train ...`
(NCCL on GPU, gloo on CPU); the global batch is split across ranks and only rank 0 logs and
saves. Each rank's model, optimizer and step are kit.train.step's Replica: steps run at y,
evaluation and saving at x, with BatchNorm statistics recomputed there.

Read `train_run` first: it is one run on one rank, top to bottom. Around it, as context managers,
are the run folder's lock (kit.train.run_folder), the watchdog and the loader-failure handling;
around the chain of runs, the stop signals' handlers (kit.train.stopping) and the process group
(`train_in_turn`). Inside it come the checks (kit.train.checks), resuming or starting, the step
loop with its logging, evaluation, snapshots, checkpoints and stops where due, and the finish:
what it does at a logging step, at a stop's checkpoint and at the finish is kit.train.loop_steps',
in the loop's order; the helpers that stay here follow it.

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
process leaves the launcher's preemption marker (kit.runtime.processes.PREEMPTED_MARKER) and exits
with PREEMPTED_EXIT ("resume me"). The request holds for the whole chain of runs the process trains
in turn: one that came at a run's last logging step, or between two runs, lets that run finish
and starts no other (kit.train.stopping). Rank 0 holds the run folder's lock (kit.files.locks)
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
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist
from tqdm import tqdm

from kit.data import hardware
from kit.data import pipeline as kit_data
from kit.files.paths import resolve
from kit.numerics.threads import numerics_threads
from kit.params.params import ParameterError
from kit.runtime.distributed import Process, barrier, start_process
from kit.train import checks, loop_steps, run_folder
from kit.train.checkpoint import refuse_missing_snapshots
from kit.train.metrics import tracking
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
            run = loop_steps.Run(
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
            window = loop_steps.Window(steps=at.window_steps, carried=at.window_steps)
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
                evaluate = final or snapshot or loop_steps.every(at.step, settings.eval_every)
                save = final or loop_steps.every(at.step, settings.checkpoint_every)
                if evaluate or save or snapshot or at.step % settings.log_every == 0:
                    # every rank's loss and stop request, exchanged once; a stop on any rank
                    # saves here, and at the last step lets the run finish but the chain stop
                    loss, stopping = loop_steps.exchange_window(run, window, stop.requested)
                    stop.requested = stop.requested or stopping
                    loop_steps.log_evaluate_save(
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
                    window = loop_steps.Window()
                elif at.step % STOP_CHECK_EVERY == 0:
                    watchdog.beat(f"agreeing on a stop at step {at.step}")
                    if stop.anywhere(process):
                        loop_steps.save_unlogged_window(run, window)
                        _stop(run)
            loop_steps.finish(run)
    return out


# ---------------------------------------------------------------------------------------------
# Around the run: the process group; at its start, this rank's loaders and progress bar; its
# batches, and leaving after a stop's checkpoint (the run folder's lock, a finished run and
# resuming are kit.train.run_folder's; what the loop does at a logging step, at a stop's
# checkpoint and at the end is kit.train.loop_steps')
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


def _batches(run: loop_steps.Run) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's batches on its device from the run's position on, epoch after epoch. A
    decode-fallback count left in the process by earlier work is dropped first: it is not this
    run's."""
    hardware.FALLBACKS.take()
    while True:
        run.data.order.set_position(run.at.epoch, run.at.batch_in_epoch)
        yield from run.replica.on_device(run.data.train)
        run.at.epoch, run.at.batch_in_epoch = run.at.epoch + 1, 0


def _stop(run: loop_steps.Run) -> NoReturn:
    """After a stop's checkpoint: every rank waits for rank 0's write, then leaves."""
    run.progress.close()
    run.watchdog.beat(f"waiting for rank 0's checkpoint of step {run.at.step}")
    barrier()  # no rank exits (and srun kills no rank) before rank 0 has saved
    raise Preempted(
        f"{run.out}: stopped by a preemption signal at step {run.at.step} "
        f"after writing {run.folder.checkpoint}; run it again to resume"
    )
