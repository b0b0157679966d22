"""The group-sequential rule: judge a condition after each round of replicates and say whether
to stop, with error rates that hold despite the repeated looks.

A condition is judged on the paired per-replicate values of its endpoint against a `margin`,
with a `smallest` effect of interest (kit.stats.outcomes states the fixed-sample reading). A
run with `Rounds` adds replicates in rounds (`first`, then `add` at a time, up to `most`) and
looks after each. At look k, after n_k replicates with mean m and sample spread s, the rule
forms the *repeated confidence interval* m -/+ b_k s / sqrt(n_k) (Jennison and Turnbull, Group
Sequential Methods with Applications to Clinical Trials, 2000, Chapter 9): b_k is the two-sided
alpha-spending boundary of `kit.stats.spending` for the looks made so far, carried from the
normal to the t distribution of n_k - 1 degrees of freedom at the same tail probability (the
variance is estimated; Jennison and Turnbull, Section 14.2, read boundaries this way). Every
interval of the sequence covers the true effect at once with probability about 1 - level
whatever the stopping rule, so:

- `holds` when the interval lies above the margin: under an effect at the margin it happens at
  some look at most about level / 2 of the time;
- `contradicted` when it lies below margin + smallest, excluding an effect of interest: under
  an effect of exactly margin + smallest, at most about level / 2 of the time;
- `no effect of interest` (a stop before the last look, `futility` on): neither, but this look
  could already have detected an effect of `smallest` with probability `FUTILITY_POWER` at the
  spread seen, so more replicates would look for an effect smaller than the one of interest.
  Stopping here can only lower the chance of a false `holds`; what it costs in power the
  simulation (`kit.stats.simulation`) measures;
- `continue` otherwise, and at the last look (`most` replicates) `inconclusive`.

"About": reading a normal boundary through the t distribution is exact for one look but lets
several looks err a little more often than `level`, so the level the boundaries spend is
lowered by a fixed simulation until they do not (`calibrated_level`); the resulting rates are
measured afresh (tests/test_sequential.py, benchmarks/sequential_calibration.py) at the looks
the kit makes. One look is the fixed-sample rule: its multiplier is the t quantile
1 - level / 2 of kit.stats.outcomes.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

from kit.stats.spending import OBRIEN_FLEMING, SPENDING, z_boundaries

#: two-sided level of the repeated intervals, as of the fixed-sample ones
LEVEL = 0.05
#: the probability with which a detectable effect is found
POWER = 0.8
#: the probability with which a look could have found an effect of interest before the rule
#: calls its absence `no effect of interest` (above POWER, so that the stop costs little power)
FUTILITY_POWER = 0.9
#: simulated null runs, and their seed, that calibrate the level spent (fixed, so are the bounds)
CALIBRATION_DRAWS = 200_000
CALIBRATION_SEED = 2506_18221

HOLDS, CONTRADICTED, NO_INTEREST = "holds", "contradicted", "no effect of interest"
CONTINUE, INCONCLUSIVE = "continue", "inconclusive"
#: the judgements that stop a condition before its last look
STOPS = (HOLDS, CONTRADICTED, NO_INTEREST)


@dataclass(frozen=True)
class Rounds:
    """A plan of looks: `first` replicates, then `add` more per round up to `most`, judged at a
    two-sided `level` with `spending`; `futility` stops a condition with no effect of interest.
    `Rounds.fixed(n)` is one look at n replicates, the fixed-sample design."""

    first: int = 3
    add: int = 3
    most: int = 12
    level: float = LEVEL
    spending: str = OBRIEN_FLEMING
    futility: bool = True

    def __post_init__(self) -> None:
        if self.first < 1 or (self.first < 2 and self.most > self.first):
            # one replicate has no spread: a single look at it is judged inconclusive, but a
            # plan of several looks could stop on nothing
            raise ValueError(f"the first round needs at least 2 replicates, got {self.first}")
        if self.most < self.first:
            raise ValueError(f"most ({self.most}) is below the first round ({self.first})")
        if self.add < 1 and self.most > self.first:
            raise ValueError(f"rounds must add at least 1 replicate, got {self.add}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must lie in (0, 1), got {self.level}")
        if self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {', '.join(SPENDING)}")

    @classmethod
    def fixed(cls, replicates: int, level: float = LEVEL) -> Rounds:
        """One look after `replicates`: the fixed-sample design."""
        return cls(first=replicates, add=1, most=replicates, level=level)

    @property
    def looks(self) -> tuple[int, ...]:
        """The replicate counts at which the plan looks, the last being `most`."""
        counts = list(range(self.first, self.most, self.add)) if self.most > self.first else []
        return (*counts, self.most)

    def next_count(self, count: int) -> int:
        """The replicate count of the look after one at `count` (`most` at the latest)."""
        return next((n for n in self.looks if n > count), self.most)

    @property
    def spent_level(self) -> float:
        """The two-sided level the boundaries spend: `level` for one look, else the calibrated
        level at which the plan's t boundaries are crossed under no effect with probability
        `level` (`calibrated_level`)."""
        return calibrated_level(self.looks, self.level, self.spending)

    def z_boundaries(self, counts: tuple[int, ...] | None = None) -> tuple[float, ...]:
        """The normal boundaries at looks after `counts` replicates (the plan's by default)."""
        return z_boundaries(counts or self.looks, self.most, self.spent_level, self.spending)

    def critical(self, counts: tuple[int, ...] | None = None) -> float:
        """The multiplier of s / sqrt(n) at the last of the looks made after `counts`
        replicates (the plan's last by default): its normal boundary read through the t
        distribution of n - 1 degrees of freedom at the same tail probability."""
        counts = counts or self.looks
        return t_critical(self.z_boundaries(counts)[-1], counts[-1])

    def unit_detectable(
        self, counts: tuple[int, ...] | None = None, wanted: float = POWER
    ) -> float:
        """The effect found holding with probability `wanted` at a spread of 1 at that look
        (the detectable effect scales with the spread)."""
        counts = counts or self.looks
        return detectable(1.0, counts[-1], self.critical(counts), wanted)

    def detectable(self, std: float) -> float:
        """The design's detectable effect at spread `std`: the effect its last look finds
        holding with probability `POWER` (the earlier looks only add to that chance, and the
        futility stop takes back less than it adds; the simulation checks both)."""
        return self.unit_detectable() * std


def _null_t(looks: tuple[int, ...]) -> np.ndarray:
    """|t| at each look of `CALIBRATION_DRAWS` simulated runs with no effect (normal noise)."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    values = rng.standard_normal((CALIBRATION_DRAWS, looks[-1]))
    sums, squares = np.cumsum(values, axis=1), np.cumsum(values**2, axis=1)
    found = np.empty((CALIBRATION_DRAWS, len(looks)))
    for k, count in enumerate(looks):
        mean = sums[:, count - 1] / count
        spread = np.sqrt((squares[:, count - 1] - count * mean**2) / (count - 1))
        found[:, k] = np.abs(mean) * math.sqrt(count) / spread
    return found


@functools.lru_cache(maxsize=32)
def calibrated_level(looks: tuple[int, ...], level: float, spending: str) -> float:
    """The two-sided level to spend so that the t boundaries at `looks` are crossed at some
    look under no effect with probability `level`.

    Reading each normal boundary through the t distribution keeps every look's own crossing
    probability, but the t statistics of one run are less tied together across looks than the
    normal ones (each look estimates the spread anew), so with several looks some run crosses
    a little more often than `level` (about 0.053 instead of 0.05 at looks of 3 up to 12). The
    level spent is lowered until a fixed simulation of `CALIBRATION_DRAWS` null runs crosses at
    `level` (bisection; the t statistic under no effect does not depend on the spread, so one
    simulation serves every spread). One look needs no correction: its t boundary is exact."""
    if len(looks) == 1:
        return level
    statistics = _null_t(looks)

    def crossed(spend: float) -> float:
        bounds = z_boundaries(looks, looks[-1], spend, spending)
        critical = np.array([t_critical(z, n) for z, n in zip(bounds, looks, strict=True)])
        return float(np.mean((statistics >= critical).any(axis=1)))

    low, high = level / 4, level
    if crossed(high) <= level:
        return level
    for _ in range(16):
        middle = (low + high) / 2
        low, high = (middle, high) if crossed(middle) <= level else (low, middle)
    return low


def t_critical(z: float, count: int) -> float:
    """The t quantile with `count` - 1 degrees of freedom whose upper tail equals the normal
    tail beyond `z` (infinite for an infinite or a one-replicate boundary)."""
    if not math.isfinite(z) or count < 2:
        return math.inf
    return float(scipy.stats.t.isf(scipy.stats.norm.sf(z), count - 1))


def power(effect: float, std: float, count: int, critical: float) -> float:
    """The probability that m - critical s / sqrt(count) lies above the margin when the true
    effect is `effect` above it and the values' spread `std` (noncentral t)."""
    if count < 2 or not math.isfinite(critical):
        return 0.0
    if std == 0:
        return 1.0 if effect > 0 else 0.0
    with warnings.catch_warnings():
        # far in the tail (a first look's multiplier in the hundreds) scipy's series warns that
        # it stopped short; the value it returns is then a power of about 0, as it should be
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(scipy.stats.nct.sf(critical, count - 1, effect * math.sqrt(count) / std))


def detectable(std: float, count: int, critical: float, wanted: float = POWER) -> float:
    """The effect above the margin found holding with probability `wanted` at one look after
    `count` replicates of spread `std` with this multiplier (infinite when none is)."""
    if count < 2 or not math.isfinite(critical):
        return math.inf
    if std == 0:
        return 0.0
    high = std
    while power(high, std, count, critical) < wanted:
        high *= 2
    return float(
        scipy.optimize.brentq(
            lambda e: power(e, std, count, critical) - wanted, 0.0, high, xtol=1e-9
        )
    )


@dataclass(frozen=True)
class Look:
    """One condition judged at one look: its repeated interval, the effect this look could
    detect at the spread seen, and the `judgement` (see the module docstring)."""

    count: int
    mean: float
    std: float
    critical: float
    low: float
    high: float
    detectable: float
    judgement: str

    @property
    def stops(self) -> bool:
        """Whether this judgement ends the condition's rounds."""
        return self.judgement != CONTINUE


def judge(
    mean: float,
    std: float,
    counts: tuple[int, ...],
    rounds: Rounds,
    margin: float,
    smallest: float,
    bounds: tuple[float, float] = (-math.inf, math.inf),
) -> Look:
    """The condition with `mean` and sample `std` over the last of `counts` (the replicate
    counts of the looks made so far, in order) judged by `rounds`; the interval is clipped to
    `bounds` (the range the endpoint can take, which loses no coverage)."""
    count = counts[-1]
    critical = rounds.critical(counts)
    half = critical * std / math.sqrt(count) if math.isfinite(critical) else math.inf
    low, high = max(mean - half, bounds[0]), min(mean + half, bounds[1])
    found = detectable(std, count, critical)
    last = count >= rounds.most
    if low > margin:
        judgement = HOLDS
    elif high < margin + smallest:
        judgement = CONTRADICTED
    elif last:
        judgement = INCONCLUSIVE
    elif rounds.futility and detectable(std, count, critical, FUTILITY_POWER) <= smallest:
        judgement = NO_INTEREST
    else:
        judgement = CONTINUE
    return Look(count, mean, std, critical, low, high, found, judgement)


def wanted(rounds: Rounds, count: int, last: Look | None) -> int:
    """How many replicates a condition needs after the look `last` made at `count` replicates
    (None before its first look): `count` when that look stopped it, else the next look's."""
    if last is None:
        return rounds.first
    return count if last.stops else rounds.next_count(count)
