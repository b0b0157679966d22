"""The authors' probe's training: BN1d + Linear heads on frozen backbones, fed augmented images.

The recipe is the one the authors' released linear-probe script runs for the paper's Section 5.1
(Table 3): frozen backbones in eval mode, one BatchNorm1d + Linear head per weight decay, SGD
with Nesterov momentum, the learning rate x0.1 at milestones, the best evaluation accuracy over
epochs and weight decays reported. Here every head also meets held-out training images, so the
`heldout` rule can choose without the test split (`kit.probes.selection`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Sampler
from tqdm.auto import tqdm

from kit.data.prefetch import DeviceBatches
from kit.files.files import atomic_write
from kit.probes.rows import ProbeError, topk_correct
from kit.probes.selection import ProbeResult, select
from kit.probes.settings import FaithfulProbeSettings
from kit.runtime import distributed

if TYPE_CHECKING:
    from kit.models import KitResNet

Extract = Callable[[torch.Tensor], torch.Tensor]


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

    def __init__(
        self, width: int, num_classes: int, count: int, seed: int = 0, bn_batch: int | None = None
    ) -> None:
        super().__init__()
        self.bn_batch = bn_batch
        self.norms = nn.ModuleList(nn.BatchNorm1d(width) for _ in range(count))
        self.linears = nn.ModuleList(nn.Linear(width, num_classes) for _ in range(count))
        generator = torch.Generator().manual_seed(seed)
        for _, linear in self.layers():
            nn.init.normal_(linear.weight, std=0.01, generator=generator)
            nn.init.zeros_(linear.bias)

    def layers(self) -> list[tuple[nn.BatchNorm1d, nn.Linear]]:
        """Each head's BatchNorm1d and Linear, in order (a ModuleList types its items only as
        Modules)."""
        return [
            (cast(nn.BatchNorm1d, norm), cast(nn.Linear, linear))
            for norm, linear in zip(self.norms, self.linears, strict=True)
        ]

    def batch_statistics(
        self, features: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean and variance to normalise the rows with (per row or shared), and the mean and
        unbiased variance the running statistics move towards."""
        width = features.shape[1]
        if self.bn_batch is None:
            moments = distributed.all_sum(
                torch.cat(
                    [
                        features.sum(0),
                        features.square().sum(0),
                        features.new_tensor([len(features)]),
                    ]
                ).double()
            )
            count = float(moments[-1])
            mean = moments[:width] / count
            variance = (moments[width : 2 * width] / count - mean.square()).clamp_min(0.0)
            return (
                mean.float(),
                variance.float(),
                mean.float(),
                (variance * count / max(count - 1, 1)).float(),
            )
        group = torch.arange(len(features), device=features.device) // self.bn_batch
        sizes = torch.bincount(group).double()[:, None]  # a last, shorter group is its own
        rows = features.double()
        mean = rows.new_zeros(len(sizes), width).index_add_(0, group, rows) / sizes
        variance = (
            rows.new_zeros(len(sizes), width).index_add_(0, group, rows.square()) / sizes
            - mean.square()
        ).clamp_min(0.0)
        first = torch.stack([mean[0], variance[0] * sizes[0] / (sizes[0] - 1).clamp_min(1)])
        first = first.float()
        if distributed.rank_and_world()[1] > 1:
            dist.broadcast(first, src=0)
        return mean[group].float(), variance[group].float(), first[0], first[1]

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        heads = self.layers()
        eps = heads[0][0].eps
        if self.training:
            mean, variance, running_mean, running_var = self.batch_statistics(features)
            normalised = (features - mean) * torch.rsqrt(variance + eps)
            with torch.no_grad():
                for norm, _ in heads:
                    momentum = cast(float, norm.momentum)  # None only for a cumulative average
                    mean_of, variance_of, batches = running_statistics(norm)
                    mean_of.lerp_(running_mean, momentum)
                    variance_of.lerp_(running_var, momentum)
                    batches.add_(1)
        outputs = []
        for norm, linear in heads:
            if not self.training:
                mean_of, variance_of, _ = running_statistics(norm)
                normalised = (features - mean_of) * torch.rsqrt(variance_of + norm.eps)
            outputs.append(linear(normalised * norm.weight + norm.bias))
        return torch.stack(outputs, dim=1)


