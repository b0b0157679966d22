"""Which probe cells can support a comparison: the one rule the claims, the gains tables, the
summaries, the notebooks and the report all read.

A probe cell is one variant's probe on one task, over the replicates. Its accuracy is the
evaluation top-1 of the head its selection rule chose. Under the held-out rule (the rule the
cpu and sweep profiles' claims read) the evaluation split took no part in the choice, so that
accuracy measures the chosen head without optimism, however far the head fits its own rows: a
large train/eval gap is ordinary for 512 features on 2,048 rows and by itself says nothing
about a comparison. It is shown beside the cell, as a description.

What can make a cell read the selection rather than the representation is a choice the
held-out rows could not make: the held-out rows are a sample of the same distribution as the
evaluation split, so the chosen head's top-1 on them should match its evaluation top-1 up to
sampling noise and the small optimism of picking the best of a few heads. When it exceeds it by
more than that, the choice rested on the draw of those rows. The *selection optimism* of a
replicate is the chosen head's held-out top-1 minus its evaluation top-1 (points); a cell is
**flagged** when its replicates show, by the one-sided 97.5% lower bound of their t interval
(the spread taken as at least one evaluation row, as for the claims), a mean selection optimism
above `max_probe_optimism` points. With one replicate no cell can be flagged (nor any claim
decided). The paper rule chooses on the evaluation split itself, so its optimism is measured
by that rule's difference from the held-out rule, not here.

A flagged cell's evaluation top-1 can only be lower, in expectation, than a sure choice would
have made it (the evaluation rows took no part in the choice), so a claim's condition that reads
one keeps the judgement that bias cannot have made: a gain that holds with the variant's cell
flagged, a loss that is contradicted with the reference's flagged (kit.stats.outcomes; docs:
Concepts, "Flagged cells"); anything else on it is not judged, and the rounds go on where more
replicates could clear the flag. A secondary gain on a flagged cell is labelled
`flagged (probe selection)` and counted nowhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import polars as pl
import scipy.stats

from kit.stats import verdicts

#: the one-sided level of a cell's flag (the lower end of a two-sided 95% interval)
LEVEL = 0.025
#: a cell's table: columns and types
SCHEMA = {
    "variant": pl.String,
    "task": pl.String,
    "replicates": pl.Int64,
    "train %": pl.Float64,
    "heldout %": pl.Float64,
    "eval %": pl.Float64,
    "train/eval gap": pl.Float64,
    "optimism": pl.Float64,
    "optimism low": pl.Float64,
    "flagged": pl.Boolean,
}


@functools.lru_cache(maxsize=64)
def _quantile(count: int) -> float:
    """The one-sided (1 - LEVEL) t quantile of a mean of `count` values (kept once computed:
    every cell of every summary asks for it)."""
    return float(scipy.stats.t.ppf(1 - LEVEL, count - 1))


def _lower_bound(mean: float, std: float | None, count: int, floor: float) -> float | None:
    """The one-sided (1 - LEVEL) lower bound of a mean of `count` values of sample spread `std`
    (never below `floor`); None with fewer than two values."""
    if count < 2 or std is None or math.isnan(std):
        return None
    spread = max(std, floor)
    return mean - _quantile(count) * spread / math.sqrt(count)


def probe_cells(results: pl.DataFrame, rule: str, max_optimism: float | None) -> pl.DataFrame:
    """One row per cell (variant, task) of `rule`: replicates, mean top-1 % on the probe's own
    rows, on the held-out rows that chose the head and on the evaluation split, the train/eval
    gap, the mean selection optimism (held-out minus evaluation) and its lower bound, and
    whether the cell is `flagged` (never when `max_optimism` is None, under the paper rule, or
    for results that do not record the chosen head's held-out top-1)."""
    chosen = results.filter(pl.col("rule") == rule)
    if not chosen.height:
        return pl.DataFrame(schema=SCHEMA)
    has = {c: c in chosen.columns for c in ("train_top1", "heldout_top1", "eval_rows")}
    null = pl.lit(None, dtype=pl.Float64)
    optimism = 100 * (pl.col("heldout_top1") - pl.col("top1")) if has["heldout_top1"] else null
    cells = chosen.group_by("variant", "task", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("replicates"),
        (100 * pl.col("train_top1").mean() if has["train_top1"] else null).alias("train %"),
        (100 * pl.col("heldout_top1").mean() if has["heldout_top1"] else null).alias("heldout %"),
        (100 * pl.col("top1").mean()).alias("eval %"),
        optimism.mean().alias("optimism"),
        optimism.std().alias("_std"),
        (100 / pl.col("eval_rows").min() if has["eval_rows"] else pl.lit(0.0)).alias("_floor"),
    )
    lows = [
        None
        if row["optimism"] is None
        else _lower_bound(row["optimism"], row["_std"], row["replicates"], row["_floor"])
        for row in cells.iter_rows(named=True)
    ]
    judged = max_optimism is not None and rule != "paper"
    return (
        cells.with_columns(
            (pl.col("train %") - pl.col("eval %")).alias("train/eval gap"),
            pl.Series("optimism low", lows, dtype=pl.Float64),
        )
        .with_columns(
            (
                (pl.col("optimism low") > (max_optimism if judged else math.inf)).fill_null(False)
            ).alias("flagged")
        )
        .select(list(SCHEMA))
    )


def flagged(cells: pl.DataFrame) -> set[tuple[str, str]]:
    """The flagged cells as (variant, task) pairs."""
    return {
        (r["variant"], r["task"]) for r in cells.filter(pl.col("flagged")).iter_rows(named=True)
    }


def read_flagged(
    marked: set[tuple[str, str]], variants: Iterable[str], tasks: Iterable[str]
) -> list[tuple[str, str]]:
    """The flagged cells among those a comparison of `variants` on `tasks` reads."""
    return sorted((v, t) for v in variants for t in tasks if (v, t) in marked)


def cell_words(cells: pl.DataFrame, read: Iterable[tuple[str, str]]) -> list[str]:
    """Each of the cells `read` in words, with its selection optimism."""
    rows = {(r["variant"], r["task"]): r for r in cells.iter_rows(named=True)}
    return [
        f"{variant} on {task} (held-out rows over the evaluation split by "
        f"{rows[variant, task]['optimism']:.1f} points)"
        for variant, task in read
    ]


def label_flagged(table: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """A gains table (one row per variant, baseline and task) where every comparison that reads
    a flagged cell, its variant's or its baseline's, is labelled `verdicts.FLAGGED`."""
    marked = flagged(cells)
    if not marked or not table.height:
        return table
    hit = [
        (row["variant"], row["task"]) in marked or (row["baseline"], row["task"]) in marked
        for row in table.iter_rows(named=True)
    ]
    return table.with_columns(
        pl.when(pl.Series(hit, dtype=pl.Boolean))
        .then(pl.lit(verdicts.FLAGGED))
        .otherwise(pl.col("verdict"))
        .alias("verdict")
    )
