"""Pretrain a ResNet with schedule-free AdamW: `python -m kit.train --config run.yaml [key=value]`.

The same module runs as one process or under `torchrun --nproc_per_node=N -m kit.train ...`
(NCCL on GPU, gloo on CPU); the global batch is split across ranks and only rank 0 logs and
saves. Schedule-free AdamW keeps two points: training steps run at y, evaluation and saving at
x (`optimizer.eval()`), and BatchNorm statistics gathered at y do not fit x, so they are
recomputed at x before every evaluation and every save.

Preemption: a checkpoint (model at x, optimizer, RNG states, data position, step) is replaced
atomically every `checkpoint_every` steps and at the end; restarting the same command resumes
exactly where it stopped, and a finished run (its DONE marker) is never trained again.

Integrity: each checkpoint has its size and SHA-256 beside it (`checkpoint.pt.sha256`), checked
when a run resumes (about 1.5 s per GB, see kit.files); weights or BN statistics holding NaN or
infinity are never saved, so a diverging run keeps its last finite checkpoint. Resuming drops a
metrics line torn by a kill and the temporary files of writers that died.

SIGTERM, SIGUSR1 or SIGUSR2 (a scheduler's notice before preemption or the time limit) makes
every rank stop at the next logging step, where the ranks already exchange the window's loss,
so the flag costs no extra synchronisation: the checkpoint is written there and the process
exits with PREEMPTED_EXIT ("resume me"). Rank 0 holds the run folder's lock (kit.locks) while
it trains, so a second launch into the same folder is refused naming the holder.

Distributed runs start under torchrun, or under plain `srun` (Slurm's variables are read when
torchrun's are absent), so `srun --ntasks=N python -m kit.train ...` is one job of N ranks.

The step loop never waits for the device except every `log_every` steps, where the loss
accumulated on the device is read, checked for NaN/inf and logged to `metrics.jsonl`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import schedulefree
import torch
import torch.distributed as dist
import yaml
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from kit import models
from kit.core import files, locks
from kit.core.distributed import Process, start_process
from kit.core.params import ParameterError
from kit.core.paths import resolve
from kit.core.processes import DONE, PREEMPTED_EXIT, PREEMPTION_SIGNALS, signal_handlers
from kit.data import pipeline as kit_data
from kit.data.kinds.base import DataError
from kit.data.prefetch import DeviceBatches
from kit.data.preflight import writable_problems
from kit.train.settings import TrainSettings, load_train_settings

#: AlgoPerf's self-tuning submissions warm up over a share of 0.75 x step_hint (REFERENCE.md)
ALGOPERF_HORIZON = 0.75
CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"
METRICS_SCHEMA = {"step": pl.Int64, "epoch": pl.Int64, "loss": pl.Float64, "lr": pl.Float64,
                  "images_per_s": pl.Float64, "eval_accuracy": pl.Float64,
                  "eval_loss": pl.Float64}


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the last good checkpoint is kept."""


class Preempted(RuntimeError):
    """A preemption signal stopped the run after its checkpoint was written; run it again."""


def placement(out: Path, process: Process) -> str:
    """Where this rank runs, for its log: a launcher's pinning can be checked there."""
    return (f"{out.name}: rank {process.rank}/{process.world_size} on {process.device}, "
            f"cpus {sorted(os.sched_getaffinity(0))}, {torch.get_num_threads()} threads, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")


def warmup_steps(cfg: TrainSettings) -> int:
    """Warmup as AlgoPerf's schedule-free submission: a share of 0.75 x step_hint."""
    return round(cfg.warmup_fraction * ALGOPERF_HORIZON * (cfg.step_hint or cfg.iterations))


