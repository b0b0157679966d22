"""The L-BFGS probe: converged float64 multinomial logistic regression on cached features.

Fits of different weight decays are independent: with several devices (`kit.probes.devices`)
each device fits its share of them in its own thread, reading its own copy of the rows. On the
CPU in the reproducible numerics a fit's products run in blocks over the process's threads
(kit.numerics.blocked), with the same bits on any number of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import polars as pl
import torch
import torch.nn.functional as F
from torch import nn

from kit.data.settings import DataSettings
from kit.numerics import blocked
from kit.numerics.threads import numerics_threads
from kit.probes.base import FeatureProbe
from kit.probes.devices import probe_devices, shares, visible_gpus
from kit.probes.rows import (
    FeatureRows,
    ProbeError,
    ShiftedRows,
    Split,
    check_splits,
    chunk_rows,
    heldout_indices,
    labels_of,
    scores,
    standardiser,
)
from kit.probes.selection import ProbeResult, extra_column, select
from kit.probes.settings import TOLERANCE_CHANGE, LbfgsProbeSettings

#: fit rows whose standardised float64 copy takes at most this are copied once for L-BFGS;
#: larger ones (ImageNet's 1.28M x 10,240) are read a chunk at a time in every evaluation
LBFGS_COPY_BYTES = 1 << 30
#: fits on the CPU with at most this many fit-row elements (rows x features) run on one
#: intra-op thread in the fast CPU numerics (kit.numerics.threads): L-BFGS makes some forty small
#: vector operations per iteration, each paying a join of the threads larger than its work.
#: (In the reproducible numerics every fit runs on one intra-op thread, its large products cut
#: into blocks over the process's threads: kit.numerics.blocked)
ONE_THREAD_ELEMENTS = 1 << 23


@dataclass
class ConvexFit:
    """A probe's fit, held-out and evaluation rows (and any extra evaluation splits),
    standardised in float64 with statistics of the fit rows: what an L-BFGS fit and its scoring
    read. Float64 because a float32 fit stops when the loss no longer changes in float32,
    measurably above the minimum (docs/decisions.md, "Float64 L-BFGS as the reference probe")."""

    train: FeatureRows
    evaluation: FeatureRows
    train_labels: torch.Tensor
    eval_labels: torch.Tensor
    kept: torch.Tensor
    held: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    #: extra evaluation splits every head is scored on too, by name
    extra: dict[str, ShiftedRows] = field(default_factory=dict)
    #: the standardised fit rows and labels, made on the first fit when they fit in memory
    copy: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, init=False, repr=False)

    def moved(self, device: torch.device) -> ConvexFit:
        """The same rows read on `device` (its own resident copy where the features fit)."""
        return replace(
            self,
            train=FeatureRows(self.train.features, device),
            evaluation=FeatureRows(self.evaluation.features, device),
            train_labels=self.train_labels.to(device),
            eval_labels=self.eval_labels.to(device),
            mean=self.mean.to(device),
            std=self.std.to(device),
            extra={name: rows.moved(device) for name, rows in self.extra.items()},
        )

    def extra_top1(
        self, logits_of: Callable[[torch.Tensor], torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Every head's top-1 (logits [B, H, C]) on each extra evaluation split, by column."""
        return {extra_column(name): rows.top1(logits_of) for name, rows in self.extra.items()}

    def standardised(self, features: torch.Tensor) -> torch.Tensor:
        """Rows standardised in float64 with the fit rows' statistics (by blocks of rows over
        the lent threads, kit.numerics.blocked)."""
        return blocked.rows(
            lambda rows, into: torch.sub(features[rows], self.mean, out=into).div_(self.std),
            features.new_empty(features.shape, dtype=torch.float64),
        )

    def fit_chunks(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The standardised fit rows and their labels: the copy when it fits, else chunks."""
        dim = self.train.features.shape[1]
        if self.copy is None and len(self.kept) * dim * 8 <= LBFGS_COPY_BYTES:
            self.copy = (
                self.standardised(self.train(self.kept)),  # once, not in every pass
                self.train_labels[self.kept.to(self.train.device)],
            )
        if self.copy is not None:
            yield self.copy
            return
        step = chunk_rows(dim, self.train.device)
        for start in range(0, len(self.kept), step):
            part = self.kept[start : start + step]
            yield (
                self.standardised(self.train(part)),
                self.train_labels[part.to(self.train.device)],
            )

    def fit(
        self,
        linear: nn.Linear,
        decay: float,
        max_iter: int,
        tolerance_change: float = TOLERANCE_CHANGE,
    ) -> dict[str, float]:
        """Minimise the mean cross-entropy plus decay / 2 ||W||^2 from `linear`'s weights
        (float64) until L-BFGS's tolerances stop it (a gradient below 1e-7, or an iteration
        changing the objective or the weights by less than `tolerance_change`); one function
        evaluation is one pass over the fit rows. `max_iter` is only a cap: a fit that hits it
        raises, since its accuracy would be the optimiser's, not the features'. Returns the
        fit's row of scores."""
        optimizer = torch.optim.LBFGS(
            linear.parameters(),
            max_iter=max_iter,
            tolerance_change=tolerance_change,
            line_search_fn="strong_wolfe",
            history_size=20,
        )

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            penalty = decay / 2 * linear.weight.square().sum()
            penalty.backward()
            total = penalty.detach()
            for features, labels in self.fit_chunks():
                logits = blocked.linear(features, linear.weight, linear.bias)
                loss = F.cross_entropy(logits, labels, reduction="sum") / len(self.kept)
                loss.backward()
                total = total + loss.detach()
            return total

        on_cpu = self.train.device.type == "cpu"
        small = len(self.kept) * self.train.features.shape[1] <= ONE_THREAD_ELEMENTS
        with numerics_threads(on_cpu, small):
            optimizer.step(closure)
        state = optimizer.state[linear.weight]
        if state["n_iter"] >= max_iter or state["func_evals"] >= optimizer.defaults["max_eval"]:
            raise ProbeError(
                f"L-BFGS at weight decay {decay} did not converge in {max_iter} "
                "iterations; raise max_iter"
            )
        with numerics_threads(on_cpu):  # one pass over every split, on the process's threads
            return {"iterations": state["n_iter"], **self.scored(linear, decay)}

    def scored(self, linear: nn.Linear, decay: float) -> dict[str, float]:
        """The objective and accuracies of a fitted head on the fit, held-out and evaluation
        rows."""

        def logits_of(features: torch.Tensor) -> torch.Tensor:
            return blocked.linear(self.standardised(features), linear.weight, linear.bias)[:, None]

        fit = scores(logits_of, self.train, self.kept, self.train_labels)
        evaluated = scores(
            logits_of, self.evaluation, torch.arange(len(self.eval_labels)), self.eval_labels
        )
        return {
            "train_loss": float(fit["loss"][0] + decay / 2 * linear.weight.detach().square().sum()),
            "train_top1": float(fit["top1"][0]),
            "heldout_top1": float(
                scores(logits_of, self.train, self.held, self.train_labels)["top1"][0]
            ),
            "eval_top1": float(evaluated["top1"][0]),
            "eval_top5": float(evaluated["top5"][0]),
            **{column: float(top1[0]) for column, top1 in self.extra_top1(logits_of).items()},
        }


