"""Linear probes: the paper's protocol, a fast one on cached features, and two selection rules.

The paper's numbers come from the authors' protocol (`faithful`): frozen backbones run on augmented
images every epoch, a BatchNorm1d + Linear head, SGD with Nesterov momentum, 28 epochs, and the
reported accuracy is the best on the evaluation split over epochs and weight decays. That
selection looks at the test split, so every probe here reports two rules side by side:

* `paper`: best evaluation accuracy over the grid and the epochs, as the authors did;
* `heldout`: pick grid point and epoch on a held-out part of the training split, then report
  that head's evaluation accuracy once.

Both rules read the same trained heads, so their difference is the selection optimism alone.
Like DINOv2's linear evaluation, all heads of a grid train together: one forward of the features
feeds every head.

The fast probe streams cached features (fp16 memory maps of ImageNet size need not fit in
memory, nor be copied in float32); the faithful probe is also a step of its own,
`python -m kit.probe faithful --checkpoints a.pt b.pt --data data.yaml --num-classes N --output
DIR`, which runs under torchrun with one process per device.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from pydantic import ValidationError
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm.auto import tqdm

from kit.core import distributed, locks
from kit.core.distributed import start_process
from kit.core.files import atomic_write, file_hash
from kit.core.params import ParameterError, describe_errors, read_yaml
from kit.core.paths import REPO_ROOT
from kit.core.processes import child_environment, signal_tree
from kit.data import pipeline as data
from kit.data.prefetch import DeviceBatches
from kit.data.settings import DataSettings
from kit.features import load_backbone
from kit.launch.local import module_command
from kit.launch.settings import LaunchSettings
from kit.probes.settings import GRID_OF_KIND, PAPER_WEIGHT_DECAYS, FastProbeSettings
from kit.train.trainer import exit_code

RULES = ("paper", "heldout")


class ProbeError(ValueError):
    """Features or labels a probe cannot use."""


@dataclass(frozen=True)
class Split:
    """Features [N, D] and integer labels [N]. Features may be a tensor or a NumPy array such as
    a `kit.features.FeatureSet` memory map: probes read them in chunks and never copy them whole,
    so fp16 features stay fp16 and an ImageNet-sized set need not fit in memory."""

    features: torch.Tensor | np.ndarray
    labels: torch.Tensor | np.ndarray
    name: str


def _labels(split: Split) -> torch.Tensor:
    return torch.as_tensor(np.asarray(split.labels) if isinstance(split.labels, np.ndarray)
                           else split.labels).long()


def _chunk_rows(width: int, device: torch.device) -> int:
    """Rows per chunk: small on the host, where a chunk is extra memory beside the features."""
    budget = (256 if device.type == "cuda" else 8) << 20
    return max(1, budget // (8 * width))


def read_rows(features: torch.Tensor | np.ndarray, index: torch.Tensor) -> torch.Tensor:
    """The rows `index` (sorted, on the host) of a tensor or an array, as a tensor of those rows
    only."""
    if isinstance(features, np.ndarray):
        return torch.from_numpy(np.asarray(features[index.numpy()]))
    return features[index]


def check_splits(splits: Sequence[Split], num_classes: int) -> None:
    """Refuse what would make a probe silently wrong, naming the split (one chunked pass)."""
    width = None
    for split in splits:
        labels = _labels(split)
        if split.features.ndim != 2 or split.features.shape[0] == 0:
            raise ProbeError(f"split '{split.name}': expected a non-empty [N, D] feature matrix, "
                             f"got shape {tuple(split.features.shape)}")
        if labels.shape != (split.features.shape[0],):
            raise ProbeError(f"split '{split.name}': {split.features.shape[0]} feature rows but "
                             f"labels of shape {tuple(labels.shape)}")
        if width is not None and split.features.shape[1] != width:
            raise ProbeError(f"split '{split.name}': feature dimension {split.features.shape[1]} "
                             f"differs from {width} in the other splits")
        width = split.features.shape[1]
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            raise ProbeError(f"split '{split.name}': labels span [{low}, {high}], outside "
                             f"[0, {num_classes - 1}]")
        bad, rows = 0, len(labels)
        step = _chunk_rows(width, torch.device("cpu"))
        for start in range(0, rows, step):
            chunk = read_rows(split.features, torch.arange(start, min(start + step, rows)))
            if not torch.isfinite(chunk.sum(dtype=torch.float64)):  # NaN/inf propagate
                bad += int((~torch.isfinite(chunk)).any(1).sum())
        if bad:
            raise ProbeError(f"split '{split.name}': {bad} feature row(s) hold NaN or inf")


def heldout_indices(rows: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted (kept, held) row indices: a random part of the training split kept out of
    training for the `heldout` rule."""
    if not 0 < fraction < 1:
        raise ProbeError(f"heldout fraction must be in (0, 1), got {fraction}")
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    cut = max(1, int(round(fraction * rows)))
    return order[cut:].sort().values, order[:cut].sort().values


def standardiser(features: torch.Tensor | np.ndarray, index: torch.Tensor | None = None,
                 device: torch.device = torch.device("cpu")) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and standard deviation over the rows `index` (default all), read in
    chunks with float64 accumulators: one pass, and no full-size temporary."""
    index = torch.arange(features.shape[0]) if index is None else index
    total = torch.zeros(features.shape[1], dtype=torch.float64, device=device)
    squares = torch.zeros_like(total)
    step = _chunk_rows(features.shape[1], device)
    for start in range(0, len(index), step):
        chunk = read_rows(features, index[start:start + step]).to(device, torch.float64)
        total += chunk.sum(0)
        squares += chunk.square().sum(0)
    mean = total / len(index)
    variance = (squares / len(index) - mean.square()).clamp_min(0.0)
    return mean.float(), variance.sqrt().clamp_min(1e-6).float()


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Correct predictions per head: logits [B, H, C], labels [B] -> counts [H]."""
    top = logits.topk(min(k, logits.shape[-1]), dim=-1).indices
    return (top == labels[:, None, None]).any(-1).sum(0)


