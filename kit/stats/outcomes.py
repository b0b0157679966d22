"""A claim's pre-stated primary endpoint judged in one of three outcomes, with the power to tell.

A claim names its endpoint before the data: one number per replicate, for example catN's top-1
minus cat1's averaged over the transfer tasks (paper Section 5.1, Table 3's mean out-of-distribution
gain), paired by replicate. Its conditions are that endpoint against the baseline and, for the
controls, the same endpoint against each control. Each condition has a *margin* the effect must
clear (0 for "better", minus the smallest effect of interest for "not worse") and is judged from
the two-sided t interval of its paired values at confidence 1 - `LEVEL`:

- `holds`: the interval lies above the margin (a one-sided test at LEVEL / 2);
- `contradicted`: the interval lies below margin + `smallest` (the smallest effect of interest),
  so an effect as large as the one of interest is excluded (a non-superiority reading, one side of
  a TOST), a significant loss included;
- `inconclusive`: anything else: the run cannot tell.

The claim is `reproduced` when every condition holds, `contradicted` when any is contradicted,
`inconclusive` otherwise (one replicate, a control not run, or intervals too wide). `reproduced`
requires every condition at once (an intersection-union test, so no correction is needed for it:
under no effect it comes out at most LEVEL / 2 of the time); `contradicted` is a union over the
conditions, so with k conditions all sitting exactly at their margin plus `smallest` it may come
out up to k x LEVEL / 2 of the time (tests/test_outcomes.py measures both rates by simulation).

A condition may read a *flagged* probe cell (one whose held-out choice among heads rested on the
draw of the held-out rows: kit.experiments.timecat.cells). Its endpoint is evaluation top-1 of
the chosen head, and the evaluation rows took no part in the choice, so a noisy choice can only
pick a head no better, in expectation, than the one a sure choice would have picked: it can
lower the flagged variant's score, never raise it. A flag on the variant's side (`flagged`
"variant") therefore biases the difference down, and a difference that still holds stands; a
flag on the reference's side ("against") biases it up, and a difference that is still
contradicted stands; any other judgement of a flagged condition, and every judgement with both
sides flagged, is inconclusive (`supports`). docs/concepts.md ("Flagged cells") derives it.

Every condition also reports the *minimum detectable effect*: the true effect above its margin
that this run's replicate count and spread would find holding with probability `POWER` (from
the noncentral t distribution), and how many replicates would detect the smallest effect of
interest at the same spread. Accuracy differences live in [-100, 100] points: an interval is
clipped to that range (`clipped` says when), which loses no coverage since the true difference
lies in it.

An accuracy is a count of evaluation rows, so an endpoint moves in steps (one row of 512 is
0.195 points) and a few replicates can come out exactly equal. Their sample spread is then
zero, a t interval of zero width would decide on them, and its coverage would be lost: the
spread cannot be measured below the step. Every interval, minimum detectable effect and
replicate count is therefore computed with the spread taken as at least the endpoint's
*resolution* (`Estimate.spread`: the most one evaluation row moves it), while the sample std
is reported as measured.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import scipy.stats

from kit.readout import numbers
from kit.stats import sequential

#: two-sided level of every primary interval (a 95 % interval)
LEVEL = 0.05
#: the probability with which the minimum detectable effect is found holding
POWER = 0.8
#: the range a difference of two accuracies in points can take
METRIC_RANGE = (-100.0, 100.0)
#: the most replicates `replicates_needed` looks at
MOST_REPLICATES = 1000

REPRODUCED, CONTRADICTED, INCONCLUSIVE = "reproduced", "contradicted", "inconclusive"
HOLDS = "holds"
#: the sides of a condition a flagged probe cell can sit on, and the one judgement each leaves
#: standing (see the module docstring): a low-biased variant's gain, a low-biased reference's loss
FLAG_SUPPORTS = {"variant": HOLDS, "against": CONTRADICTED}


@dataclass(frozen=True)
class Estimate:
    """The paired values of one condition (one per replicate) and their t interval."""

    values: tuple[float, ...]
    mean: float | None
    std: float | None
    low: float | None
    high: float | None
    clipped: bool
    #: the most one evaluation row moves a value (points): the least spread the interval uses
    resolution: float = 0.0

    @property
    def replicates(self) -> int:
        """How many paired values the interval rests on."""
        return len(self.values)

    @property
    def spread(self) -> float | None:
        """The spread inference uses: the sample std, but never below the resolution."""
        return None if self.std is None else max(self.std, self.resolution)


def estimate(
    values: Sequence[float],
    level: float = LEVEL,
    bounds: tuple[float, float] = METRIC_RANGE,
    resolution: float = 0.0,
) -> Estimate:
    """Mean, sample std and the two-sided t interval at confidence 1 - `level` of `values`,
    with the spread taken as at least `resolution` (see the module docstring), clipped to
    `bounds`; one value gives a mean without spread or interval."""
    values = tuple(float(v) for v in values)
    if not values:
        return Estimate(values, None, None, None, None, False, resolution)
    mean = sum(values) / len(values)
    if len(values) < 2:
        return Estimate(values, mean, None, None, None, False, resolution)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = critical(len(values), level) * max(std, resolution) / math.sqrt(len(values))
    low, high = max(mean - half, bounds[0]), min(mean + half, bounds[1])
    clipped = (low, high) != (mean - half, mean + half)
    return Estimate(values, mean, std, low, high, clipped, resolution)


@functools.lru_cache(maxsize=256)
def critical(replicates: int, level: float = LEVEL) -> float:
    """The fixed design's multiplier of s / sqrt(n): the two-sided t quantile at `level` (kept
    once computed: `replicates_needed` asks for it at every count it tries, for every
    condition of every summary)."""
    return float(scipy.stats.t.ppf(1 - level / 2, replicates - 1)) if replicates > 1 else math.inf


def power(effect: float, std: float, replicates: int, level: float = LEVEL) -> float:
    """The probability that the interval of `replicates` paired values of spread `std` lies
    above the margin when the true effect is `effect` above it (noncentral t): the one look of
    kit.stats.sequential.power at the fixed design's multiplier."""
    return sequential.power(effect, std, replicates, critical(replicates, level))


