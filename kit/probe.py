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
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import polars as pl
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from kit.probe_params import FastProbe

RULES = ("paper", "heldout")


class ProbeError(ValueError):
    """Features or labels a probe cannot use."""


@dataclass(frozen=True)
class Split:
    """Features [N, D] (any float dtype, possibly a memory map) and integer labels [N]."""

    features: torch.Tensor
    labels: torch.Tensor
    name: str


def check_splits(splits: Sequence[Split], num_classes: int) -> None:
    """Refuse what would make a probe silently wrong, naming the split."""
    width = None
    for split in splits:
        if split.features.ndim != 2 or split.features.shape[0] == 0:
            raise ProbeError(f"split '{split.name}': expected a non-empty [N, D] feature matrix, "
                             f"got shape {tuple(split.features.shape)}")
        if split.labels.shape != (split.features.shape[0],):
            raise ProbeError(f"split '{split.name}': {split.features.shape[0]} feature rows but "
                             f"labels of shape {tuple(split.labels.shape)}")
        if width is not None and split.features.shape[1] != width:
            raise ProbeError(f"split '{split.name}': feature dimension {split.features.shape[1]} "
                             f"differs from {width} in the other splits")
        width = split.features.shape[1]
        low, high = int(split.labels.min()), int(split.labels.max())
        if low < 0 or high >= num_classes:
            raise ProbeError(f"split '{split.name}': labels span [{low}, {high}], outside "
                             f"[0, {num_classes - 1}]")
        if not torch.isfinite(split.features.sum(dtype=torch.float64)):  # NaN/inf propagate
            bad = int((~torch.isfinite(split.features)).any(1).sum())
            raise ProbeError(f"split '{split.name}': {bad} feature row(s) hold NaN or inf")