def select(history: pl.DataFrame, group: list[str], num_classes: int) -> pl.DataFrame:
    """Apply both selection rules to a table of (grid point, epoch) evaluations. Top-5 is
    reported only with more than 10 classes, as in the paper; the chosen head's training
    accuracy is reported beside its evaluation accuracy, so the train/eval gap is visible."""
    rows = []
    for rule, column in (("paper", "eval_top1"), ("heldout", "heldout_top1")):
        best = history.sort([column, "epoch"], descending=[True, False],
                           maintain_order=True).row(0, named=True)  # ties: first grid point
        rows.append({"rule": rule, **{k: best[k] for k in group}, "epoch": best["epoch"],
                     "top1": best["eval_top1"],
                     "top5": best["eval_top5"] if num_classes > 10 else None,
                     "train_top1": best["train_top1"]})
    return pl.DataFrame(rows, schema_overrides={"top5": pl.Float64})


@dataclass
class ProbeResult:
    """Every head's accuracies per epoch, and the two rules' choices."""

    history: pl.DataFrame
    selected: pl.DataFrame

    def top1(self, rule: str) -> float:
        return float(self.selected.filter(pl.col("rule") == rule)["top1"][0])


# ---------------------------------------------------------------------------------------------
# fast: cached features, a grid of heads trained in one pass
# ---------------------------------------------------------------------------------------------

class FeatureRows:
    """A split's features where the probe reads them, as float32 rows on the device: the fp16 (or
    whatever) matrix is moved to the device once when it takes at most 70% of its free memory
    (heads and chunks need the rest), otherwise every read gathers its rows from host memory or
    the memory map."""

    def __init__(self, features: torch.Tensor | np.ndarray, device: torch.device) -> None:
        self.features, self.device = features, device
        if device.type == "cuda":
            size = features.shape[0] * features.shape[1] * features.dtype.itemsize
            if size <= 0.7 * torch.cuda.mem_get_info(device)[0]:
                resident = torch.empty(features.shape, device=device,
                                       dtype=read_rows(features, torch.arange(1)).dtype)
                step = _chunk_rows(features.shape[1], device)
                for start in range(0, features.shape[0], step):
                    index = torch.arange(start, min(start + step, features.shape[0]))
                    resident[start:start + len(index)] = read_rows(features, index).to(device)
                self.features = resident

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        if isinstance(self.features, torch.Tensor) and self.features.device == self.device:
            return self.features[index.to(self.device)].float()
        return read_rows(self.features, index).to(self.device, torch.float32)


#: fit rows scored for the training loss and accuracy (at least as many as held out)
TRAIN_SCORE_ROWS = 10_000