def running_statistics(norm: nn.BatchNorm1d) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A head's running mean, running variance and batch count: buffers torch types as optional
    (None without track_running_stats, which the heads keep)."""
    mean, variance, batches = norm.running_mean, norm.running_var, norm.num_batches_tracked
    assert mean is not None and variance is not None and batches is not None
    return mean, variance, batches


def concatenated_features(backbones: Sequence[KitResNet], precision: str = "fp32") -> Extract:
    """Frozen backbones in eval mode (their own BN statistics), features concatenated in order,
    as float32."""
    for backbone in backbones:
        backbone.eval().requires_grad_(False)

    def features(images: torch.Tensor) -> torch.Tensor:
        with (
            torch.no_grad(),
            torch.autocast(images.device.type, torch.bfloat16, enabled=precision == "bf16"),
        ):
            return torch.cat(
                [backbone.features(images).flatten(1).float() for backbone in backbones], 1
            )

    return features


class GlobalBatches(Sampler[list[tuple[int, int]]]):
    """This process's share of each global batch of a per-epoch seeded shuffle of `indices`, as
    (epoch, index) keys for `kit.data.pipeline.Samples`: the same global batches, augmented the
    same way, whatever the number of processes. An incomplete last global batch is dropped."""

    def __init__(self, indices: torch.Tensor, batch_size: int, seed: int) -> None:
        self.rank, self.world = distributed.rank_and_world()
        if batch_size % self.world or batch_size > len(indices):
            raise ProbeError(
                f"global batch {batch_size} must be a multiple of the {self.world} "
                f"process(es) and at most the {len(indices)} training images"
            )
        self.indices, self.batch_size, self.seed, self.epoch = indices, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.indices) // self.batch_size

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = self.indices[torch.randperm(len(self.indices), generator=generator)]
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            batch = order[start : start + self.batch_size]
            share = self.batch_size // self.world  # contiguous, so BN groups stay whole
            yield [(self.epoch, int(i)) for i in batch[self.rank * share : (self.rank + 1) * share]]


class HeadTraining:
    """The heads, their optimizers and schedulers (built on the first batch, whose features give
    their width; restored from `saved`, a previous run's state), one epoch of training and the
    accuracy counts of a loader."""

    def __init__(
        self,
        num_classes: int,
        settings: FaithfulProbeSettings,
        weight_decays: Sequence[float],
        saved: Mapping[str, Any] | None,
    ) -> None:
        self.num_classes, self.settings, self.saved = num_classes, settings, saved
        self.weight_decays, self.count = list(weight_decays), len(weight_decays)
        self.device = torch.device(settings.device)
        self.heads: ProbeHeads | None = None
        self.model: nn.Module | None = None
        self.optimizers: list[torch.optim.SGD] = []
        self.schedulers: list[torch.optim.lr_scheduler.MultiStepLR] = []

    def build(self, width: int) -> None:
        """Heads of this width, their SGD (no weight decay on BN) and step schedules."""
        settings = self.settings
        heads = ProbeHeads(
            width, self.num_classes, self.count, settings.seed, settings.bn_batch
        ).to(self.device)
        for (norm, linear), decay in zip(heads.layers(), self.weight_decays, strict=True):
            self.optimizers.append(
                torch.optim.SGD(
                    [
                        {"params": linear.parameters(), "weight_decay": decay},
                        {"params": norm.parameters(), "weight_decay": 0.0},
                    ],
                    lr=settings.lr,
                    momentum=settings.momentum,
                    nesterov=True,
                )
            )
        self.schedulers.extend(
            torch.optim.lr_scheduler.MultiStepLR(o, list(settings.milestones), gamma=0.1)
            for o in self.optimizers
        )
        if self.saved:
            heads.load_state_dict(self.saved["heads"])
            for optimizer, state in zip(self.optimizers, self.saved["optimizers"], strict=True):
                optimizer.load_state_dict(state)
            for scheduler, state in zip(self.schedulers, self.saved["schedulers"], strict=True):
                scheduler.load_state_dict(state)
        self.heads = heads
        self.model = (
            heads
            if distributed.rank_and_world()[1] == 1
            else DistributedDataParallel(
                heads,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                broadcast_buffers=False,
            )
        )

    def epoch(self, loader: Iterable, extract: Extract) -> torch.Tensor:
        """Train every head one epoch; the top-1 counts per head and the sample count, summed
        over the processes (the running accuracy over the epoch's augmented batches)."""
        count, device = self.count, self.device
        sums = torch.zeros(count + 1, dtype=torch.float64, device=device)
        for images, labels in DeviceBatches(loader, device):
            features = extract(_on(device, images))
            if self.heads is None:
                self.build(features.shape[1])
            assert self.model is not None
            labels = labels.to(device)
            logits = self.model(features)
            # a Tensor: the sum's start, 0, is added to at least one head's loss
            loss = cast(
                torch.Tensor, sum(F.cross_entropy(logits[:, h], labels) for h in range(count))
            )
            for optimizer in self.optimizers:
                optimizer.zero_grad()
            loss.backward()
            for optimizer in self.optimizers:
                optimizer.step()
            sums[:count] += topk_correct(logits.detach(), labels, 1)
            sums[-1] += len(labels)
        if self.heads is None:
            raise ProbeError("the training loader yielded no batch")
        for scheduler in self.schedulers:
            scheduler.step()
        return distributed.all_sum(sums).cpu()

    def accuracies(
        self, loader: Iterable, extract: Extract
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Top-1 and top-5 counts per head and the sample count over a loader, summed over the
        processes, with the heads in eval mode."""
        assert self.heads is not None
        count, device, heads = self.count, self.device, self.heads
        heads.eval()
        sums = torch.zeros(2 * count + 1, dtype=torch.float64, device=device)
        with torch.no_grad():
            for images, labels in DeviceBatches(loader, device):
                logits = heads(extract(_on(device, images)))
                labels = labels.to(device)
                sums[:count] += topk_correct(logits, labels, 1)
                sums[count : 2 * count] += topk_correct(logits, labels, 5)
                sums[-1] += len(labels)
        heads.train()
        sums = distributed.all_sum(sums).cpu()
        return sums[:count], sums[count : 2 * count], int(sums[-1])

    def state(
        self, epoch: int, identity: Mapping[str, Any] | None, rows: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """What a rerun resumes from after `epoch`."""
        assert self.heads is not None
        return {
            "epoch": epoch,
            "identity": dict(identity or {}),
            "rows": rows,
            "heads": self.heads.state_dict(),
            "optimizers": [o.state_dict() for o in self.optimizers],
            "schedulers": [s.state_dict() for s in self.schedulers],
        }


def faithful_probe(
    backbones: Sequence[KitResNet],
    train_loader: Iterable,
    heldout_loader: Iterable,
    eval_loader: Iterable,
    num_classes: int,
    settings: FaithfulProbeSettings,
    weight_decays: Sequence[float],
    progress: bool = True,
    state_file: Path | None = None,
    identity: Mapping[str, Any] | None = None,
) -> ProbeResult:
    """Train one head per weight decay on the (augmented) train loader; evaluate every epoch on
    both splits.

    The held-out loader must hold training images excluded from `train_loader` (with evaluation
    transforms); the `heldout` rule selects on it. Under torch.distributed each process passes
    its shard of every loader: gradients are averaged by DistributedDataParallel, accuracy
    counts are summed over processes and BN statistics shared as `ProbeHeads` says. With
    `state_file`, the heads, optimizers and accuracies are saved there atomically after every
    epoch (with `identity`, which a resumed run must match) and a rerun resumes after the last
    saved epoch. The train accuracy reported is the running one over the epoch's augmented
    batches.
    """
    device = torch.device(settings.device)
    for backbone in backbones:
        backbone.to(device, memory_format=torch.channels_last)
    extract = concatenated_features(backbones, settings.precision)
    saved = _saved_state(state_file, identity)
    training = HeadTraining(num_classes, settings, weight_decays, saved)
    rows: list[dict[str, Any]] = saved["rows"] if saved else []
    first = saved["epoch"] + 1 if saved else 1
    main_process = distributed.rank_and_world()[0] == 0
    for epoch in tqdm(
        range(first, settings.epochs + 1),
        desc="faithful probe",
        disable=not progress or not main_process,
    ):
        sampler = getattr(train_loader, "batch_sampler", None)
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        train_sums = training.epoch(train_loader, extract)
        held1, _, held_n = training.accuracies(heldout_loader, extract)
        eval1, eval5, eval_n = training.accuracies(eval_loader, extract)
        if held_n == 0 or eval_n == 0:
            raise ProbeError("the held-out or evaluation loader yielded no sample")
        rows += [
            {
                "weight_decay": decay,
                "epoch": epoch,
                "train_top1": float(train_sums[h] / train_sums[-1]),
                "heldout_top1": float(held1[h] / held_n),
                "eval_top1": float(eval1[h] / eval_n),
                "eval_top5": float(eval5[h] / eval_n),
            }
            for h, decay in enumerate(weight_decays)
        ]
        if state_file is not None and main_process:
            with atomic_write(state_file) as handle:
                torch.save(training.state(epoch, identity, rows), handle)
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


def _saved_state(
    state_file: Path | None, identity: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """A previous run's state to resume from, refused when it belongs to another probe."""
    if state_file is None or not state_file.exists():
        return None
    saved = torch.load(state_file, map_location="cpu", weights_only=True)
    if saved["identity"] != dict(identity or {}):
        differing = sorted(
            key
            for key in saved["identity"].keys() | dict(identity or {}).keys()
            if saved["identity"].get(key) != (identity or {}).get(key)
        )
        raise ProbeError(
            f"{state_file}: holds a probe with different settings "
            f"({', '.join(differing)}); use another output folder or restore them"
        )
    return saved