def heldout_split(train: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """A random part of the training split, kept out of training for the `heldout` rule."""
    if not 0 < fraction < 1:
        raise ProbeError(f"heldout fraction must be in (0, 1), got {fraction}")
    order = torch.randperm(len(train.labels), generator=torch.Generator().manual_seed(seed))
    cut = max(1, int(round(fraction * len(order))))
    held, kept = order[:cut].sort().values, order[cut:].sort().values
    return (Split(train.features[kept], train.labels[kept], "train"),
            Split(train.features[held], train.labels[held], "heldout"))


def standardiser(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and standard deviation (one pass; torch's std is slow on wide data)."""
    mean = features.mean(0)
    variance = (features.square().mean(0) - mean.square()).clamp_min(0.0)
    return mean, variance.sqrt().clamp_min(1e-6)


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Correct predictions per head: logits [B, H, C], labels [B] -> counts [H]."""
    top = logits.topk(min(k, logits.shape[-1]), dim=-1).indices
    return (top == labels[:, None, None]).any(-1).sum(0)


def select(history: pl.DataFrame, group: list[str], num_classes: int) -> pl.DataFrame:
    """Apply both selection rules to a table of (grid point, epoch) evaluations. Top-5 is
    reported only with more than 10 classes, as in the paper."""
    rows = []
    for rule, column in (("paper", "eval_top1"), ("heldout", "heldout_top1")):
        best = history.sort([column, "epoch"], descending=[True, False]).row(0, named=True)
        rows.append({"rule": rule, **{k: best[k] for k in group}, "epoch": best["epoch"],
                     "top1": best["eval_top1"],
                     "top5": best["eval_top5"] if num_classes > 10 else None})
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

def fast_probe(train: Split, evaluation: Split, num_classes: int, config: FastProbe = FastProbe(),
               progress: bool = True) -> ProbeResult:
    check_splits([train, evaluation], num_classes)
    fit, held = heldout_split(train, config.heldout_fraction, config.seed)
    device = torch.device(config.device)
    x = fit.features.to(device, torch.float32)
    mean, std = standardiser(x)
    x = (x - mean) / std
    y = fit.labels.to(device)
    grid = list(itertools.product(config.lrs, config.weight_decays))
    heads, dim = len(grid), x.shape[1]
    lr = torch.tensor([g[0] for g in grid], device=device)[:, None, None]
    wd = torch.tensor([g[1] for g in grid], device=device)[:, None, None]
    generator = torch.Generator().manual_seed(config.seed)
    weight = torch.zeros(heads, dim, num_classes, device=device, requires_grad=True)
    bias = torch.zeros(heads, num_classes, device=device, requires_grad=True)
    velocity = [torch.zeros_like(weight), torch.zeros_like(bias)]
    steps_per_epoch = math.ceil(len(y) / config.batch_size)
    total, step, rows = config.epochs * steps_per_epoch, 0, []

    def logits_of(features: torch.Tensor) -> torch.Tensor:
        flat = features @ weight.permute(1, 0, 2).reshape(dim, heads * num_classes)
        return flat.view(-1, heads, num_classes) + bias

    # the held-out and evaluation splits are standardised once, then scored every epoch
    scored = {name: ((split.features.to(device, torch.float32) - mean) / std,
                     split.labels.to(device)) for name, split in (("held", held),
                                                                  ("eval", evaluation))}

    def accuracies(name: str) -> tuple[torch.Tensor, torch.Tensor]:
        z, labels = scored[name]
        correct1 = torch.zeros(heads, device=device)
        correct5 = torch.zeros(heads, device=device)
        with torch.no_grad():
            for start in range(0, len(labels), 4096):
                logits = logits_of(z[start:start + 4096])
                correct1 += topk_correct(logits, labels[start:start + 4096], 1)
                correct5 += topk_correct(logits, labels[start:start + 4096], 5)
        return correct1.cpu() / len(labels), correct5.cpu() / len(labels)

    for epoch in tqdm(range(1, config.epochs + 1), desc="fast probe", disable=not progress):
        order = torch.randperm(len(y), generator=generator).to(device)
        for start in range(0, len(y), config.batch_size):
            batch = order[start:start + config.batch_size]
            logits = logits_of(x[batch])
            loss = F.cross_entropy(logits.permute(0, 2, 1),
                                   y[batch, None].expand(-1, heads), reduction="none")
            loss.mean(0).sum().backward()
            scale = 0.5 * (1 + math.cos(math.pi * step / total))
            with torch.no_grad():
                for param, buffer, decay in ((weight, velocity[0], wd), (bias, velocity[1], 0.0)):
                    grad = param.grad + decay * param
                    buffer.mul_(config.momentum).add_(grad)
                    step_lr = lr * scale if param is weight else (lr * scale)[:, :, 0]
                    param -= step_lr * (grad + config.momentum * buffer)
                    param.grad = None
            step += 1
        held1, _ = accuracies("held")
        eval1, eval5 = accuracies("eval")
        for h, (head_lr, head_wd) in enumerate(grid):
            rows.append({"lr": head_lr, "weight_decay": head_wd, "epoch": epoch,
                         "heldout_top1": float(held1[h]), "eval_top1": float(eval1[h]),
                         "eval_top5": float(eval5[h])})
    history = pl.DataFrame(rows)
    return ProbeResult(history, select(history, ["lr", "weight_decay"], num_classes))


def lbfgs_probe(train: Split, evaluation: Split, num_classes: int,
                weight_decays: Iterable[float] = (1e-6, 1e-5, 1e-4, 1e-3),
                heldout_fraction: float = 0.1, max_iter: int = 200, seed: int = 0,
                device: str = "cpu") -> ProbeResult:
    """Full-batch multinomial logistic regression by L-BFGS, one fit per weight decay: for
    feature sets that fit in memory."""
    check_splits([train, evaluation], num_classes)
    fit, held = heldout_split(train, heldout_fraction, seed)
    x = fit.features.to(device, torch.float32)
    mean, std = standardiser(x)
    x, y = (x - mean) / std, fit.labels.to(device)
    rows = []
    for decay in weight_decays:
        linear = nn.Linear(x.shape[1], num_classes).to(device)
        nn.init.zeros_(linear.weight)
        nn.init.zeros_(linear.bias)
        optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=max_iter,
                                      line_search_fn="strong_wolfe", history_size=20)

        def closure(optimizer: torch.optim.LBFGS = optimizer, linear: nn.Linear = linear,
                    decay: float = decay) -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.cross_entropy(linear(x), y) + decay / 2 * linear.weight.square().sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        row = {"weight_decay": decay, "epoch": 1}
        with torch.no_grad():
            for split, prefix in ((held, "heldout"), (evaluation, "eval")):
                logits = linear((split.features.to(device, torch.float32) - mean) / std)
                labels = split.labels.to(device)
                row[f"{prefix}_top1"] = float(topk_correct(logits[:, None], labels, 1)[0]
                                              / len(labels))
                row[f"{prefix}_top5"] = float(topk_correct(logits[:, None], labels, 5)[0]
                                              / len(labels))
        rows.append(row)
    history = pl.DataFrame(rows).drop("heldout_top5")
    return ProbeResult(history, select(history, ["weight_decay"], num_classes))


# ---------------------------------------------------------------------------------------------
# faithful: the authors' protocol on frozen backbones and augmented images
# ---------------------------------------------------------------------------------------------

#: the authors' weight-decay grids per evaluation dataset (REFERENCE.md)
PAPER_WEIGHT_DECAYS = {
    "imagenet": (1e-4, 5e-4),
    "inat18": (1e-6, 1e-5, 1e-4),
    "cifar": (1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2),
}


@dataclass(frozen=True)
class FaithfulProbe:
    """The authors' recipe (REFERENCE.md): BN1d + Linear (N(0, 0.01) weights), SGD lr 0.01,
    momentum 0.9, Nesterov, 28 epochs, x0.1 at epochs 8, 16 and 24, no weight decay on BN."""

    weight_decays: tuple[float, ...] = PAPER_WEIGHT_DECAYS["imagenet"]
    epochs: int = 28
    milestones: tuple[int, ...] = (8, 16, 24)
    lr: float = 0.01
    momentum: float = 0.9
    device: str = "cpu"


class ProbeHeads(nn.Module):
    """One BatchNorm1d + Linear head per weight decay, all reading the same features."""

    def __init__(self, width: int, num_classes: int, count: int) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.BatchNorm1d(width) for _ in range(count))
        self.linears = nn.ModuleList(nn.Linear(width, num_classes) for _ in range(count))
        for linear in self.linears:
            nn.init.normal_(linear.weight, std=0.01)
            nn.init.zeros_(linear.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.stack([linear(norm(features))
                            for norm, linear in zip(self.norms, self.linears)], dim=1)


def concatenated_features(backbones: Sequence[nn.Module]) -> Callable[[torch.Tensor],
                                                                       torch.Tensor]:
    """Frozen backbones in eval mode (their own BN statistics), features concatenated in order."""
    for backbone in backbones:
        backbone.eval().requires_grad_(False)

    def features(images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([backbone.features(images).flatten(1) for backbone in backbones], 1)

    return features


def faithful_probe(backbones: Sequence[nn.Module], train_loader: Iterable,
                   heldout_loader: Iterable, eval_loader: Iterable, num_classes: int,
                   config: FaithfulProbe = FaithfulProbe(), progress: bool = True
                   ) -> ProbeResult:
    """Train the heads on the (augmented) train loader; evaluate every epoch on both splits.

    The held-out loader must hold training images excluded from `train_loader` (with evaluation
    transforms); the `heldout` rule selects on it.
    """
    device = torch.device(config.device)
    for backbone in backbones:
        backbone.to(device)
    extract = concatenated_features(backbones)
    heads: ProbeHeads | None = None
    optimizers: list[torch.optim.SGD] = []
    schedulers = []
    rows = []

    def accuracies(loader: Iterable) -> tuple[torch.Tensor, torch.Tensor, int]:
        assert heads is not None
        heads.eval()
        correct1 = torch.zeros(len(config.weight_decays))
        correct5 = torch.zeros(len(config.weight_decays))
        seen = 0
        with torch.no_grad():
            for images, labels in loader:
                logits = heads(extract(images.to(device))).cpu()
                correct1 += topk_correct(logits, labels, 1)
                correct5 += topk_correct(logits, labels, 5)
                seen += len(labels)
        heads.train()
        return correct1, correct5, seen

    for epoch in tqdm(range(1, config.epochs + 1), desc="faithful probe", disable=not progress):
        for images, labels in train_loader:
            features = extract(images.to(device))
            if heads is None:
                heads = ProbeHeads(features.shape[1], num_classes,
                                   len(config.weight_decays)).to(device)
                for norm, linear, decay in zip(heads.norms, heads.linears,
                                               config.weight_decays):
                    optimizers.append(torch.optim.SGD(
                        [{"params": linear.parameters(), "weight_decay": decay},
                         {"params": norm.parameters(), "weight_decay": 0.0}],
                        lr=config.lr, momentum=config.momentum, nesterov=True))
                schedulers = [torch.optim.lr_scheduler.MultiStepLR(o, list(config.milestones),
                                                                   gamma=0.1)
                              for o in optimizers]
            logits = heads(features)
            labels = labels.to(device)
            loss = sum(F.cross_entropy(logits[:, h], labels) for h in range(logits.shape[1]))
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
        if heads is None:
            raise ProbeError("the training loader yielded no batch")
        for scheduler in schedulers:
            scheduler.step()
        held1, _, held_n = accuracies(heldout_loader)
        eval1, eval5, eval_n = accuracies(eval_loader)
        if held_n == 0 or eval_n == 0:
            raise ProbeError("the held-out or evaluation loader yielded no sample")
        for h, decay in enumerate(config.weight_decays):
            rows.append({"weight_decay": decay, "epoch": epoch,
                         "heldout_top1": float(held1[h] / held_n),
                         "eval_top1": float(eval1[h] / eval_n),
                         "eval_top5": float(eval5[h] / eval_n)})
    history = pl.DataFrame(rows)
    return ProbeResult(history, select(history, ["weight_decay"], num_classes))