class Trainer:
    """Model, optimizer and training step of one rank."""

    def __init__(self, cfg: TrainSettings, process: Process) -> None:
        self.cfg, self.process = cfg, process
        device = process.device
        torch.manual_seed(cfg.seed)
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.module = models.build(cfg.model, cfg.num_classes, cfg.width, cfg.stem,
                                   cfg.data.image_size).to(device, memory_format=self.memory_format)
        model: nn.Module = self.module
        self.ddp: DistributedDataParallel | None = None
        if process.world_size > 1:
            model = self.ddp = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None,
                broadcast_buffers=False, gradient_as_bucket_view=True)
        self.model = torch.compile(model) if cfg.compile else model
        self.optimizer = schedulefree.AdamWScheduleFree(
            self.module.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
            weight_decay=cfg.weight_decay, warmup_steps=warmup_steps(cfg), r=cfg.r,
            weight_lr_power=cfg.weight_lr_power)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda")
        self.autocast_dtype = torch.bfloat16 if bf16 else None
        self.loss_sum = torch.zeros((), device=device)
        self.steps_taken = torch.zeros((), dtype=torch.int64, device=device)
        self.first_bad_step = torch.full((), torch.iinfo(torch.int64).max, device=device)
        self.module.train()
        self.optimizer.train()

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.process.device.type, dtype=self.autocast_dtype)

    def on_device(self, loader: Iterable) -> DeviceBatches:
        """A loader's uint8 batches as normalised images on this rank's device."""
        return DeviceBatches(loader, self.process.device, self.memory_format)

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """One optimizer step over this rank's batch, taken in micro-batches (each with its own
        BatchNorm statistics) whose gradients accumulate and are averaged across ranks once,
        after the last; the loss stays on the device (no host synchronisation)."""
        self.optimizer.zero_grad(set_to_none=True)
        size = self.cfg.micro_batch or len(images)
        parts = len(images) // size
        loss = torch.zeros((), device=images.device)
        for part, (x, y) in enumerate(zip(images.split(size), labels.split(size))):
            accumulate = self.ddp is not None and part < parts - 1
            with self.ddp.no_sync() if accumulate else contextlib.nullcontext():
                with self.autocast():
                    part_loss = self.criterion(self.model(x), y) / parts
                part_loss.backward()
            loss += part_loss.detach().float()
        self.optimizer.step()
        self.steps_taken += 1
        bad_now = torch.where(torch.isfinite(loss), self.first_bad_step, self.steps_taken)
        torch.minimum(self.first_bad_step, bad_now, out=self.first_bad_step)
        self.loss_sum += loss

    def take_window(self, steps: int, stop_requested: bool = False
                    ) -> tuple[float, int | None, bool]:
        """Mean loss over the last `steps` steps (all ranks), the first non-finite step, and
        whether any rank was asked to stop (carried, negated, in the same MIN reduction)."""
        totals = self.loss_sum.clone()
        first_bad = torch.stack([self.first_bad_step,
                                 torch.tensor(-int(stop_requested), device=totals.device)])
        if self.process.world_size > 1:
            dist.all_reduce(totals)
            dist.all_reduce(first_bad, op=dist.ReduceOp.MIN)
        self.loss_sum.zero_()
        bad, stop = first_bad.tolist()
        return (float(totals) / (steps * self.process.world_size),
                None if bad == torch.iinfo(torch.int64).max else bad, stop < 0)

    @contextlib.contextmanager
    def evaluation_point(self, recalibration: Iterable) -> Iterator[None]:
        """Weights at x (schedule-free's average), BN statistics recomputed there, eval mode."""
        self.optimizer.eval()
        if self.cfg.bn_recalibration_batches > 0:
            self.recalibrate_batchnorm(recalibration)
        self.module.eval()
        try:
            yield
        finally:
            self.module.train()
            self.optimizer.train()

    @torch.no_grad()
    def recalibrate_batchnorm(self, batches: Iterable) -> None:
        """BN running statistics as the plain average over fixed batches, in train mode at the
        current weights; ranks average their statistics so that replicas stay identical."""
        norms = [m for m in self.module.modules() if isinstance(m, _BatchNorm)]
        momenta = [norm.momentum for norm in norms]
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # cumulative average
        self.module.train()
        with self.autocast():
            for images, _ in self.on_device(batches):
                self.module(images)
        for norm, momentum in zip(norms, momenta):
            norm.momentum = momentum
            if self.process.world_size > 1:
                for statistic in (norm.running_mean, norm.running_var):
                    dist.all_reduce(statistic)
                    statistic /= self.process.world_size

    @torch.no_grad()
    def evaluate(self, batches: Iterable) -> tuple[float, float]:
        """Top-1 accuracy and cross-entropy over the evaluation split (all ranks)."""
        device = self.process.device
        totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, loss, count
        for images, labels in self.on_device(batches):
            with self.autocast():
                logits = self.module(images)
            logits = logits.float()
            totals[0] += (logits.argmax(1) == labels).sum()
            totals[1] += nn.functional.cross_entropy(logits, labels, reduction="sum")
            totals[2] += labels.numel()
        if self.process.world_size > 1:
            dist.all_reduce(totals)
        correct, loss, count = totals.tolist()
        return correct / count, loss / count

    def state(self) -> dict[str, Any]:
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def parameters_at_y(self) -> list[torch.Tensor]:
        return [parameter.detach().clone() for parameter in self.module.parameters()]

    def load(self, state: dict[str, Any]) -> None:
        """Restore weights at x and optimizer state saved in eval mode, then return to y. A
        preemption checkpoint also holds y itself: an uninterrupted run never went to x at that
        step, and the round trip x -> y is exact only up to rounding."""
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer.train()
        if "parameters_at_y" in state:
            with torch.no_grad():
                for parameter, saved in zip(self.module.parameters(), state["parameters_at_y"]):
                    parameter.copy_(saved)

    def check_replicas_identical(self) -> None:
        """Every rank must end with rank 0's parameters and buffers, bit for bit."""
        differing = torch.zeros((), device=self.process.device)
        for name, tensor in self.module.state_dict().items():
            reference = tensor.clone()
            dist.broadcast(reference, src=0)
            if not torch.equal(reference, tensor):
                differing += 1
                print(f"rank {self.process.rank}: {name} differs from rank 0", file=sys.stderr)
        dist.all_reduce(differing)
        if differing.item():
            raise RuntimeError(f"replicas diverged: {int(differing.item())} tensors differ")