def scores(logits_of: Callable[[torch.Tensor], torch.Tensor], read: FeatureRows,
           index: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Top-1, top-5 and mean cross-entropy per head (logits [B, H, C]) over the rows `index`,
    read in chunks, without gradients."""
    sums = None
    with torch.no_grad():
        chunk = _chunk_rows(read.features.shape[1], read.device)
        for start in range(0, len(index), chunk):
            part = index[start:start + chunk]
            logits, target = logits_of(read(part)), labels[part.to(read.device)]
            heads = logits.shape[1]
            counts = torch.stack([
                topk_correct(logits, target, 1).double(), topk_correct(logits, target, 5).double(),
                F.cross_entropy(logits.permute(0, 2, 1), target[:, None].expand(-1, heads),
                                reduction="none").sum(0).double()])
            sums = counts if sums is None else sums + counts
    top1, top5, loss = (sums / len(index)).cpu()
    return {"top1": top1, "top5": top5, "loss": loss}


def fast_probe(train: Split, evaluation: Split, num_classes: int, config: FastProbeSettings = FastProbeSettings(),
               progress: bool = True) -> ProbeResult:
    """Train one head per (lr, weight decay) in one pass over the fit rows; score every head on
    the held-out and evaluation rows after each epoch, and on as many fit rows (a fixed random
    sample, all of them when there are few) for the training loss and accuracy, which cost no
    more than the held-out scoring. Features are standardised per minibatch with statistics of
    the fit rows, so no standardised copy is ever made. With `select_from: converged`, each
    weight decay's lowest-objective head is then finished by L-BFGS to its tolerance (see
    `FastProbeSettings`), and the rules choose among those fits."""
    rows_of = convex_fit(train, evaluation, num_classes, config.heldout_fraction, config.seed,
                         torch.device(config.device))
    device, kept, held = rows_of.train.device, rows_of.kept, rows_of.held
    train_rows, eval_rows = rows_of.train, rows_of.evaluation
    train_labels, eval_labels = rows_of.train_labels, rows_of.eval_labels
    mean, scale = rows_of.mean.float(), 1 / rows_of.std.float()
    grid = list(itertools.product(config.lrs, config.weight_decays))
    heads, dim = len(grid), train.features.shape[1]
    lr = torch.tensor([g[0] for g in grid], device=device)[:, None, None]
    wd = torch.tensor([g[1] for g in grid], device=device)[:, None, None]
    generator = torch.Generator().manual_seed(config.seed)
    weight = torch.zeros(heads, dim, num_classes, device=device, requires_grad=True)
    bias = torch.zeros(heads, num_classes, device=device, requires_grad=True)
    velocity = [torch.zeros_like(weight), torch.zeros_like(bias)]
    steps_per_epoch = math.ceil(len(kept) / config.batch_size)
    total, step, rows = config.epochs * steps_per_epoch, 0, []

    def logits_of(features: torch.Tensor) -> torch.Tensor:
        standardised = (features - mean) * scale
        flat = standardised @ weight.permute(1, 0, 2).reshape(dim, heads * num_classes)
        return flat.view(-1, heads, num_classes) + bias

    eval_index = torch.arange(len(eval_labels))
    sampled = torch.randperm(len(kept), generator=torch.Generator().manual_seed(config.seed + 1))
    fit_sample = kept[sampled[:max(len(held), TRAIN_SCORE_ROWS)]].sort().values
    for epoch in tqdm(range(1, config.epochs + 1), desc="fast probe", disable=not progress):
        order = kept[torch.randperm(len(kept), generator=generator)]
        for start in range(0, len(kept), config.batch_size):
            batch = order[start:start + config.batch_size].sort().values  # memory-map locality
            logits = logits_of(train_rows(batch))
            loss = F.cross_entropy(logits.permute(0, 2, 1),
                                   train_labels[batch.to(device), None].expand(-1, heads),
                                   reduction="none")
            loss.mean(0).sum().backward()
            decay = 0.5 * (1 + math.cos(math.pi * step / total))
            with torch.no_grad():
                for param, buffer, penalty in ((weight, velocity[0], wd), (bias, velocity[1], 0.0)):
                    grad = param.grad + penalty * param
                    buffer.mul_(config.momentum).add_(grad)
                    step_lr = lr * decay if param is weight else (lr * decay)[:, :, 0]
                    param -= step_lr * (grad + config.momentum * buffer)
                    param.grad = None
            step += 1
        fit = scores(logits_of, train_rows, fit_sample, train_labels)
        heldout = scores(logits_of, train_rows, held, train_labels)
        evaluated = scores(logits_of, eval_rows, eval_index, eval_labels)
        penalty = (wd[:, 0, 0] / 2 * weight.detach().square().sum((1, 2))).cpu()
        for h, (head_lr, head_wd) in enumerate(grid):
            rows.append({"lr": head_lr, "weight_decay": head_wd, "epoch": epoch,
                         "train_loss": float(fit["loss"][h] + penalty[h]),
                         "train_top1": float(fit["top1"][h]),
                         "heldout_top1": float(heldout["top1"][h]),
                         "eval_top1": float(evaluated["top1"][h]),
                         "eval_top5": float(evaluated["top5"][h])})
    history = pl.DataFrame(rows)
    if config.select_from == "epochs":
        return ProbeResult(history, select(history, ["lr", "weight_decay"], num_classes))
    finished = []
    for head in converged_heads(history).iter_rows(named=True):
        index = grid.index((head["lr"], head["weight_decay"]))
        linear = nn.Linear(dim, num_classes).to(device, torch.float64)
        with torch.no_grad():
            linear.weight.copy_(weight[index].T)
            linear.bias.copy_(bias[index])
        finished.append({"lr": head["lr"], "weight_decay": head["weight_decay"],
                         "epoch": config.epochs,
                         **rows_of.fit(linear, head["weight_decay"], LBFGS_MAX_ITER)})
    finished_table = pl.DataFrame(finished)
    return ProbeResult(pl.concat([history, finished_table], how="diagonal"),
                       select(finished_table, ["lr", "weight_decay"], num_classes))


def converged_heads(history: pl.DataFrame) -> pl.DataFrame:
    """Per weight decay, the fast probe's fit closest to convergence: the L-BFGS-finished one
    where the history holds it (rows with `iterations`), else the head with the lowest
    training objective at the last epoch."""
    finished = (history.filter(pl.col("iterations").is_not_null())
                if "iterations" in history.columns else history.clear())
    if finished.height:
        return finished.sort("weight_decay")
    last = history.filter(pl.col("epoch") == history["epoch"].max())
    return (last.sort("train_loss").group_by("weight_decay", maintain_order=True).first()
            .sort("weight_decay"))


#: fit rows whose standardised float64 copy takes at most this are copied once for L-BFGS;
#: larger ones (ImageNet's 1.28M x 10,240) are read a chunk at a time in every evaluation
LBFGS_COPY_BYTES = 1 << 30
#: a cap on L-BFGS iterations, not a stopping rule: every fit of the cpu profile's features
#: stopped by tolerance within 500
LBFGS_MAX_ITER = 2000


@dataclass
class ConvexFit:
    """A probe's fit, held-out and evaluation rows, standardised in float64 with statistics of
    the fit rows: what an L-BFGS fit and its scoring read. Float64 because a float32 fit stops
    when the loss no longer changes in float32, up to 1e-5 above the minimum, which moved top-1
    by up to 0.59 point on the cpu profile's features; float64 fits from different starting
    weights agree to 1e-9 and to the image."""

    train: FeatureRows
    evaluation: FeatureRows
    train_labels: torch.Tensor
    eval_labels: torch.Tensor
    kept: torch.Tensor
    held: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    #: the standardised fit rows and labels, made on the first fit when they fit in memory
    copy: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, init=False, repr=False)

    def standardised(self, features: torch.Tensor) -> torch.Tensor:
        return (features.double() - self.mean) / self.std

    def fit_chunks(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        dim = self.train.features.shape[1]
        if self.copy is None and len(self.kept) * dim * 8 <= LBFGS_COPY_BYTES:
            self.copy = (self.standardised(self.train(self.kept)),  # once, not in every pass
                         self.train_labels[self.kept.to(self.train.device)])
        if self.copy is not None:
            yield self.copy
            return
        step = _chunk_rows(dim, self.train.device)
        for start in range(0, len(self.kept), step):
            part = self.kept[start:start + step]
            yield (self.standardised(self.train(part)),
                   self.train_labels[part.to(self.train.device)])

    def fit(self, linear: nn.Linear, decay: float, max_iter: int) -> dict[str, float]:
        """Minimise the mean cross-entropy plus decay / 2 ||W||^2 from `linear`'s weights
        (float64) until torch's tolerances stop L-BFGS (gradient or change of loss); one
        function evaluation is one pass over the fit rows. `max_iter` is only a cap: a fit that
        hits it raises, since its accuracy would be the optimiser's, not the features'.
        Returns the fit's row of scores."""
        optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=max_iter,
                                      line_search_fn="strong_wolfe", history_size=20)

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            penalty = decay / 2 * linear.weight.square().sum()
            penalty.backward()
            total = penalty.detach()
            for features, labels in self.fit_chunks():
                loss = F.cross_entropy(linear(features), labels, reduction="sum") / len(self.kept)
                loss.backward()
                total = total + loss.detach()
            return total

        optimizer.step(closure)
        state = optimizer.state[linear.weight]
        if state["n_iter"] >= max_iter or state["func_evals"] >= optimizer.defaults["max_eval"]:
            raise ProbeError(f"L-BFGS at weight decay {decay} did not converge in {max_iter} "
                             "iterations; raise max_iter")

        def logits_of(features: torch.Tensor) -> torch.Tensor:
            return linear(self.standardised(features))[:, None]

        fit = scores(logits_of, self.train, self.kept, self.train_labels)
        evaluated = scores(logits_of, self.evaluation, torch.arange(len(self.eval_labels)),
                           self.eval_labels)
        return {"iterations": state["n_iter"],
                "train_loss": float(fit["loss"][0]
                                    + decay / 2 * linear.weight.detach().square().sum()),
                "train_top1": float(fit["top1"][0]),
                "heldout_top1": float(scores(logits_of, self.train, self.held,
                                             self.train_labels)["top1"][0]),
                "eval_top1": float(evaluated["top1"][0]),
                "eval_top5": float(evaluated["top5"][0])}