def detectable(
    std: float | None, replicates: int, level: float = LEVEL, wanted: float = POWER
) -> float | None:
    """The minimum detectable effect: the true effect above the margin found holding with
    probability `wanted`, at this spread and replicate count; None with fewer than two
    replicates or no spread known."""
    if std is None or replicates < 2 or not math.isfinite(std):
        return None
    return sequential.detectable(std, replicates, critical(replicates, level), wanted)


def replicates_needed(
    std: float | None, effect: float, level: float = LEVEL, wanted: float = POWER
) -> int | None:
    """The fewest replicates (at least 2) whose minimum detectable effect at spread `std` is at
    most `effect`; None when the spread is unknown or more than `MOST_REPLICATES` are needed."""
    if std is None or effect <= 0:
        return None
    for count in range(2, MOST_REPLICATES + 1):
        if power(effect, std, count, level) >= wanted:
            return count
    return None


@dataclass(frozen=True)
class Condition:
    """One condition of a claim: the endpoint of `variant` against `against` on `tasks` must
    clear `margin`; `must_be` says it in words (`better` or `not worse`)."""

    name: str
    variant: str
    against: str
    tasks: tuple[str, ...]
    estimate: Estimate
    margin: float = 0.0
    must_be: str = "better"
    #: why the condition could not be computed (a control not run, no task shared), if so
    missing: str | None = None
    #: the side whose probe cells are flagged: `variant`, `against`, `both` or None
    flagged: str | None = None
    #: the flagged cells it reads, in words
    flagged_cells: str | None = None


def supports(flagged: str | None, judgement: str) -> bool:
    """Whether a judgement stands with a flagged probe cell on side `flagged` (see the module
    docstring): every judgement without a flag, the one `FLAG_SUPPORTS` names with one."""
    return flagged is None or FLAG_SUPPORTS.get(flagged) == judgement


def flag_words(condition: Condition, judgement: str) -> str | None:
    """What a flag on `condition` does to its interval's `judgement`, in words; None without a
    flag."""
    side = condition.flagged
    if side is None:
        return None
    cells = f"reads flagged probe cells: {condition.flagged_cells}"
    if side == "both":
        return f"{cells} (not judged: flagged on both sides, no judgement can stand)"
    whose = condition.variant if side == "variant" else condition.against
    if supports(side, judgement):
        return (
            f"{cells}; a noisy held-out choice can only lower {whose}'s score, so {judgement} "
            "stands"
        )
    only = FLAG_SUPPORTS[side]
    return f"{cells} (not judged: with {whose}'s cell flagged only {only} can stand)"


