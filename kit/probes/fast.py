"""The fast probe: a grid of SGD heads trained in one pass over cached features.

Like DINOv2's linear evaluation, all heads of a grid train together: one read of the features
feeds every head. Features are streamed from where they are cached (fp16 memory maps of
ImageNet size need not fit in memory, nor be copied in float32) and standardised per minibatch
with statistics of the fit rows; splits whose float32 copies fit in STANDARDISED_COPY_BYTES are
standardised once instead, with the same bits. With `select_from: converged`, each weight decay's
lowest-objective head is finished by the L-BFGS probe's fit (`kit.probes.lbfgs`).

The grid's heads are shared out over the probe's devices (`kit.probes.devices`: every visible
GPU by default), each group reading its own copy of the rows; on CUDA the float32 products run
on TF32 tensor cores unless `tf32: false`. On the CPU in the reproducible numerics its products,
row gathers and standardisation run in blocks over the process's threads (kit.numerics.blocked),
with the same bits on any number of them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import polars as pl
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from kit.data.settings import DataSettings
from kit.numerics import blocked
from kit.numerics.threads import numerics_threads
from kit.probes.base import FeatureProbe
from kit.probes.devices import precision, probe_devices, shares, visible_gpus
from kit.probes.lbfgs import ConvexFit, convex_fit, spread_fits, spread_rows
from kit.probes.rows import FeatureRows, Split, scores
from kit.probes.selection import ProbeResult, select
from kit.probes.settings import LBFGS_MAX_ITER, FastProbeSettings

#: fit rows scored for the training loss and accuracy (at least as many as held out)
TRAIN_SCORE_ROWS = 10_000
#: bytes of float32 standardised copies of its splits the fast probe keeps on each device
STANDARDISED_COPY_BYTES = 1 << 30


class SgdHeads:
    """One linear head per (lr, weight decay) of `grid`, as one [H, D, C] weight read by one
    product with the standardised features; SGD with Nesterov momentum and a per-head step.
    The heads read `rows` standardised in float32 (`FeatureRows.standardised`), from copies
    made once for as many of the splits, fit split first, as STANDARDISED_COPY_BYTES hold."""

    def __init__(
        self,
        rows: ConvexFit,
        settings: FastProbeSettings,
        num_classes: int,
        grid: list[tuple[float, float]],
        fit_sample: torch.Tensor,
    ) -> None:
        self.device, self.classes = rows.train.device, num_classes
        self.fit_sample = fit_sample
        self.rows = _standardised(rows, rows.mean.float(), 1 / rows.std.float(), fit_sample)
        self.grid = grid
        self.count, self.dim = len(self.grid), rows.train.features.shape[1]
        self.lr = torch.tensor([g[0] for g in self.grid], device=self.device)[:, None, None]
        self.wd = torch.tensor([g[1] for g in self.grid], device=self.device)[:, None, None]
        self.momentum = settings.momentum
        self.weight = torch.zeros(
            self.count, self.dim, num_classes, device=self.device, requires_grad=True
        )
        self.bias = torch.zeros(self.count, num_classes, device=self.device, requires_grad=True)
        self.velocity = [torch.zeros_like(self.weight), torch.zeros_like(self.bias)]

    def logits(self, standardised: torch.Tensor) -> torch.Tensor:
        """Every head's logits [B, H, C] of standardised feature rows [B, D]."""
        flat = blocked.matmul(
            standardised,
            self.weight.permute(1, 0, 2).reshape(self.dim, self.count * self.classes),
        )
        return flat.view(-1, self.count, self.classes) + self.bias

    def step(self, batch: torch.Tensor, decay: float) -> None:
        """One SGD step of every head on the fit rows `batch` (host indices), its learning rate
        times `decay`."""
        labels = self.rows.train_labels[batch.to(self.device)]
        loss = F.nll_loss(  # F.cross_entropy's own two steps, the first cut into blocks
            blocked.log_softmax(self.logits(self.rows.train(batch)).permute(0, 2, 1), 1),
            labels[:, None].expand(-1, self.count),
            reduction="none",
        )
        loss.mean(0).sum().backward()
        with torch.no_grad():
            for param, buffer, penalty in (
                (self.weight, self.velocity[0], self.wd),
                (self.bias, self.velocity[1], 0.0),
            ):
                assert param.grad is not None, "a step before the loss's backward"
                grad = param.grad + penalty * param
                buffer.mul_(self.momentum).add_(grad)
                step_lr = self.lr * decay if param is self.weight else (self.lr * decay)[:, :, 0]
                param -= step_lr * (grad + self.momentum * buffer)
                param.grad = None

    def scored(self, epoch: int) -> list[dict[str, Any]]:
        """Every head's objective on the sampled fit rows and accuracies on the sampled fit,
        held-out, evaluation and extra evaluation rows: one history row per head."""
        rows = self.rows
        fit = scores(self.logits, rows.train, self.fit_sample, rows.train_labels)
        heldout = scores(self.logits, rows.train, rows.held, rows.train_labels)
        evaluated = scores(
            self.logits, rows.evaluation, torch.arange(len(rows.eval_labels)), rows.eval_labels
        )
        extra = rows.extra_top1(self.logits)
        penalty = (self.wd[:, 0, 0] / 2 * self.weight.detach().square().sum((1, 2))).cpu()
        return [
            {
                "lr": head_lr,
                "weight_decay": head_wd,
                "epoch": epoch,
                "train_loss": float(fit["loss"][h] + penalty[h]),
                "train_top1": float(fit["top1"][h]),
                "heldout_top1": float(heldout["top1"][h]),
                "eval_top1": float(evaluated["top1"][h]),
                "eval_top5": float(evaluated["top5"][h]),
                **{column: float(top1[h]) for column, top1 in extra.items()},
            }
            for h, (head_lr, head_wd) in enumerate(self.grid)
        ]

    def linear(self, lr: float, weight_decay: float) -> nn.Linear:
        """The head of (lr, weight decay) as a float64 nn.Linear on standardised features."""
        index = self.grid.index((lr, weight_decay))
        linear = nn.Linear(self.dim, self.classes).to(self.device, torch.float64)
        with torch.no_grad():
            linear.weight.copy_(self.weight[index].T)
            linear.bias.copy_(self.bias[index])
        return linear