def convex_fit(train: Split, evaluation: Split, num_classes: int, heldout_fraction: float,
               seed: int, device: torch.device) -> ConvexFit:
    """Check the splits, hold out rows and standardise: what both feature probes start from."""
    check_splits([train, evaluation], num_classes)
    kept, held = heldout_indices(len(_labels(train)), heldout_fraction, seed)
    train_rows = FeatureRows(train.features, device)
    mean, std = standardiser(train_rows.features, kept, device)
    return ConvexFit(train_rows, FeatureRows(evaluation.features, device),
                     _labels(train).to(device), _labels(evaluation).to(device), kept, held,
                     mean.double(), std.double())


def lbfgs_probe(train: Split, evaluation: Split, num_classes: int,
                weight_decays: Iterable[float] = (1e-6, 1e-5, 1e-4, 1e-3),
                heldout_fraction: float = 0.1, max_iter: int = LBFGS_MAX_ITER, seed: int = 0,
                device: str = "cpu") -> ProbeResult:
    """Full-batch multinomial logistic regression by L-BFGS from zero weights, one fit per
    weight decay, on the fast probe's held-out split and standardisation. Features are read as
    the fast probe reads them (resident on the device when they fit, else a chunk at a time
    from host memory or a memory map), so a converged fit needs no full-size copy. 200
    iterations were too few: on the cpu profile's features they left the loss up to 1.4e-3
    above its minimum and moved top-1 by up to 0.8 point; all stopped by tolerance within 500."""
    rows = convex_fit(train, evaluation, num_classes, heldout_fraction, seed,
                      torch.device(device))
    history = []
    for decay in weight_decays:
        linear = nn.Linear(train.features.shape[1], num_classes).to(rows.train.device,
                                                                     torch.float64)
        nn.init.zeros_(linear.weight)
        nn.init.zeros_(linear.bias)
        history.append({"weight_decay": decay, "epoch": 1, **rows.fit(linear, decay, max_iter)})
    table = pl.DataFrame(history)
    return ProbeResult(table, select(table, ["weight_decay"], num_classes))


# ---------------------------------------------------------------------------------------------
# faithful: the authors' protocol on frozen backbones and augmented images
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FaithfulProbe:
    """The authors' recipe (REFERENCE.md): BN1d + Linear (N(0, 0.01) weights), SGD lr 0.01,
    momentum 0.9, Nesterov, 28 epochs, x0.1 at epochs 8, 16 and 24, no weight decay on BN.
    `batch_size` is the global batch, split over processes: the authors' scripts run 5 GPUs with
    32 images each, and their BN normalises each GPU's 32 images: `bn_batch` 32 does the same
    whatever the number of processes (None: statistics of the whole global batch). `precision`
    "bf16" runs the frozen backbones under bfloat16 autocast (the heads stay float32)."""

    weight_decays: tuple[float, ...] = PAPER_WEIGHT_DECAYS["imagenet"]
    epochs: int = 28
    milestones: tuple[int, ...] = (8, 16, 24)
    lr: float = 0.01
    momentum: float = 0.9
    batch_size: int = 160
    bn_batch: int | None = 32
    heldout_fraction: float = 0.1
    seed: int = 0
    precision: str = "fp32"
    device: str = "cpu"