def raw_judgement(condition: Condition, smallest: float) -> str:
    """The judgement of the interval alone, flags aside (see the module docstring)."""
    found = condition.estimate
    if condition.missing or found.low is None or found.high is None:
        return INCONCLUSIVE
    if found.low > condition.margin:
        return HOLDS
    if found.high < condition.margin + smallest:
        return CONTRADICTED
    return INCONCLUSIVE


def judge(condition: Condition, smallest: float) -> str:
    """`holds`, `contradicted` or `inconclusive` (see the module docstring): the interval's
    judgement where its flag, if any, lets it stand."""
    found = raw_judgement(condition, smallest)
    return found if supports(condition.flagged, found) else INCONCLUSIVE


@dataclass(frozen=True)
class Outcome:
    """A claim judged: its `status` (reproduced, contradicted or inconclusive), one row per
    condition (`rows`, the stored verdict table's rows) and the reasons in words."""

    claim: str
    status: str
    smallest: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    #: how many rounds and replicates it took and why it stopped, in words to follow the
    #: status (kit.stats.rounds: " after 2 rounds (6 replicates)"); empty when not said
    how: str = ""


def condition_row(
    claim: str, condition: Condition, smallest: float, level: float = LEVEL
) -> dict[str, Any]:
    """One row of the verdict table: the condition, its paired values, interval, judgement,
    minimum detectable effect and the replicates that would detect `smallest`."""
    found = condition.estimate
    return {
        "claim": claim,
        "condition": condition.name,
        "variant": condition.variant,
        "against": condition.against,
        "tasks": list(condition.tasks),
        "must_be": condition.must_be,
        "margin": condition.margin,
        "smallest_effect": smallest,
        "values": list(found.values),
        "replicates": found.replicates,
        "mean": found.mean,
        "std": found.std,
        "resolution": found.resolution,
        "low": found.low,
        "high": found.high,
        "clipped": found.clipped,
        "confidence": 1 - level,
        "judgement": judge(condition, smallest),
        "detectable": detectable(found.spread, found.replicates, level),
        "replicates_needed": replicates_needed(found.spread, smallest, level),
        "missing": condition.missing,
        "flag": flag_words(condition, raw_judgement(condition, smallest)),
    }


def outcome(
    claim: str, conditions: Sequence[Condition], smallest: float, level: float = LEVEL
) -> Outcome:
    """The claim's status from its conditions: reproduced when all hold, contradicted when any
    is contradicted, inconclusive otherwise; an empty list is inconclusive."""
    rows = [condition_row(claim, c, smallest, level) for c in conditions]
    judged = [row["judgement"] for row in rows]
    reasons = [f"{row['condition']}: {row['missing']}" for row in rows if row["missing"]]
    reasons += [
        f"{row['condition']}: {row['flag']}"
        for row in rows
        if row["flag"] and row["judgement"] == INCONCLUSIVE
    ]
    if not rows:
        return Outcome(claim, INCONCLUSIVE, smallest, rows, ["no condition could be computed"])
    if CONTRADICTED in judged:
        status = CONTRADICTED
        reasons += [
            f"{row['condition']}: the interval excludes an effect of {smallest:g} "
            f"points above its margin"
            for row in rows
            if row["judgement"] == CONTRADICTED
        ]
    elif all(j == HOLDS for j in judged):
        status = REPRODUCED
    else:
        status = INCONCLUSIVE
        reasons += [
            f"{row['condition']}: cannot tell at {numbers.counted(row['replicates'], 'replicate')}"
            for row in rows
            if row["judgement"] == INCONCLUSIVE and not row["missing"] and not row["flag"]
        ]
    return Outcome(claim, status, smallest, rows, reasons)