# ---------------------------------------------------------------------------------------------
# Checkpoints and metrics
# ---------------------------------------------------------------------------------------------

def rng_states() -> dict[str, Any]:
    """The generators' states; of CUDA only the current device's, so that a run resumes under
    any number of visible GPUs (each rank drives one device)."""
    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda_device"] = torch.cuda.get_rng_state()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "cuda_device" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda_device"])


def read_metrics(run_dir: str | Path) -> pl.DataFrame:
    """A run's metrics.jsonl as a table (eval columns are null between evaluations)."""
    return pl.read_ndjson(resolve(run_dir) / METRICS, schema=METRICS_SCHEMA)


def _keep_metrics_until(path: Path, step: int) -> None:
    """Drop rows a killed run logged after the checkpoint it resumes from, and a last row torn
    by the kill (said on stderr)."""
    if not path.exists():
        return
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            row = json.loads(line) if line else None
        except json.JSONDecodeError:
            print(f"{path}: line {number} is torn (a killed write), dropped", file=sys.stderr)
            continue
        if row is not None and row["step"] <= step:
            rows.append(line)
    with files.atomic_write(path) as handle:
        handle.write("".join(f"{row}\n" for row in rows).encode())


@contextlib.contextmanager
def tensorboard_scalars(cfg: TrainSettings, out: Path, step: int, process: Process
                        ) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A function logging a metrics record's numbers as TensorBoard scalars in the run folder
    (`tensorboard --logdir` over the runs' parent folder), flushed at every record so that a
    run can be watched live; it does nothing unless `tensorboard` is set, and on ranks but 0.
    A resumed run hides the events a killed one logged after its checkpoint (purge_step)."""
    if not (cfg.tensorboard and process.main):
        yield lambda record: None
        return
    from torch.utils.tensorboard import (
        SummaryWriter,  # imports tensorboard: only when asked
    )

    with SummaryWriter(log_dir=str(out), purge_step=step or None) as writer:
        def log(record: dict[str, Any]) -> None:
            for key, value in record.items():
                if key != "step" and value is not None:
                    writer.add_scalar(key, value, record["step"])
            writer.flush()

        yield log


def _read_checkpoint(path: Path) -> dict[str, Any]:
    """A run's checkpoint, checked against its hash (said on stderr when it has none); a damaged
    one is refused naming it."""
    return models.read_checkpoint(path, rebuild=(
        f"Delete {path.name} and {files.sidecar(path).name} in {path.parent} to train this run "
        "again from the start."), warn_unverified=True)


def _check_finite(state: dict[str, Any], where: Path, kept: str) -> None:
    """Refuse to save weights or BN statistics holding NaN or infinity as a good checkpoint."""
    bad = models.non_finite(state["model"])
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise NonFiniteLossError(f"{where}: non-finite weights or BatchNorm statistics at step "
                                 f"{state['step']} ({', '.join(bad[:5])}{more}); training "
                                 f"stopped and {kept}")


def _check_same_run(saved: dict[str, Any], cfg: TrainSettings, where: Path) -> None:
    differing = cfg.differing_settings(saved)
    if differing:
        raise ParameterError(f"{where}: holds a run with different settings "
                             f"({', '.join(differing)}); use another output_dir or restore "
                             "those settings to resume it")


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------

class StopFlag:
    """Set by a preemption signal; the step loop reads it at its next logging step."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopFlag]:
        """Catch the preemption signals for the block (main thread only: elsewhere Python
        cannot install handlers, and the caller keeps its own)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        with signal_handlers(PREEMPTION_SIGNALS, self._request):
            yield self

    def _request(self, number: int, _frame: object) -> None:
        self.requested = True
        print(f"received {signal.Signals(number).name}: checkpointing at the next logging step",
              file=sys.stderr, flush=True)


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


def train(cfg: TrainSettings) -> Path:
    """Train (or resume, or skip when finished) one run; returns its output folder."""
    process = start_process(cfg.device)
    try:
        unwritable = writable_problems(resolve(cfg.output_dir))
        if unwritable:  # before the lock file is made there
            raise ParameterError("; ".join(unwritable))
        with holding_run_folder(resolve(cfg.output_dir), process), \
                StopFlag().installed() as stop, contextlib.ExitStack() as closing:
            return _train(cfg, process, stop, closing)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _train(cfg: TrainSettings, process: Process, stop: StopFlag, closing: contextlib.ExitStack
           ) -> Path:
    out = resolve(cfg.output_dir)
    checkpoint_path, done_path, metrics_path = out / CHECKPOINT, out / DONE, out / METRICS
    if (out / "config.yaml").exists():
        _check_same_run(yaml.safe_load((out / "config.yaml").read_text()), cfg, out)
    if done_path.exists():
        if process.main:
            print(f"{out}: finished ({done_path.name} present), not training again")
        return out
    if cfg.batch_size % process.world_size:
        raise ParameterError(f"batch_size: {cfg.batch_size} is not divisible by the "
                             f"{process.world_size} ranks")
    if cfg.micro_batch and cfg.batch_size % (process.world_size * cfg.micro_batch):
        raise ParameterError(f"micro_batch: batch_size {cfg.batch_size} is not divisible by "
                             f"{process.world_size} ranks x micro_batch {cfg.micro_batch}")
    print(placement(out, process), flush=True)
    run_data = kit_data.build(
        cfg.data, cfg.num_classes, cfg.seed, cfg.batch_size, process.rank, process.world_size,
        cfg.num_workers, cfg.bn_recalibration_batches, pin_memory=process.device.type == "cuda",
        micro_batch=cfg.micro_batch)
    trainer = Trainer(cfg, process)
    step, epoch, batch_in_epoch = 0, 0, 0
    if checkpoint_path.exists():
        state = _read_checkpoint(checkpoint_path)
        trainer.load(state)
        restore_rng_states(state["rng"])
        step, epoch, batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
    if process.main:
        out.mkdir(parents=True, exist_ok=True)
        files.remove_stale_temporaries(out)
        with files.atomic_write(out / "config.yaml") as handle:  # other ranks may be reading it
            handle.write(yaml.safe_dump(cfg.model_dump(), sort_keys=False).encode())
        _keep_metrics_until(metrics_path, step)
    last_saved = step if checkpoint_path.exists() else None

    run_data.order.set_position(epoch, batch_in_epoch)
    batches = iter(trainer.on_device(run_data.train))
    progress = tqdm(total=cfg.iterations, initial=step, desc=out.name, unit="step",
                    disable=None if process.main else True)  # None: only on a terminal
    log_scalars = closing.enter_context(tensorboard_scalars(cfg, out, step, process))
    window_steps, window_start = 0, time.perf_counter()
    while step < cfg.iterations:
        try:
            images, labels = next(batches)
        except StopIteration:
            epoch, batch_in_epoch = epoch + 1, 0
            run_data.order.set_position(epoch, 0)
            batches = iter(trainer.on_device(run_data.train))
            continue
        trainer.step(images, labels)
        step, batch_in_epoch, window_steps = step + 1, batch_in_epoch + 1, window_steps + 1
        final = step == cfg.iterations
        evaluate = final or (cfg.eval_every > 0 and step % cfg.eval_every == 0)
        save = final or (cfg.checkpoint_every > 0 and step % cfg.checkpoint_every == 0)
        if not (evaluate or save or step % cfg.log_every == 0):
            continue
        loss, bad_step, preempted = trainer.take_window(window_steps, stop.requested)
        kept = (f"the last good checkpoint (step {last_saved}) is kept in {checkpoint_path}"
                if last_saved is not None else "no checkpoint had been written yet")
        # an uninterrupted run passes through x only where it evaluates or saves
        at_y = ({"parameters_at_y": trainer.parameters_at_y()}
                if preempted and not (evaluate or save) else {})
        save = save or preempted
        if bad_step is not None:
            raise NonFiniteLossError(f"{out}: the training loss became non-finite at step "
                                     f"{bad_step}; training stopped and {kept}")
        record = {"step": step, "epoch": epoch, "loss": loss,
                  "lr": trainer.optimizer.param_groups[0]["scheduled_lr"],
                  "images_per_s": window_steps * cfg.batch_size
                  / (time.perf_counter() - window_start),
                  "eval_accuracy": None, "eval_loss": None}
        # the metrics row goes first: a run killed before its checkpoint replaces it drops the
        # row on resumption and logs it again
        at_x = evaluate or save
        with trainer.evaluation_point(run_data.recalibration) if at_x else contextlib.nullcontext():
            if evaluate:
                record["eval_accuracy"], record["eval_loss"] = trainer.evaluate(run_data.eval)
            if process.main:
                with metrics_path.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                log_scalars(record)
                progress.set_postfix(loss=f"{loss:.3f}", img_s=f"{record['images_per_s']:.0f}",
                                     refresh=False)  # update() redraws, at most every mininterval
                progress.update(step - progress.n)
            if save:
                state = {**trainer.state(), "rng": rng_states(), "step": step, "epoch": epoch,
                         "batch_in_epoch": batch_in_epoch, "config": cfg.model_dump(), **at_y}
                _check_finite(state, out, kept)  # replicas are identical: every rank stops
                if process.main:
                    with files.hashed_write(checkpoint_path) as handle:
                        torch.save(state, handle)
        last_saved = step if save else last_saved
        if preempted and not final:
            progress.close()
            raise Preempted(f"{out}: stopped by a preemption signal at step {step} after "
                            f"writing {checkpoint_path}; run it again to resume")
        window_steps, window_start = 0, time.perf_counter()
    progress.close()
    if process.world_size > 1:
        trainer.check_replicas_identical()
    if process.main:
        done_path.write_text(json.dumps({"step": step, "ranks": process.world_size}) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.train", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, required=True, action="append",
                        help="a run's YAML file; repeated, the runs train one after another in "
                             "this one process (start-up and imports are paid once)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="override a setting, dotted for sections (data.image_size=32)")
    args = parser.parse_args(argv)
    return exit_code(lambda: train_in_turn([load_train_settings(path, args.overrides)
                                            for path in args.config]))


def train_in_turn(configs: list[TrainSettings]) -> None:
    """Train runs one after another in this process, each exactly as it would train alone (its
    own seeds, folder, lock and checkpoints); every configuration is validated before the first
    starts. Several runs need a single process: a DDP group trains one run."""
    ranks = max(int(os.environ.get(name, "1")) for name in ("WORLD_SIZE", "SLURM_NTASKS"))
    if len(configs) > 1 and ranks > 1:
        raise ParameterError(f"--config: {len(configs)} runs given to one of {ranks} ranks; "
                             "launch one torchrun (or srun) per run")
    for cfg in configs:
        train(cfg)


def exit_code(action: Callable[[], object]) -> int:
    """Run a command-line action: 0 on success, 2 for bad input or a run folder held by another
    process, 1 for a diverged run, PREEMPTED_EXIT for a run to resume; the message (which names
    the file, key, step or holder) goes to stderr without a traceback."""
    try:
        action()
    except (ParameterError, DataError, models.CheckpointError,
            locks.FolderLocked) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Preempted as error:
        print(f"preempted: {error}", file=sys.stderr)
        return PREEMPTED_EXIT
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0

