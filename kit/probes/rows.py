"""Feature rows as the feature probes read them: splits, checks, standardisation and scores, and
the extra evaluation splits a fitted head is scored on besides its own (`ShiftedRows`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import copy as shallow
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from kit.numerics import blocked
from kit.numerics.threads import each_block, lent_threads
from kit.readout.numbers import counted


class ProbeError(ValueError):
    """Features or labels a probe cannot use."""


@dataclass(frozen=True)
class Split:
    """Features [N, D] and integer labels [N]. Features may be a tensor or a NumPy array such as
    a `kit.feature_cache.FeatureSet` memory map: probes read them in chunks and never copy them
    whole, so fp16 features stay fp16 and an ImageNet-sized set need not fit in memory."""

    features: torch.Tensor | np.ndarray
    labels: torch.Tensor | np.ndarray
    name: str
    #: the classes a prediction on this split is taken among (ImageNet-R's 200 of ImageNet's
    #: 1,000: the argmax over their logits); None: every class the probe has
    classes: tuple[int, ...] | None = None


def labels_of(split: Split) -> torch.Tensor:
    """A split's labels as an int64 tensor."""
    return torch.as_tensor(
        np.asarray(split.labels) if isinstance(split.labels, np.ndarray) else split.labels
    ).long()


def chunk_rows(width: int, device: torch.device) -> int:
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
        labels = labels_of(split)
        if split.features.ndim != 2 or split.features.shape[0] == 0:
            raise ProbeError(
                f"split '{split.name}': expected a non-empty [N, D] feature matrix, "
                f"got shape {tuple(split.features.shape)}"
            )
        if labels.shape != (split.features.shape[0],):
            raise ProbeError(
                f"split '{split.name}': {split.features.shape[0]} feature rows but "
                f"labels of shape {tuple(labels.shape)}"
            )
        if width is not None and split.features.shape[1] != width:
            raise ProbeError(
                f"split '{split.name}': feature dimension {split.features.shape[1]} "
                f"differs from {width} in the other splits"
            )
        width = split.features.shape[1]
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            raise ProbeError(
                f"split '{split.name}': labels span [{low}, {high}], outside [0, {num_classes - 1}]"
            )
        if split.classes is not None and not torch.isin(labels, torch.tensor(split.classes)).all():
            raise ProbeError(
                f"split '{split.name}': labels outside the classes its predictions are taken among"
            )
        bad = _non_finite_rows(split.features)
        if bad:
            raise ProbeError(f"split '{split.name}': NaN or inf in {counted(bad, 'feature row')}")


def _non_finite_rows(features: torch.Tensor | np.ndarray) -> int:
    """How many rows hold NaN or inf, read a chunk at a time (chunks side by side on the threads
    `kit.numerics.threads.numerics_threads` lends; a count has no rounding to depend on them). A
    chunk's sum in its own precision (float32 at least) passes it: NaN and inf carry through a
    sum, and a finite chunk whose sum overflows is counted row by row like a non-finite one, so
    the count is exact either way, for one pass without a float64 copy."""
    rows = features.shape[0]
    step = chunk_rows(features.shape[1], torch.device("cpu"))
    starts = range(0, rows, step)
    bad = [0] * len(starts)

    def count(i: int) -> None:
        chunk = features[starts[i] : starts[i] + step]  # a tensor's rows: a view, no gather
        if isinstance(chunk, np.ndarray):
            chunk = torch.from_numpy(np.array(chunk))  # a memory map's: read into memory
        if not torch.isfinite(chunk.sum(dtype=torch.promote_types(chunk.dtype, torch.float32))):
            bad[i] = int((~torch.isfinite(chunk)).any(1).sum())

    each_block(count, len(starts))
    return sum(bad)