class ProbeHeads(nn.Module):
    """One BatchNorm1d + Linear head per weight decay, all reading the same features.

    The features come from frozen backbones and need no gradient, so in training the batch
    statistics are computed once for every head. With `bn_batch` None they are summed over the
    processes that share a global batch: each head normalises as one BatchNorm1d over the whole
    global batch. With `bn_batch` g, each run of g consecutive rows of the global batch (the
    last may be shorter) is normalised with its own statistics and the running statistics
    follow the first run, as the authors' DistributedDataParallel did with g images per GPU
    (rank 0's buffers are broadcast). Either way the result does not depend on the number of
    processes.
    """

    def __init__(self, width: int, num_classes: int, count: int, seed: int = 0,
                 bn_batch: int | None = None) -> None:
        super().__init__()
        self.bn_batch = bn_batch
        self.norms = nn.ModuleList(nn.BatchNorm1d(width) for _ in range(count))
        self.linears = nn.ModuleList(nn.Linear(width, num_classes) for _ in range(count))
        generator = torch.Generator().manual_seed(seed)
        for linear in self.linears:
            nn.init.normal_(linear.weight, std=0.01, generator=generator)
            nn.init.zeros_(linear.bias)

    def batch_statistics(self, features: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean and variance to normalise the rows with (per row or shared), and the mean and
        unbiased variance the running statistics move towards."""
        width = features.shape[1]
        if self.bn_batch is None:
            moments = distributed.all_sum(torch.cat([features.sum(0), features.square().sum(0),
                                          features.new_tensor([len(features)])]).double())
            count = float(moments[-1])
            mean = moments[:width] / count
            variance = (moments[width:2 * width] / count - mean.square()).clamp_min(0.0)
            return (mean.float(), variance.float(), mean.float(),
                    (variance * count / max(count - 1, 1)).float())
        group = torch.arange(len(features), device=features.device) // self.bn_batch
        count = torch.bincount(group).double()[:, None]  # a last, shorter group is its own
        rows = features.double()
        mean = rows.new_zeros(len(count), width).index_add_(0, group, rows) / count
        variance = (rows.new_zeros(len(count), width).index_add_(0, group, rows.square())
                    / count - mean.square()).clamp_min(0.0)
        first = torch.stack([mean[0], variance[0] * count[0] / (count[0] - 1).clamp_min(1)])
        first = first.float()
        if distributed.rank_and_world()[1] > 1:
            dist.broadcast(first, src=0)
        return mean[group].float(), variance[group].float(), first[0], first[1]

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        eps = self.norms[0].eps
        if self.training:
            mean, variance, running_mean, running_var = self.batch_statistics(features)
            normalised = (features - mean) * torch.rsqrt(variance + eps)
            with torch.no_grad():
                for norm in self.norms:
                    norm.running_mean.lerp_(running_mean, norm.momentum)
                    norm.running_var.lerp_(running_var, norm.momentum)
                    norm.num_batches_tracked += 1
        outputs = []
        for norm, linear in zip(self.norms, self.linears):
            if not self.training:
                normalised = ((features - norm.running_mean)
                              * torch.rsqrt(norm.running_var + norm.eps))
            outputs.append(linear(normalised * norm.weight + norm.bias))
        return torch.stack(outputs, dim=1)


def concatenated_features(backbones: Sequence[nn.Module], precision: str = "fp32"
                          ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Frozen backbones in eval mode (their own BN statistics), features concatenated in order,
    as float32."""
    for backbone in backbones:
        backbone.eval().requires_grad_(False)

    def features(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), torch.autocast(images.device.type, torch.bfloat16,
                                             enabled=precision == "bf16"):
            return torch.cat([backbone.features(images).flatten(1).float()
                              for backbone in backbones], 1)

    return features


class GlobalBatches(Sampler[list[tuple[int, int]]]):
    """This process's share of each global batch of a per-epoch seeded shuffle of `indices`, as
    (epoch, index) keys for `kit.data.pipeline.Samples`: the same global batches, augmented the same way,
    whatever the number of processes. An incomplete last global batch is dropped."""

    def __init__(self, indices: torch.Tensor, batch_size: int, seed: int) -> None:
        self.rank, self.world = distributed.rank_and_world()
        if batch_size % self.world or batch_size > len(indices):
            raise ProbeError(f"global batch {batch_size} must be a multiple of the {self.world} "
                             f"process(es) and at most the {len(indices)} training images")
        self.indices, self.batch_size, self.seed, self.epoch = indices, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.indices) // self.batch_size

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = self.indices[torch.randperm(len(self.indices), generator=generator)]
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            batch = order[start:start + self.batch_size]
            share = self.batch_size // self.world  # contiguous, so BN groups stay whole
            yield [(self.epoch, int(i)) for i in batch[self.rank * share:(self.rank + 1) * share]]


