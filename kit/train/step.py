"""One rank's replica: the model, schedule-free AdamW, micro-batches, evaluation at x.

Schedule-free AdamW keeps two points: training steps run at y, evaluation and saving at x
(`optimizer.eval()`), and BatchNorm statistics gathered at y do not fit x, so they are recomputed
at x before every evaluation and every save.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import schedulefree
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel

from kit.data.prefetch import DeviceBatches
from kit.numerics import numerics, rounding
from kit.runtime.distributed import Process
from kit.train.checkpoint import restore_rng_states, rng_states
from kit.train.network import network
from kit.train.settings import TrainSettings

#: AlgoPerf's self-tuning schedule-free AdamW submission warms up over a share of 0.75 x
#: step_hint
ALGOPERF_HORIZON = 0.75


def warmup_steps(settings: TrainSettings) -> int:
    """Warmup as AlgoPerf's schedule-free submission: a share of 0.75 x step_hint."""
    return round(
        settings.warmup_fraction * ALGOPERF_HORIZON * (settings.step_hint or settings.iterations)
    )


class Replica:
    """One rank's replica of the model in data-parallel training: its parameters, optimizer and
    training step, and what keeps replicas identical and moves them between y and x (evaluation,
    BatchNorm recalibration, checkpoint state). The loop that drives it is kit.train.trainer's."""

    def __init__(self, *, settings: TrainSettings, process: Process) -> None:
        self.settings, self.process = settings, process
        device = process.device
        torch.manual_seed(settings.seed)
        self.memory_format = (
            torch.channels_last if settings.channels_last else torch.contiguous_format
        )
        self.module = network(settings).to(device, memory_format=self.memory_format)
        model: nn.Module = self.module
        self.ddp: DistributedDataParallel | None = None
        if process.world_size > 1:
            model = self.ddp = DistributedDataParallel(
                model,
                device_ids=[device.index] if device.type == "cuda" else None,
                broadcast_buffers=False,
                gradient_as_bucket_view=True,
            )
        self.model = torch.compile(model) if settings.compile else model
        self.optimizer = schedulefree.AdamWScheduleFree(
            self.module.parameters(),
            lr=settings.lr,
            betas=tuple(settings.betas),
            eps=settings.eps,
            weight_decay=settings.weight_decay,
            warmup_steps=warmup_steps(settings),
            r=settings.r,
            weight_lr_power=settings.weight_lr_power,
        )
        self.criterion = nn.CrossEntropyLoss(label_smoothing=settings.label_smoothing)
        bf16 = settings.precision == "bf16" or (
            settings.precision == "auto" and device.type == "cuda"
        )
        self.autocast_dtype = torch.bfloat16 if bf16 else None
        self.loss_sum = torch.zeros((), device=device)
        self.steps_taken = torch.zeros((), dtype=torch.int64, device=device)
        self.first_bad_step = torch.full((), torch.iinfo(torch.int64).max, device=device)
        self.module.train()
        self.optimizer.train()

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on the run's device when its precision asks for it, else nothing."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.process.device.type, dtype=self.autocast_dtype)

    def exact_roots(self) -> contextlib.AbstractContextManager:
        """Around the optimizer's step, in the reproducible CPU numerics: its square roots
        correctly rounded, the same bits on every CPU (kit.numerics.rounding); else nothing."""
        if self.process.device.type != "cpu" or not numerics.reproducible():
            return contextlib.nullcontext()
        return rounding.correctly_rounded_sqrt()

    def on_device(self, loader: Iterable) -> DeviceBatches:
        """A loader's uint8 batches as normalised images on this rank's device."""
        return DeviceBatches(loader, self.process.device, self.memory_format)

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """One optimizer step over this rank's batch, taken in micro-batches (each with its own
        BatchNorm statistics) whose gradients accumulate and are averaged across ranks once,
        after the last; the loss stays on the device (no host synchronisation)."""
        self.optimizer.zero_grad(set_to_none=True)
        size = self.settings.micro_batch or len(images)
        parts = len(images) // size
        loss = torch.zeros((), device=images.device)
        for part, (x, y) in enumerate(zip(images.split(size), labels.split(size), strict=True)):
            accumulate = self.ddp is not None and part < parts - 1
            with (
                self.ddp.no_sync()
                if self.ddp is not None and accumulate
                else contextlib.nullcontext()
            ):
                with self.autocast():
                    part_loss = self.criterion(self.model(x), y) / parts
                part_loss.backward()
            loss += part_loss.detach().float()
        try:
            with self.exact_roots():
                self.optimizer.step()
        except OverflowError:  # the update's arithmetic in Python floats (lr ** 2 past 1e308):
            loss = torch.full_like(loss, math.inf)  # a non-finite step, said as the loss is
        self.steps_taken += 1
        bad_now = torch.where(torch.isfinite(loss), self.first_bad_step, self.steps_taken)
        torch.minimum(self.first_bad_step, bad_now, out=self.first_bad_step)
        self.loss_sum += loss

    def take_window(
        self, steps: int, stop_requested: bool = False
    ) -> tuple[float, int | None, bool]:
        """Mean loss over the last `steps` steps (all ranks), the first non-finite step, and
        whether any rank was asked to stop (carried, negated, in the same MIN reduction)."""
        totals = self.loss_sum.clone()
        first_bad = torch.stack(
            [self.first_bad_step, torch.tensor(-int(stop_requested), device=totals.device)]
        )
        if self.process.world_size > 1:
            dist.all_reduce(totals)
            dist.all_reduce(first_bad, op=dist.ReduceOp.MIN)
        self.loss_sum.zero_()
        bad, stop = first_bad.tolist()
        return (
            float(totals) / (steps * self.process.world_size),
            None if bad == torch.iinfo(torch.int64).max else bad,
            stop < 0,
        )

    def peak_memory_gib(self) -> float | None:
        """The most memory this rank's tensors held on its GPU since the last call (the caching
        allocator's peak, `torch.cuda.max_memory_allocated`), in GiB; None off CUDA, where
        there is no such counter. Reads the allocator's statistics: no wait for the device."""
        device = self.process.device
        if device.type != "cuda":
            return None
        peak = torch.cuda.max_memory_allocated(device) / 2**30
        torch.cuda.reset_peak_memory_stats(device)
        return peak

    def window_state(self, steps: int) -> dict[str, Any]:
        """Every rank's loss sum and first non-finite step over the `steps` steps since the last
        logging step (indexed by rank), for a checkpoint written between logging steps."""
        state: dict[str, Any] = {"steps": steps}
        for name, tensor in (("loss_sum", self.loss_sum), ("first_bad_step", self.first_bad_step)):
            gathered = [tensor.clone() for _ in range(self.process.world_size)]
            if self.process.world_size > 1:
                dist.all_gather(gathered, tensor)
            state[name] = torch.stack(gathered).cpu()
        return state

    @contextlib.contextmanager
    def evaluation_point(self, recalibration: Iterable) -> Iterator[None]:
        """Weights at x (schedule-free's average), BN statistics recomputed there, eval mode."""
        self.optimizer.eval()
        if self.settings.bn_recalibration_batches > 0:
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
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
            if self.process.world_size > 1:
                for statistic in (norm.running_mean, norm.running_var):
                    assert statistic is not None  # the kit's BatchNorms track running statistics
                    dist.all_reduce(statistic)
                    statistic.div_(self.process.world_size)

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
        """Model and optimizer state, for a checkpoint (taken at x)."""
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def parameters_at_y(self) -> list[torch.Tensor]:
        """A copy of the parameters at y, the point training steps run at."""
        return [parameter.detach().clone() for parameter in self.module.parameters()]

    def load(self, state: dict[str, Any]) -> None:
        """Restore weights at x and optimizer state saved in eval mode, then return to y. A
        preemption checkpoint also holds y itself: an uninterrupted run never went to x at that
        step, and the round trip x -> y is exact only up to rounding."""
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer.train()
        self.steps_taken.fill_(state.get("step", 0))  # a checkpoint says its step
        if "window" in state:  # stopped between logging steps
            self.loss_sum.copy_(state["window"]["loss_sum"][self.process.rank])
            self.first_bad_step.copy_(state["window"]["first_bad_step"][self.process.rank])
        if "parameters_at_y" in state:
            self.back_to(state)

    def at_y(self) -> dict[str, Any]:
        """Where the run is at y, before it goes to x: a copy of the parameters and the
        generators' states, for `back_to` (and a checkpoint that stops or ends the run there)."""
        return {"parameters_at_y": self.parameters_at_y(), "rng": rng_states()}

    @torch.no_grad()
    def back_to(self, point: dict[str, Any]) -> None:
        """Put back the parameters at y that `at_y` copied (the optimizer in train mode), and the
        generators when it holds them: exact, where the optimizer's own way back from x is exact
        only up to rounding."""
        for parameter, saved in zip(
            self.module.parameters(), point["parameters_at_y"], strict=True
        ):
            parameter.copy_(saved)
        if "rng" in point:
            restore_rng_states(point["rng"])

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