def heldout_indices(rows: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted (kept, held) row indices: a random part of the training split kept out of
    training for the `heldout` rule."""
    if not 0 < fraction < 1:
        raise ProbeError(f"heldout fraction must be in (0, 1), got {fraction}")
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    cut = max(1, int(round(fraction * rows)))
    return order[cut:].sort().values, order[:cut].sort().values


def standardiser(
    features: torch.Tensor | np.ndarray,
    index: torch.Tensor | None = None,
    device: torch.device = torch.device("cpu"),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean and standard deviation over the rows `index` (default all), read in
    chunks with float64 accumulators: one pass, and no full-size temporary. The chunks' sums
    are added in the chunks' order; as many chunks as `kit.numerics.threads.numerics_threads` lends
    threads are read and summed side by side, which changes when a chunk is summed, not its
    bits."""
    index = torch.arange(features.shape[0]) if index is None else index
    total = torch.zeros(features.shape[1], dtype=torch.float64, device=device)
    squares = torch.zeros_like(total)
    step = chunk_rows(features.shape[1], device)
    starts = range(0, len(index), step)
    wave = lent_threads()
    for first in range(0, len(starts), wave):
        parts = _chunk_sums(features, index, starts[first : first + wave], step, device)
        for chunk_total, chunk_squares in parts:
            total += chunk_total
            squares += chunk_squares
    mean = total / len(index)
    variance = (squares / len(index) - mean.square()).clamp_min(0.0)
    return mean.float(), variance.sqrt().clamp_min(1e-6).float()


def _chunk_sums(
    features: torch.Tensor | np.ndarray,
    index: torch.Tensor,
    starts: Sequence[int],
    step: int,
    device: torch.device,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-feature float64 sums and sums of squares of the chunks of `index` at `starts`, in
    that order, computed side by side on the lent threads."""
    done: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def summed(i: int) -> None:
        chunk = read_rows(features, index[starts[i] : starts[i] + step]).to(device, torch.float64)
        done[i] = (chunk.sum(0), chunk.square_().sum(0))  # squared in place: no second copy

    each_block(summed, len(starts))
    return [done[i] for i in range(len(starts))]


class FeatureRows:
    """A split's features where the probe reads them, as float32 rows on the device: the fp16 (or
    whatever) matrix is moved to the device once when it takes at most 70% of its free memory
    (heads and chunks need the rest), otherwise every read gathers its rows from host memory or
    the memory map. `standardised` gives the same rows read standardised."""

    def __init__(self, features: torch.Tensor | np.ndarray, device: torch.device) -> None:
        self.features, self.device = features, device
        #: (mean, scale) [D] in float32 where reads are standardised (`standardised`)
        self.shift: tuple[torch.Tensor, torch.Tensor] | None = None
        #: every row standardised, where `standardised` made the copy, and where each row is in it
        self.copy: torch.Tensor | None = None
        self.position: torch.Tensor | None = None
        if device.type == "cuda":
            size = features.shape[0] * features.shape[1] * features.dtype.itemsize
            if size <= 0.7 * torch.cuda.mem_get_info(device)[0]:
                resident = torch.empty(
                    features.shape, device=device, dtype=read_rows(features, torch.arange(1)).dtype
                )
                step = chunk_rows(features.shape[1], device)
                for start in range(0, features.shape[0], step):
                    index = torch.arange(start, min(start + step, features.shape[0]))
                    resident[start : start + len(index)] = read_rows(features, index).to(device)
                self.features = resident

    def standardised(
        self, mean: torch.Tensor, scale: torch.Tensor, order: torch.Tensor | None
    ) -> FeatureRows:
        """The same rows read as (x - mean) * scale in float32 (mean and scale [D] float32):
        from a standardised copy of every row made here, its rows in `order` (a permutation of
        them), when `order` is given, else gathered and standardised block by block at each read
        (one pass over the rows, each block standardised while it is in cache). A read of rows
        that the copy holds side by side is a view of it, any other one gather. Every element is
        made by the same two float32 operations either way, so the rows have the same bits."""
        rows = shallow(self)  # the same features (a GPU's resident copy too), read otherwise
        rows.shift = (mean.to(self.device, torch.float32), scale.to(self.device, torch.float32))
        rows.copy = rows.position = None
        if order is not None:
            whole = torch.empty(self.features.shape, device=self.device)
            step = chunk_rows(self.features.shape[1], self.device)
            for start in range(0, len(whole), step):
                part = whole[start : start + step]
                rows.read_into(order[start : start + len(part)], part)
            rows.copy = whole
            rows.position = torch.empty_like(order).scatter_(0, order, torch.arange(len(order)))
            rows.position = rows.position.to(self.device)
        return rows

    def __call__(self, index: torch.Tensor) -> torch.Tensor:
        """The rows `index` (sorted, on the host)."""
        if self.shift is None:
            return self._raw(index)
        if self.copy is not None and self.position is not None:
            at = self.position[index.to(self.device)]
            if len(at) and int(at[-1]) - int(at[0]) == len(at) - 1 and bool((at.diff() == 1).all()):
                return self.copy[int(at[0]) : int(at[0]) + len(at)]
            return _gathered(self.copy, at)
        return self.read_into(
            index, torch.empty(len(index), self.features.shape[1], device=self.device)
        )

    def _raw(self, index: torch.Tensor) -> torch.Tensor:
        """The rows `index` as they are, in float32."""
        features = self.features
        if isinstance(features, torch.Tensor) and features.device == self.device:
            return _gathered(features, index.to(self.device)).float()
        return read_rows(features, index).to(self.device, torch.float32)

    def read_into(self, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """`out` [len(index), D] float32, filled with the standardised rows `index`, by blocks
        of rows over the lent threads (kit.numerics.blocked.rows)."""
        assert self.shift is not None, "rows read standardised without statistics"
        mean, scale = self.shift
        features = self.features
        if isinstance(features, torch.Tensor) and features.device == self.device:
            index = index.to(self.device)

            def gathered(rows: slice, into: torch.Tensor) -> None:
                if features.dtype == torch.float32:
                    raw = torch.index_select(features, 0, index[rows], out=into)
                else:
                    raw = torch.index_select(features, 0, index[rows]).float()
                _standardise(raw, mean, scale, into)

            return blocked.rows(gathered, out)
        raw = self._raw(index)
        return blocked.rows(lambda rows, into: _standardise(raw[rows], mean, scale, into), out)


def _gathered(source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The rows `index` of `source`, gathered by blocks of rows over the lent threads."""
    return blocked.rows(
        lambda rows, into: torch.index_select(source, 0, index[rows], out=into),
        source.new_empty(len(index), source.shape[1]),
    )


def _standardise(
    raw: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor, into: torch.Tensor
) -> None:
    """`into` = (raw - mean) * scale, by the two float32 operations every standardised read
    makes (`raw` may be `into` itself)."""
    torch.mul(torch.sub(raw, mean, out=into), scale, out=into)


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Correct predictions per head: logits [B, H, C], labels [B] -> counts [H]."""
    top = logits.topk(min(k, logits.shape[-1]), dim=-1).indices
    return (top == labels[:, None, None]).any(-1).sum(0)


def top_hits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Top-1 and top-5 correct predictions per head [2, H] of logits [B, H, C], counted by
    blocks of rows (kit.numerics.blocked.counts)."""
    return blocked.counts(
        lambda rows: torch.stack([topk_correct(logits[rows], labels[rows], k) for k in (1, 5)]),
        logits,
    )


def scores(
    logits_of: Callable[[torch.Tensor], torch.Tensor],
    read: FeatureRows,
    index: torch.Tensor,
    labels: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Top-1, top-5 and mean cross-entropy per head (logits [B, H, C]) over the rows `index`,
    read in chunks, without gradients."""
    sums: torch.Tensor | None = None
    with torch.no_grad():
        chunk = chunk_rows(read.features.shape[1], read.device)
        for start in range(0, len(index), chunk):
            part = index[start : start + chunk]
            logits, target = logits_of(read(part)), labels[part.to(read.device)]
            heads = logits.shape[1]
            counts = torch.stack(
                [
                    *top_hits(logits, target).double(),
                    F.nll_loss(  # F.cross_entropy's own two steps, the first cut into blocks
                        blocked.log_softmax(logits.permute(0, 2, 1), 1),
                        target[:, None].expand(-1, heads),
                        reduction="none",
                    )
                    .sum(0)
                    .double(),
                ]
            )
            sums = counts if sums is None else sums + counts
    assert sums is not None, "scores of no rows"
    top1, top5, loss = (sums / len(index)).cpu()
    return {"top1": top1, "top5": top5, "loss": loss}


@dataclass(frozen=True)
class ShiftedRows:
    """An extra evaluation split where a probe reads it: its rows, its labels on the device, and
    the additive mask [C] that keeps a prediction among its classes (0 on them, -inf elsewhere;
    None when every class is open)."""

    rows: FeatureRows
    labels: torch.Tensor
    mask: torch.Tensor | None

    @classmethod
    def of(cls, split: Split, num_classes: int, device: torch.device) -> ShiftedRows:
        """`split` read on `device`, its `classes` as the mask."""
        mask = None
        if split.classes is not None:
            mask = torch.full((num_classes,), float("-inf"), device=device)
            mask[list(split.classes)] = 0.0
        return cls(FeatureRows(split.features, device), labels_of(split).to(device), mask)

    def moved(self, device: torch.device) -> ShiftedRows:
        """The same split read on `device`."""
        return ShiftedRows(
            FeatureRows(self.rows.features, device),
            self.labels.to(device),
            None if self.mask is None else self.mask.to(device),
        )

    def top1(self, logits_of: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Every head's top-1 (logits [B, H, C]), each prediction taken among the classes."""

        def kept(features: torch.Tensor) -> torch.Tensor:
            logits = logits_of(features)
            return logits if self.mask is None else logits + self.mask.to(logits.dtype)

        return scores(kept, self.rows, torch.arange(len(self.labels)), self.labels)["top1"]