def faithful_probe(backbones: Sequence[nn.Module], train_loader: Iterable,
                   heldout_loader: Iterable, eval_loader: Iterable, num_classes: int,
                   config: FaithfulProbe = FaithfulProbe(), progress: bool = True,
                   state_file: Path | None = None, identity: Mapping[str, Any] | None = None
                   ) -> ProbeResult:
    """Train the heads on the (augmented) train loader; evaluate every epoch on both splits.

    The held-out loader must hold training images excluded from `train_loader` (with evaluation
    transforms); the `heldout` rule selects on it. Under torch.distributed each process passes
    its shard of every loader: gradients are averaged by DistributedDataParallel, accuracy
    counts are summed over processes and BN statistics shared as `ProbeHeads` says. With
    `state_file`, the heads, optimizers and accuracies are saved there atomically after every
    epoch (with `identity`, which a resumed run must match) and a rerun resumes after the last
    saved epoch. The train accuracy reported is
    the running one over the epoch's augmented batches.
    """
    device = torch.device(config.device)
    rank, world = distributed.rank_and_world()
    for backbone in backbones:
        backbone.to(device, memory_format=torch.channels_last)
    extract = concatenated_features(backbones, config.precision)
    saved = _saved_state(state_file, identity)
    heads: ProbeHeads | None = None
    model: nn.Module | None = None
    optimizers: list[torch.optim.SGD] = []
    schedulers: list[torch.optim.lr_scheduler.MultiStepLR] = []
    rows: list[dict[str, Any]] = saved["rows"] if saved else []
    count = len(config.weight_decays)

    def build(width: int) -> None:
        nonlocal heads, model
        heads = ProbeHeads(width, num_classes, count, config.seed, config.bn_batch).to(device)
        for norm, linear, decay in zip(heads.norms, heads.linears, config.weight_decays):
            optimizers.append(torch.optim.SGD(
                [{"params": linear.parameters(), "weight_decay": decay},
                 {"params": norm.parameters(), "weight_decay": 0.0}],
                lr=config.lr, momentum=config.momentum, nesterov=True))
        schedulers.extend(torch.optim.lr_scheduler.MultiStepLR(o, list(config.milestones),
                                                               gamma=0.1) for o in optimizers)
        if saved:
            heads.load_state_dict(saved["heads"])
            for part, states in ((optimizers, saved["optimizers"]),
                                 (schedulers, saved["schedulers"])):
                for item, state in zip(part, states):
                    item.load_state_dict(state)
        model = heads if world == 1 else DistributedDataParallel(
            heads, device_ids=[device.index] if device.type == "cuda" else None,
            broadcast_buffers=False)

    def accuracies(loader: Iterable) -> tuple[torch.Tensor, torch.Tensor, int]:
        assert heads is not None
        heads.eval()
        sums = torch.zeros(2 * count + 1, dtype=torch.float64, device=device)
        with torch.no_grad():
            for images, labels in DeviceBatches(loader, device):
                logits = heads(extract(_on(device, images)))
                labels = labels.to(device)
                sums[:count] += topk_correct(logits, labels, 1)
                sums[count:2 * count] += topk_correct(logits, labels, 5)
                sums[-1] += len(labels)
        heads.train()
        sums = distributed.all_sum(sums).cpu()
        return sums[:count], sums[count:2 * count], int(sums[-1])

    first = saved["epoch"] + 1 if saved else 1
    for epoch in tqdm(range(first, config.epochs + 1), desc="faithful probe",
                      disable=not progress or rank != 0):
        sampler = getattr(train_loader, "batch_sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        train_sums = torch.zeros(count + 1, dtype=torch.float64, device=device)
        for images, labels in DeviceBatches(train_loader, device):
            features = extract(_on(device, images))
            if heads is None:
                build(features.shape[1])
            assert model is not None
            labels = labels.to(device)
            logits = model(features)
            loss = sum(F.cross_entropy(logits[:, h], labels) for h in range(count))
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
            train_sums[:count] += topk_correct(logits.detach(), labels, 1)
            train_sums[-1] += len(labels)
        if heads is None:
            raise ProbeError("the training loader yielded no batch")
        for scheduler in schedulers:
            scheduler.step()
        train_sums = distributed.all_sum(train_sums).cpu()
        held1, _, held_n = accuracies(heldout_loader)
        eval1, eval5, eval_n = accuracies(eval_loader)
        if held_n == 0 or eval_n == 0:
            raise ProbeError("the held-out or evaluation loader yielded no sample")
        for h, decay in enumerate(config.weight_decays):
            rows.append({"weight_decay": decay, "epoch": epoch,
                         "train_top1": float(train_sums[h] / train_sums[-1]),
                         "heldout_top1": float(held1[h] / held_n),
                         "eval_top1": float(eval1[h] / eval_n),
                         "eval_top5": float(eval5[h] / eval_n)})
        if state_file is not None and rank == 0:
            with atomic_write(state_file) as handle:
                torch.save({"epoch": epoch, "identity": dict(identity or {}), "rows": rows,
                            "heads": heads.state_dict(),
                            "optimizers": [o.state_dict() for o in optimizers],
                            "schedulers": [s.state_dict() for s in schedulers]}, handle)
    if not rows:
        raise ProbeError("the probe ran no epoch (epochs must be at least 1)")
    history = pl.DataFrame(rows)
    return ProbeResult(history, select(history, ["weight_decay"], num_classes))


def _on(device: torch.device, images: torch.Tensor) -> torch.Tensor:
    """Images (normalised by DeviceBatches) on the device, channels-last when they are image
    batches."""
    if images.ndim == 4:
        return images.to(device, non_blocking=True, memory_format=torch.channels_last)
    return images.to(device, non_blocking=True)


def _saved_state(state_file: Path | None, identity: Mapping[str, Any] | None
                 ) -> dict[str, Any] | None:
    """A previous run's state to resume from, refused when it belongs to another probe."""
    if state_file is None or not state_file.exists():
        return None
    saved = torch.load(state_file, map_location="cpu", weights_only=True)
    if saved["identity"] != dict(identity or {}):
        differing = sorted(key for key in saved["identity"].keys() | dict(identity or {}).keys()
                           if saved["identity"].get(key) != (identity or {}).get(key))
        raise ProbeError(f"{state_file}: holds a probe with different settings "
                         f"({', '.join(differing)}); use another output folder or restore them")
    return saved


# ---------------------------------------------------------------------------------------------
# the authors' probe as a runnable step: `python -m kit.probe faithful ...`, under torchrun too
# ---------------------------------------------------------------------------------------------

def load_data_config(path: Path) -> DataSettings:
    """A dataset description (a `data:` section of a training configuration) from YAML."""
    if not path.is_file():
        raise ParameterError(f"{path}: dataset description not found")
    try:
        return DataSettings(**read_yaml(path))
    except ValidationError as error:
        raise ParameterError(describe_errors(f"invalid dataset description {path}:", DataSettings,
                                             error, {}, str(path))) from None


#: written last by a finished probe: its identity and epochs, so a rerun skips it
FINISHED = "finished.json"


def faithful_identity(checkpoints: Sequence[Path], data_config: DataSettings, num_classes: int,
                      config: FaithfulProbe) -> dict[str, Any]:
    """What makes two probes the same (their checkpoints by content): a saved state or a
    finished result is reused only for the same identity. Epochs and device are left out, so
    more epochs extend a finished probe."""
    settings = {key: value for key, value in asdict(config).items()
                if key not in ("epochs", "device")}
    return json.loads(json.dumps({
        "checkpoints": [file_hash(Path(p)) for p in checkpoints], "num_classes": num_classes,
        "data": data_config.model_dump(mode="json"), **settings}))


def finished_result(output: Path, identity: Mapping[str, Any], epochs: int
                    ) -> ProbeResult | None:
    """The result a previous run of this very probe wrote to `output`, or None."""
    record = Path(output) / FINISHED
    if not record.is_file():
        return None
    done = json.loads(record.read_text())
    if done.get("identity") != dict(identity) or done.get("epochs") != epochs:
        return None
    history = pl.read_csv(Path(output) / "history.csv")
    selected = pl.read_csv(Path(output) / "selected.csv", schema_overrides={"top5": pl.Float64})
    return ProbeResult(history, selected)


def run_faithful(checkpoints: Sequence[Path], data_config: DataSettings, num_classes: int,
                 output: Path, config: FaithfulProbe = FaithfulProbe(), num_workers: int = 0,
                 progress: bool = True) -> ProbeResult:
    """The authors' probe of the concatenated backbones on a dataset: augmented training images
    (the kit's pipeline for the dataset kind), held-out part of train and evaluation split with
    evaluation transforms. Writes `history.csv`, `selected.csv` and `finished.json` to `output`;
    a finished probe is read back, not run again, an interrupted one resumes from
    `output/probe_state.pt`; each process of a torchrun reads its shard."""
    missing = [str(p) for p in checkpoints if not Path(p).is_file()]
    if not checkpoints or missing:
        raise ProbeError(f"checkpoint(s) not found: {', '.join(missing) or 'none given'}")
    output = Path(output)
    identity = faithful_identity(checkpoints, data_config, num_classes, config)
    finished = finished_result(output, identity, config.epochs)
    if finished is not None:
        return finished
    backbones = [load_backbone(Path(p)) for p in checkpoints]
    train_base, eval_base = data.datasets_for(data_config, num_classes)
    from_images = data_config.kind != "synthetic"
    augment = data.resolved_augment(data_config)
    augmented = data.augmentation(augment, data_config.image_size, True, from_images)
    plain = data.augmentation(augment, data_config.image_size, False, from_images)
    kept, held = heldout_indices(len(train_base), config.heldout_fraction, config.seed)
    rank, world = distributed.rank_and_world()
    device = torch.device(config.device)

    def loader(dataset: Dataset, **how: Any) -> DataLoader:
        return DataLoader(dataset, num_workers=num_workers, pin_memory=device.type == "cuda",
                          persistent_workers=num_workers > 0, **how)

    local = config.batch_size // world
    if config.bn_batch is not None and (config.batch_size % world or local % config.bn_batch):
        raise ProbeError(f"the global batch {config.batch_size} over {world} process(es) must "
                         f"give each a multiple of bn_batch {config.bn_batch}")
    train_loader = loader(data.Samples(train_base, augmented, config.seed),
                          batch_sampler=GlobalBatches(kept, config.batch_size, config.seed))
    held_loader = loader(data.Samples(train_base, plain, config.seed), batch_size=local,
                         sampler=[(0, int(i)) for i in held[rank::world]])
    eval_loader = loader(data.Samples(eval_base, plain, config.seed), batch_size=local,
                         sampler=[(0, i) for i in range(rank, len(eval_base), world)])
    with locks.hold(output, "faithful probe") if rank == 0 else contextlib.nullcontext():
        result = faithful_probe(backbones, train_loader, held_loader, eval_loader, num_classes,
                                config, progress, output / "probe_state.pt", identity)
        if rank == 0:
            for name, table in (("history", result.history), ("selected", result.selected)):
                with atomic_write(output / f"{name}.csv") as handle:
                    table.write_csv(handle)
            with atomic_write(output / FINISHED) as handle:
                handle.write(json.dumps({"identity": identity, "epochs": config.epochs},
                                        indent=1).encode())
    return result


def faithful_command(checkpoints: Sequence[Path], data_file: Path, num_classes: int,
                     output: Path, config: FaithfulProbe, num_workers: int, processes: int
                     ) -> list[str]:
    """The command running `run_faithful` as a step of its own: under one standalone torchrun
    with `processes` processes (one per GPU), each reading its shard."""
    arguments = ["kit.probes.probe", "faithful", "--checkpoints", *map(str, checkpoints),
                 "--data", str(data_file), "--num-classes", str(num_classes),
                 "--output", str(output), "--weight-decays", *map(str, config.weight_decays),
                 "--milestones", *map(str, config.milestones)]
    for name in ("epochs", "batch_size", "lr", "heldout_fraction", "seed", "precision",
                 "device"):
        arguments += [f"--{name.replace('_', '-')}", str(getattr(config, name))]
    arguments += ["--bn-batch", str(config.bn_batch or 0), "--workers", str(num_workers)]
    return module_command(arguments, LaunchSettings(backend="torchrun", nproc_per_node=processes),
                          rdzv_id="faithful")


def launch_faithful(checkpoints: Sequence[Path], data_config: DataSettings, num_classes: int,
                    output: Path, config: FaithfulProbe, num_workers: int, processes: int,
                    progress: bool = True) -> ProbeResult:
    """`run_faithful` from a notebook: in this process for one process, else as a torchrun
    of `python -m kit.probe faithful` (DDP) logging to `output/probe.log`; a finished probe is
    read back without starting anything. Interrupted, the torchrun is stopped (its state is
    saved every epoch, so running again resumes)."""
    if processes == 1:
        return run_faithful(checkpoints, data_config, num_classes, output, config, num_workers,
                            progress)
    output = Path(output)
    identity = faithful_identity(checkpoints, data_config, num_classes, config)
    finished = finished_result(output, identity, config.epochs)
    if finished is not None:
        return finished
    output.mkdir(parents=True, exist_ok=True)
    data_file = output / "data.yaml"
    with atomic_write(data_file) as handle:
        handle.write(data_config.model_dump_json().encode())  # JSON is YAML
    command = faithful_command(checkpoints, data_file, num_classes, output, config, num_workers,
                               processes)
    log = output / "probe.log"
    with log.open("w") as handle:
        process = subprocess.Popen(command, env=child_environment(command), cwd=REPO_ROOT,
                                   stdout=handle, stderr=subprocess.STDOUT)
        try:
            code = process.wait()
        except BaseException:
            signal_tree(process, signal.SIGTERM)
            process.wait()
            raise
    finished = finished_result(output, identity, config.epochs)
    if code != 0 or finished is None:
        lines = log.read_text().splitlines()
        errors = list(dict.fromkeys(line for line in lines if line.startswith("error:")))
        raise ProbeError(f"the faithful probe in {output} failed (exit status {code}); see "
                         f"{log}:\n" + "\n".join(errors or lines[-15:]))
    return finished


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.probe",
                                     description="Run a probe as a step of its own.")
    commands = parser.add_subparsers(dest="command", required=True)
    faithful = commands.add_parser("faithful", help="the authors' probe (run it under torchrun "
                                   "for several processes)")
    faithful.add_argument("--checkpoints", type=Path, nargs="+", required=True,
                          help="backbones (kit or AlgoPerf checkpoints), concatenated in order")
    faithful.add_argument("--data", type=Path, required=True,
                          help="YAML dataset description: kind, root, image_size (a data: section)")
    faithful.add_argument("--num-classes", type=int, required=True)
    faithful.add_argument("--output", type=Path, required=True,
                          help="folder for history.csv, selected.csv and the resumable state")
    faithful.add_argument("--grid", choices=sorted(PAPER_WEIGHT_DECAYS),
                          help="the authors' weight-decay grid (default: by the data kind)")
    faithful.add_argument("--weight-decays", type=float, nargs="+",
                          help="a grid of your own instead of the authors'")
    defaults = FaithfulProbe()
    for name in ("epochs", "batch_size", "lr", "heldout_fraction", "seed"):
        faithful.add_argument(f"--{name.replace('_', '-')}", type=type(getattr(defaults, name)),
                              default=getattr(defaults, name))
    faithful.add_argument("--milestones", type=int, nargs="*", default=list(defaults.milestones),
                          help="epochs after which the learning rate is multiplied by 0.1")
    faithful.add_argument("--bn-batch", type=int, default=defaults.bn_batch,
                          help="rows per BN statistics group, as the authors' per-GPU batch "
                          "(0: the whole global batch)")
    faithful.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                          help="bf16 runs the frozen backbones under autocast")
    faithful.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    faithful.add_argument("--workers", type=int, default=0, help="DataLoader workers per process")
    args = parser.parse_args(argv)

    def run() -> None:
        data_config = load_data_config(args.data)
        grid = (tuple(args.weight_decays) if args.weight_decays else
                PAPER_WEIGHT_DECAYS[args.grid or GRID_OF_KIND[data_config.kind]])
        process = start_process(args.device)
        try:
            config = FaithfulProbe(weight_decays=grid, epochs=args.epochs,
                                   milestones=tuple(args.milestones),
                                   batch_size=args.batch_size, bn_batch=args.bn_batch or None,
                                   lr=args.lr, heldout_fraction=args.heldout_fraction,
                                   seed=args.seed, precision=args.precision,
                                   device=str(process.device))
            result = run_faithful(args.checkpoints, data_config, args.num_classes, args.output,
                                  config, args.workers, progress=True)
            if process.main:
                print(result.selected)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    try:
        return exit_code(run)
    except ProbeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