class SpreadHeads:
    """The whole grid as groups of `SgdHeads`, one group per device, each with the rows it reads
    there. Kernels launch asynchronously, so the devices compute side by side."""

    def __init__(
        self, places: list[ConvexFit], settings: FastProbeSettings, num_classes: int
    ) -> None:
        grid = list(itertools.product(settings.lrs, settings.weight_decays))
        sample = fit_sample(places[0], settings.seed)
        self.groups = [
            SgdHeads(place, settings, num_classes, [grid[i] for i in share], sample)
            for place, share in zip(places, shares(len(grid), len(places)), strict=True)
        ]

    def step(self, batch: torch.Tensor, decay: float) -> None:
        """One SGD step of every group on the fit rows `batch` (host indices)."""
        for heads in self.groups:
            heads.step(batch, decay)

    def scored(self, epoch: int) -> list[dict[str, Any]]:
        """Every head's history row (`SgdHeads.scored`), in grid order."""
        return [row for heads in self.groups for row in heads.scored(epoch)]

    def linear(self, lr: float, weight_decay: float) -> nn.Linear:
        """The head of (lr, weight decay), on the device of its group."""
        heads = next(heads for heads in self.groups if (lr, weight_decay) in heads.grid)
        return heads.linear(lr, weight_decay)


def fast_probe(
    train: Split,
    evaluation: Split,
    num_classes: int,
    settings: FastProbeSettings = FastProbeSettings(),
    progress: bool = True,
    extra: Mapping[str, Split] | None = None,
) -> ProbeResult:
    """Train one head per (lr, weight decay) in one pass over the fit rows; score every head on
    the held-out and evaluation rows after each epoch, and on as many fit rows (a fixed random
    sample, all of them when there are few) for the training loss and accuracy, which cost no
    more than the held-out scoring. Features are standardised per minibatch with statistics of
    the fit rows, or once into a copy where STANDARDISED_COPY_BYTES hold it. With
    `select_from: converged`, each weight decay's lowest-objective head is then finished by
    L-BFGS to its tolerance (see `FastProbeSettings`), and the rules choose among those fits.
    Every head is scored on the `extra` evaluation splits too
    (`kit.probes.selection.extra_column`)."""
    devices = probe_devices(settings.device, settings.devices, visible_gpus())
    rows = convex_fit(
        train, evaluation, num_classes, settings.heldout_fraction, settings.seed, devices[0], extra
    )
    places = spread_rows(rows, devices)
    with precision(devices, settings.tf32), numerics_threads(devices[0].type == "cpu"):
        heads = SpreadHeads(places, settings, num_classes)
        history = pl.DataFrame(_train(heads, rows, settings, progress))
    if settings.select_from == "epochs":
        return ProbeResult(
            history, select(history, ["lr", "weight_decay"], num_classes, settings.max_gap)
        )
    chosen = list(converged_heads(history).iter_rows(named=True))
    fits = spread_fits(
        places,
        [(heads.linear(head["lr"], head["weight_decay"]), head["weight_decay"]) for head in chosen],
        LBFGS_MAX_ITER,
        settings.tolerance_change,
    )
    finished = pl.DataFrame(
        [
            {
                "lr": head["lr"],
                "weight_decay": head["weight_decay"],
                "epoch": settings.epochs,
                **fit,
            }
            for head, fit in zip(chosen, fits, strict=True)
        ]
    )
    return ProbeResult(
        pl.concat([history, finished], how="diagonal"),
        select(finished, ["lr", "weight_decay"], num_classes, settings.max_gap),
    )


