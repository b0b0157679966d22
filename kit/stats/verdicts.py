"""Secondary, exploratory verdicts computed from paired differences, never typed: per comparison
(one variant against one reference on one task) a mean difference, a two-sided one-sample t test,
Holm's step-down adjustment over a family of comparisons, and the label the adjusted p-value
supports. No claim rests on these labels: a claim is judged on its pre-stated primary endpoint
(kit.stats.outcomes); these say where, task by task, a difference shows.

The input is one row per (comparison, replicate): the paired difference of a variant and its
reference in one replicate (same seeds, same task), so that the test is exact under the usual
normal model of the differences and a comparison with one replicate is left untested.

Labels. A comparison's differences d_1..d_r (r >= 2) give t = mean / (std / sqrt(r)) with r - 1
degrees of freedom and a two-sided p-value. Within a family of m tested comparisons the p-values
are adjusted by Holm's step-down method (S. Holm, "A simple sequentially rejective multiple test
procedure", Scandinavian Journal of Statistics 6(2), 65-70, 1979): sorted ascending,
p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)), which controls the probability of
any false label in the family (the family-wise error rate) at `level` whatever the dependence
between the comparisons. A comparison is `better` (mean > 0) or `worse` (mean < 0) when its
adjusted p-value is at most `level` (default 0.05), else `no clear difference`; with one
replicate it is `untested (one replicate)` and takes no part in the adjustment. A tested
comparison is `tied` instead, whatever its p-value, where its two means tie: its mean difference
is within the resolution (one evaluation row: below), or both sides sit at the metric's ceiling
(every pair's two accuracies at 100.0 % as printed, where the input says so). A difference of one
evaluation row, or one between two perfect scores, is no difference a reader should act on,
however steady across replicates (a cat1 at 100.0 ± 0.0 beside a cat4 0.3 points below it is not
"worse").

Resolution. Accuracies are counts of evaluation rows, so paired differences can come out exactly
equal and their sample std zero; a test on a zero std would call any nonzero mean significant.
Where the input gives each difference's resolution (the most one evaluation row moves it), the
std the test and the interval use is never below it (as for the primary endpoints,
kit.stats.outcomes); `std` reports the sample std as measured.

Intervals. Each tested comparison gets a two-sided t interval whose width matches its label:
at confidence 1 - level / k, with k = m - i + 1 (the Bonferroni share Holm tested it at, i its
rank by p-value) for a comparison Holm rejects, and k = m (the full Bonferroni width) for one it
keeps. So an interval excludes zero exactly when the label is `better` or `worse` (or `tied`
by the rule above). These are
per-comparison intervals consistent with the labels, not simultaneous intervals for Holm's
procedure (for those see Strassburger and Bretz, Statistics in Medicine 27(24), 2008). An
accuracy difference lies in [-100, 100] points, so intervals are clipped to that range (which
loses no coverage).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl
import scipy.stats

from kit.stats.outcomes import METRIC_RANGE

LEVEL = 0.05
BETTER, WORSE, UNCLEAR, TIED = "better", "worse", "no clear difference", "tied"
UNTESTED = "untested (one replicate)"
#: a comparison reading a probe cell whose held-out choice the evaluation split did not bear out
#: (set by the caller: kit.experiments.timecat.cells.label_flagged)
FLAGGED = "flagged (probe selection)"

_COLUMNS = {
    "mean": pl.Float64,
    "std": pl.Float64,
    "replicates": pl.Int64,
    "low": pl.Float64,
    "high": pl.Float64,
    "p_value": pl.Float64,
    "p_adjusted": pl.Float64,
    "comparisons": pl.Int64,
    "verdict": pl.String,
}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the order given: the i-th smallest of m
    becomes the running maximum of min(1, (m - j + 1) p_(j)) over j <= i."""
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(sorted(range(len(p_values)), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def t_test(mean: float, std: float, count: int) -> float:
    """Two-sided p-value of a one-sample t test that `count` (>= 2) differences with this mean
    and sample std have mean zero; differences all equal give 0 (or 1 when they are zero)."""
    if std == 0 or not math.isfinite(std):
        return 1.0 if mean == 0 else 0.0
    t = mean / (std / math.sqrt(count))
    return float(2 * scipy.stats.t.sf(abs(t), count - 1))


def _p_values(
    means: list[float], stds: list[float], counts: list[int], tested: list[int]
) -> dict[int, float]:
    """`t_test`'s p-value of each of the `tested` rows, the t distribution called once for all
    of them (a summary judges a few dozen comparisons, and one call costs more than the rest of
    a comparison's arithmetic)."""
    regular = [i for i in tested if stds[i] != 0 and math.isfinite(stds[i])]
    t = [abs(means[i] / (stds[i] / math.sqrt(counts[i]))) for i in regular]
    tails = scipy.stats.t.sf(t, [counts[i] - 1 for i in regular]) if regular else []
    found = {i: float(2 * tail) for i, tail in zip(regular, tails, strict=True)}
    # a zero or infinite spread: t_test's exact answer
    return {i: found[i] if i in found else t_test(means[i], stds[i], counts[i]) for i in tested}


def _judge(stats: pl.DataFrame, families: list[list[int]], level: float) -> dict[str, list]:
    """Each family's (`families`: the row indices of `stats` in each) p-values, Holm
    adjustment, label-consistent intervals and labels, as `_COLUMNS`' values by row of
    `stats`; the t distribution is called once for the p-values and once for the intervals."""
    means, floors = stats["mean"].to_list(), stats["_floor"].to_list()
    ceiling = stats["_ceiling"].to_list()
    stds: list[float] = [  # a comparison of one replicate has no std: it is not tested
        math.nan if std is None else max(std, floor)
        for std, floor in zip(stats["std"].to_list(), floors, strict=True)
    ]
    counts = stats["replicates"].to_list()
    tested = [i for i, count in enumerate(counts) if count >= 2]
    p = _p_values(means, stds, counts, tested)
    adjusted: dict[int, float] = {}
    size, share = [0] * len(counts), {}
    for members in families:
        mine = [i for i in members if counts[i] >= 2]
        adjusted.update(zip(mine, holm([p[i] for i in mine]), strict=True))
        rank = {index: r for r, index in enumerate(sorted(mine, key=lambda i: p[i]))}
        for i in members:
            size[i] = len(mine)
        for i in mine:  # the Bonferroni share Holm tested it at where rejected, else m
            share[i] = len(mine) - rank[i] if adjusted[i] <= level else len(mine)
    quantiles = (
        scipy.stats.t.ppf(
            [1 - level / (2 * share[i]) for i in tested], [counts[i] - 1 for i in tested]
        )
        if tested
        else []
    )
    low, high, verdict = [None] * len(counts), [None] * len(counts), [UNTESTED] * len(counts)
    for i, quantile in zip(tested, quantiles, strict=True):
        half = quantile * stds[i] / math.sqrt(counts[i])
        low[i] = max(means[i] - half, METRIC_RANGE[0])
        high[i] = min(means[i] + half, METRIC_RANGE[1])
        rejected = adjusted[i] <= level
        verdict[i] = UNCLEAR if not rejected else BETTER if means[i] > 0 else WORSE
        if ceiling[i] or (floors[i] > 0 and abs(means[i]) <= floors[i]):
            verdict[i] = TIED
    return {
        "low": low,
        "high": high,
        "p_value": [p.get(i) for i in range(len(counts))],
        "p_adjusted": [adjusted.get(i) for i in range(len(counts))],
        "comparisons": size,
        "verdict": verdict,
    }


def verdicts(
    differences: pl.DataFrame,
    by: Sequence[str],
    value: str = "difference",
    family: Sequence[str] = (),
    level: float = LEVEL,
    resolution: str | None = None,
    ceiling: str | None = None,
) -> pl.DataFrame:
    """One row per comparison (the distinct values of `by`, in order of appearance) from one row
    per (comparison, replicate) paired difference in `value` (nulls ignored): `mean`, `std`,
    `replicates`, the label-consistent interval `low`-`high`, `p_value`, `p_adjusted` (Holm over
    the tested comparisons of its family), `comparisons` (the family's size m) and `verdict`.
    Families are the distinct values of the `family` columns (all of `by`'s rows are one family
    when it is empty); `resolution` names a column of each difference's resolution (the least
    std a comparison is judged with, and the difference within which its two means tie);
    `ceiling` names a boolean column saying both values of a pair sit at the metric's ceiling (a
    comparison is at the ceiling when every pair is); see the module docstring for how labels and
    intervals are decided."""
    by = list(by)
    stats = (
        differences.filter(pl.col(value).is_not_null())
        .group_by(by, maintain_order=True)
        .agg(
            pl.col(value).mean().alias("mean"),
            pl.col(value).std().alias("std"),
            pl.len().cast(pl.Int64).alias("replicates"),
            (pl.col(resolution).max() if resolution else pl.lit(0.0)).alias("_floor"),
            (pl.col(ceiling).all() if ceiling else pl.lit(False)).alias("_ceiling"),
        )
    )
    if not stats.height:
        return stats.with_columns(
            *[pl.lit(None, dtype=dtype).alias(name) for name, dtype in _COLUMNS.items()]
        ).select(*by, *_COLUMNS)
    families: dict[tuple, list[int]] = {}  # each family's rows, in order of appearance
    columns = [stats[column].to_list() for column in family]
    keys = list(zip(*columns, strict=True)) if family else [()] * stats.height
    for index, key in enumerate(keys):
        families.setdefault(key, []).append(index)
    judged = _judge(stats, list(families.values()), level)
    return (
        stats.lazy()
        .with_columns(
            pl.Series(name, values, dtype=_COLUMNS[name]) for name, values in judged.items()
        )
        .select(*by, *_COLUMNS)
        .collect()
    )