def convex_fit(
    train: Split,
    evaluation: Split,
    num_classes: int,
    heldout_fraction: float,
    seed: int,
    device: torch.device,
    extra: Mapping[str, Split] | None = None,
) -> ConvexFit:
    """Check the splits, hold out rows and standardise: what both feature probes start from."""
    extra = extra or {}
    with numerics_threads(device.type == "cpu"):  # chunks side by side on the lent threads
        check_splits([train, evaluation, *extra.values()], num_classes)
        kept, held = heldout_indices(len(labels_of(train)), heldout_fraction, seed)
        train_rows = FeatureRows(train.features, device)
        mean, std = standardiser(train_rows.features, kept, device)
    return ConvexFit(
        train_rows,
        FeatureRows(evaluation.features, device),
        labels_of(train).to(device),
        labels_of(evaluation).to(device),
        kept,
        held,
        mean.double(),
        std.double(),
        {name: ShiftedRows.of(split, num_classes, device) for name, split in extra.items()},
    )


def spread_rows(rows: ConvexFit, devices: Sequence[torch.device]) -> list[ConvexFit]:
    """The rows on each device: `rows` itself on the first, moved copies on the others."""
    return [rows] + [rows.moved(device) for device in devices[1:]]


def spread_fits(
    places: Sequence[ConvexFit],
    starts: Sequence[tuple[nn.Linear, float]],
    max_iter: int,
    tolerance_change: float = TOLERANCE_CHANGE,
) -> list[dict[str, float]]:
    """`ConvexFit.fit` of each (starting head, weight decay), in order; the fits shared out over
    the places' devices, one thread per device (CUDA kernels release the GIL)."""

    def fit_share(place: ConvexFit, share: range) -> list[dict[str, float]]:
        return [
            place.fit(starts[i][0].to(place.train.device), starts[i][1], max_iter, tolerance_change)
            for i in share
        ]

    parts = list(zip(places, shares(len(starts), len(places)), strict=False))
    if len(parts) == 1:
        return fit_share(*parts[0])
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        done = [pool.submit(fit_share, place, share) for place, share in parts]
        return [row for future in done for row in future.result()]