def fit_sample(rows: ConvexFit, seed: int) -> torch.Tensor:
    """The fit rows scored for the training loss and accuracy: a seeded random sample of
    TRAIN_SCORE_ROWS of them (at least as many as are held out; all when there are fewer),
    sorted."""
    sampled = torch.randperm(len(rows.kept), generator=torch.Generator().manual_seed(seed + 1))
    return rows.kept[sampled[: max(len(rows.held), TRAIN_SCORE_ROWS)]].sort().values


def _train(
    heads: SpreadHeads, rows: ConvexFit, settings: FastProbeSettings, progress: bool
) -> list[dict[str, Any]]:
    """The epochs of SGD over seeded shuffles of the fit rows, with a cosine decay of the
    learning rates over all steps; every head's history row after each epoch."""
    kept = rows.kept
    generator = torch.Generator().manual_seed(settings.seed)
    total = settings.epochs * math.ceil(len(kept) / settings.batch_size)
    step, history = 0, []
    for epoch in tqdm(range(1, settings.epochs + 1), desc="fast probe", disable=not progress):
        order = kept[torch.randperm(len(kept), generator=generator)]
        for start in range(0, len(kept), settings.batch_size):
            batch = order[start : start + settings.batch_size].sort().values  # memory-map locality
            heads.step(batch, 0.5 * (1 + math.cos(math.pi * step / total)))
            step += 1
        history += heads.scored(epoch)
    return history


def _standardised(
    rows: ConvexFit, mean: torch.Tensor, scale: torch.Tensor, scored: torch.Tensor
) -> ConvexFit:
    """`rows` with every split read standardised in float32 (`FeatureRows.standardised`), the
    fit split first, then the evaluation and the extra ones, each from a copy while the copies
    take at most STANDARDISED_COPY_BYTES: the fit split is read every epoch and the others
    scored every epoch, so a copy saves a pass over each read row. The fit split's copy holds
    the `scored` fit rows first, then the held-out ones, then the rest, and the other copies
    their rows in order, so that every scored chunk is a view of a copy."""
    left = STANDARDISED_COPY_BYTES

    def read(features: FeatureRows, first: torch.Tensor | None = None) -> FeatureRows:
        nonlocal left
        size = 4 * features.features.shape[0] * features.features.shape[1]
        if size > left:
            return features.standardised(mean, scale, None)
        left -= size
        order = torch.arange(features.features.shape[0])
        if first is not None:
            rest = torch.ones(len(order), dtype=torch.bool)
            rest[first] = False
            order = torch.cat([first, order[rest]])
        return features.standardised(mean, scale, order)

    return replace(
        rows,
        train=read(rows.train, torch.cat([scored, rows.held])),
        evaluation=read(rows.evaluation),
        extra={name: replace(split, rows=read(split.rows)) for name, split in rows.extra.items()},
    )


def converged_heads(history: pl.DataFrame) -> pl.DataFrame:
    """Per weight decay, the fast probe's fit closest to convergence: the L-BFGS-finished one
    where the history holds it (rows with `iterations`), else the head with the lowest
    training objective at the last epoch."""
    finished = (
        history.filter(pl.col("iterations").is_not_null())
        if "iterations" in history.columns
        else history.clear()
    )
    if finished.height:
        return finished.sort("weight_decay")
    last = history.filter(pl.col("epoch") == history["epoch"].max())
    return (
        last.sort("train_loss")
        .group_by("weight_decay", maintain_order=True)
        .first()
        .sort("weight_decay")
    )


class FastProbe(FeatureProbe):
    """The fast probe as `kit.probes.registry` names it: `fast`."""

    settings = FastProbeSettings

    def fit(
        self,
        train: Split,
        evaluation: Split,
        num_classes: int,
        settings: FastProbeSettings,
        progress: bool = True,
        extra: Mapping[str, Split] | None = None,
    ) -> ProbeResult:
        """`fast_probe`."""
        return fast_probe(train, evaluation, num_classes, settings, progress, extra)

    def describe(self, settings: FastProbeSettings, tasks: Mapping[str, DataSettings]) -> str:
        """What the probe does with `settings`, in one sentence."""
        finish = (
            "; each weight decay's lowest-objective head then finished by float64 "
            "L-BFGS to its tolerance"
            if settings.select_from == "converged"
            else ""
        )
        return (
            f"the kit's fast probe on cached features: one head per learning rate "
            f"{settings.lrs} x weight decay {settings.weight_decays}, {settings.epochs} "
            f"epochs (SGD, Nesterov, cosine decay, standardised features){finish}"
        )