def condition_words(row: dict[str, Any]) -> str:
    """One condition in words: the endpoint, its paired values, its interval and judgement, and
    the effect the run could have detected."""
    where = f"{row['variant']} minus {row['against']}, mean over {', '.join(row['tasks'])}"
    if row["missing"]:
        return f"{row['condition']} ({where}): {row['missing']}"
    values = ", ".join(numbers.signed(v) for v in row["values"])
    mean = "n/a" if row["mean"] is None else numbers.signed(row["mean"])
    text = f"{row['condition']} ({where}): {mean} points (replicates {values})"
    if row["std"] is not None and row["std"] < (row.get("resolution") or 0.0):
        text += (
            f", spread taken as one evaluation row ({numbers.number(row['resolution'], 2)} "
            f"points), not the replicates' {numbers.number(row['std'], 2)}"
        )
    if row["low"] is not None:
        text += (
            f", {100 * row['confidence']:.0f}% {'repeated ' if row.get('repeated') else ''}"
            f"interval {numbers.interval(row['low'], row['high'])}"
            + (" clipped to [-100, 100]" if row["clipped"] else "")
        )
    margin = f"above {row['margin']:+g}" if row["margin"] else "above 0"
    text += f"; must lie {margin}: {row['judgement']}"
    if row.get("flag"):
        text += f" ({row['flag']})"
    if row["detectable"] is not None:
        text += (
            f"; detectable at {100 * POWER:.0f}% power: "
            f"{numbers.number(row['detectable'], 1)} points with {row['replicates']} replicates"
        )
    needed = row["replicates_needed"]
    if row["judgement"] == INCONCLUSIVE:
        text += (
            f"; about {needed} replicates would detect {row['smallest_effect']:g} points "
            "at this spread"
            if needed
            else "; too few replicates to estimate the spread"
        )
    return text


#: the stored verdict table's columns (one row per condition, `condition_row`'s keys)
SCHEMA = {
    "claim": pl.String,
    "condition": pl.String,
    "variant": pl.String,
    "against": pl.String,
    "tasks": pl.List(pl.String),
    "must_be": pl.String,
    "margin": pl.Float64,
    "smallest_effect": pl.Float64,
    "values": pl.List(pl.Float64),
    "replicates": pl.Int64,
    "mean": pl.Float64,
    "std": pl.Float64,
    "resolution": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "clipped": pl.Boolean,
    "confidence": pl.Float64,
    "judgement": pl.String,
    "detectable": pl.Float64,
    "replicates_needed": pl.Int64,
    "missing": pl.String,
    "flag": pl.String,
    # the rounds of its claim's cell (kit.stats.rounds): taken, why they stopped, and whether
    # the interval is a repeated one (several looks) rather than a fixed-sample t interval
    "rounds": pl.Int64,
    "stopped": pl.String,
    "repeated": pl.Boolean,
}


def table(rows: Sequence[dict[str, Any]], extra: dict[str, Any] | None = None) -> pl.DataFrame:
    """The stored verdict table from condition rows (with `extra` columns' types, such as a
    sweep's world seed and budget)."""
    schema = {**(extra or {}), **SCHEMA}
    return pl.DataFrame([{k: row.get(k) for k in schema} for row in rows], schema=schema)


def view(verdicts: pl.DataFrame) -> pl.DataFrame:
    """The verdict table as a reader sees it: human headers, the replicates' values as text,
    the interval as one column, the effect the run could have detected, and, for a condition
    left undecided, the replicates that would detect the smallest effect of interest."""
    keys = [c for c in ("world_seed", "budget") if c in verdicts.columns]
    return verdicts.select(
        *[pl.col(k).alias(k.replace("_", " ")) for k in keys],
        pl.col("claim"),
        pl.col("condition"),
        pl.col("tasks").list.join(", ").alias("endpoint: mean over"),
        pl.col("values")
        .map_elements(lambda v: ", ".join(map(numbers.signed, v)), return_dtype=pl.String)
        .alias("per replicate (points)"),
        pl.col("mean").round(1).alias("mean (points)"),
        pl.struct("low", "high")
        .map_elements(lambda r: numbers.interval(r["low"], r["high"]), return_dtype=pl.String)
        .alias("95% interval"),
        pl.format("{} (above {})", pl.col("must_be"), pl.col("margin").round(1)).alias("must be"),
        pl.col("judgement"),
        pl.col("rounds"),
        pl.col("stopped").alias("stopped by"),
        pl.col("detectable").round(1).alias("detectable at 80% power (points)"),
        # only where the condition is undecided: a decided one needs no more replicates
        pl.when(pl.col("judgement") == INCONCLUSIVE)
        .then(pl.col("replicates_needed"))
        .alias("replicates to detect the smallest effect (where undecided)"),
    )