def lbfgs_probe(
    train: Split,
    evaluation: Split,
    num_classes: int,
    settings: LbfgsProbeSettings = LbfgsProbeSettings(),
    extra: Mapping[str, Split] | None = None,
) -> ProbeResult:
    """Full-batch multinomial logistic regression by L-BFGS, one fit per weight decay, on the
    fast probe's held-out split and standardisation. Features are read as the fast probe reads
    them (resident on the device when they fit, else a chunk at a time from host memory or a
    memory map), so a converged fit needs no full-size copy. Each fit runs to its tolerance;
    `max_iter` only guards against one that does not (how many iterations fits took:
    docs/decisions.md, "Float64 L-BFGS as the reference probe").

    On one device the weight decays are fitted as a regularisation path: the strongest from
    zero weights, each weaker one from the previous fit. Every objective is strictly convex, so
    the start changes where L-BFGS stops only within its tolerance; a weak decay, whose fit
    from zero takes the most iterations, starts near its minimum. Over several devices each
    fit starts from zero on its own device. Each fit is scored on the `extra` evaluation splits
    too (`kit.probes.selection.extra_column`)."""
    devices = probe_devices(settings.device, settings.devices, visible_gpus())
    rows = convex_fit(
        train, evaluation, num_classes, settings.heldout_fraction, settings.seed, devices[0], extra
    )
    decays = sorted(settings.weight_decays, reverse=True)
    if len(devices) == 1:
        fits, linear = {}, zero_head(train.features.shape[1], num_classes)
        for decay in decays:
            fits[decay] = rows.fit(
                linear,
                decay,
                settings.max_iter,  # continues from the last
                settings.tolerance_change,
            )
    else:
        starts = [(zero_head(train.features.shape[1], num_classes), d) for d in decays]
        fits = dict(
            zip(
                decays,
                spread_fits(
                    spread_rows(rows, devices), starts, settings.max_iter, settings.tolerance_change
                ),
                strict=True,
            )
        )
    table = pl.DataFrame(
        [{"weight_decay": decay, "epoch": 1, **fits[decay]} for decay in settings.weight_decays]
    )
    return ProbeResult(table, select(table, ["weight_decay"], num_classes, settings.max_gap))


def zero_head(dim: int, num_classes: int) -> nn.Linear:
    """A float64 linear head with zero weights and bias."""
    linear = nn.Linear(dim, num_classes).to(torch.float64)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


class LbfgsProbe(FeatureProbe):
    """The L-BFGS probe as `kit.probes.registry` names it: `lbfgs`."""

    settings = LbfgsProbeSettings

    def describe(self, settings: LbfgsProbeSettings, tasks: Mapping[str, DataSettings]) -> str:
        """What the probe does with `settings`, in one sentence."""
        return (
            f"full-batch L-BFGS on cached features (multinomial logistic regression, "
            f"converged to a change below {settings.tolerance_change:g} per iteration), one fit "
            f"per weight decay {settings.weight_decays}, chosen on "
            f"{settings.heldout_fraction:.0%} held-out training rows or on the "
            "evaluation split"
        )

    def fit(
        self,
        train: Split,
        evaluation: Split,
        num_classes: int,
        settings: LbfgsProbeSettings,
        progress: bool = True,
        extra: Mapping[str, Split] | None = None,
    ) -> ProbeResult:
        """`lbfgs_probe`; it shows no progress bar (one fit per weight decay)."""
        return lbfgs_probe(train, evaluation, num_classes, settings, extra)
