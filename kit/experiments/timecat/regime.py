"""The paper's Table 3 beside the kit's measured rows, each with its regime: the budget each model
gets as a share of the budget where cat1 saturates.

The paper (Section 5.1, Table 3) trains cat1 for 450k iterations and each model of catN for 200k,
100k or 80k; it does not locate cat1's saturation, so its regime is taken against cat1's own
450k iterations (cat1 is trained to the end of its schedule there). The kit's regime is measured
by notebook 04: the smallest swept budget where cat1's own in-distribution accuracy reaches its
saturation share of its best (kit.experiments.timecat.sweep_outcome.learned_budgets).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from kit.experiments import evidence
from kit.experiments.timecat.variants import kinds_where
from kit.report import outputs

#: the paper's cat1 budget (Table 3), against which its regime is stated
PAPER_CAT1_ITERATIONS = 450_000
PAPER_IN_DISTRIBUTION = "ImageNet-1k"


def _paper_rows() -> pl.DataFrame:
    """The paper's rows in its Table 3's order (joins and groups keep it: polars promises no
    order otherwise, and the rows came out shuffled from one run to the next)."""
    table = evidence.load("table3").with_columns(
        pl.col("method").str.replace(r" \(baseline\)", "").alias("variant")
    )
    transfer = (
        table.filter(pl.col("eval_dataset") != PAPER_IN_DISTRIBUTION)
        .group_by("variant", maintain_order=True)
        .agg(
            pl.col("value").mean().alias("transfer top-1 %"),
            pl.col("eval_dataset").sort().str.join(", ").alias("transfer tasks"),
        )
    )
    inside = table.filter(pl.col("eval_dataset") == PAPER_IN_DISTRIBUTION).select(
        "variant",
        pl.col("n_models").cast(pl.Int64).alias("n"),
        pl.col("iters_per_model").cast(pl.Int64).alias("iterations per model"),
        pl.col("value").alias("in-distribution top-1 %"),
    )
    return inside.join(transfer, on="variant", maintain_order="left").with_columns(
        pl.lit("paper, Section 5.1, Table 3 (ResNet-50, ImageNet-1k)").alias("source"),
        (pl.col("iterations per model") / PAPER_CAT1_ITERATIONS).alias("regime"),
        pl.lit(f"share of cat1's {PAPER_CAT1_ITERATIONS:,} iterations").alias("regime of"),
    )


def _kit_rows(
    results: pl.DataFrame, rule: str, saturated_at: dict[int, int] | int | None, label: str
) -> pl.DataFrame:
    concat = results.filter(
        (pl.col("rule") == rule) & pl.col("kind").is_in(kinds_where(lambda kind: kind.concatenated))
    )
    keys = [c for c in ("world_seed", "budget") if c in concat.columns]
    group = [*keys, "variant", "n", "iterations_per_model"]
    inside = pl.col("role") == "in-distribution"
    per_replicate = concat.group_by(*group, "replicate").agg(
        (100 * pl.col("top1").filter(inside).mean()).alias("in-distribution"),
        (100 * pl.col("top1").filter(~inside).mean()).alias("transfer"),
    )
    tasks = (
        concat.filter(~inside)
        .group_by(group)
        .agg(pl.col("task").unique().sort().str.join(", ").alias("transfer tasks"))
    )
    measured = (
        per_replicate.group_by(group)
        .agg(
            pl.col("in-distribution").mean().alias("in-distribution top-1 %"),
            pl.col("in-distribution").std().alias("in-distribution top-1 % std"),
            pl.col("transfer").mean().alias("transfer top-1 %"),
            pl.col("transfer").std().alias("transfer top-1 % std"),
            pl.len().alias("replicates"),
        )
        .join(tasks, on=group, how="left")
    )
    if isinstance(saturated_at, dict):
        saturation = pl.col("world_seed").replace_strict(
            saturated_at, default=None, return_dtype=pl.Int64
        )
    else:
        saturation = pl.lit(saturated_at, dtype=pl.Int64)
    return (
        measured.with_columns(saturation.alias("saturated_at"))
        .with_columns(
            pl.lit(label).alias("source"),
            pl.col("iterations_per_model").alias("iterations per model"),
            (pl.col("iterations_per_model") / pl.col("saturated_at")).alias("regime"),
            pl.when(pl.col("saturated_at").is_null())
            .then(pl.lit("not measured (notebook 04 locates cat1's saturation)"))
            .otherwise(pl.format("share of {} iterations (where cat1 saturates)", "saturated_at"))
            .alias("regime of"),
        )
        .sort(*keys, "n")
    )


def paper_beside_kit(
    results: pl.DataFrame, rule: str, saturated_at: dict[int, int] | int | None, label: str
) -> pl.DataFrame:
    """One table: the paper's Table 3 rows, then the kit's time-concat rows (mean top-1 % in
    distribution and over the transfer tasks, under `rule`), each with its regime (iterations
    per model / the budget where cat1 saturates: `saturated_at`, per world seed for a sweep's
    results, one budget for notebook 03's, None where it is not measured). `label` names the
    kit's rows (the profile that ran)."""
    columns = [
        "source",
        "variant",
        "n",
        "iterations per model",
        "regime",
        "regime of",
        "in-distribution top-1 %",
        "in-distribution top-1 % std",
        "transfer top-1 %",
        "transfer top-1 % std",
        "replicates",
        "transfer tasks",
    ]
    kit = _kit_rows(results, rule, saturated_at, label)
    extra = [c for c in ("world_seed", "budget") if c in kit.columns]
    return pl.concat([_paper_rows(), kit.select(*columns, *extra)], how="diagonal_relaxed").select(
        *columns, *extra
    )


def recorded_saturation(summary_file: Path, world_seed: int | None, baseline: str) -> int | None:
    """Where cat1 (`baseline`) saturates in `world_seed`, as a previous notebook 04 run on the
    same output folder located it (its summary, `sweep_summary.json`); None when there is no
    such run or it did not locate it (reached at its smallest budget, or never)."""
    if world_seed is None or not summary_file.exists():
        return None
    rows = outputs.read_json(summary_file).get("learned", [])
    found = [
        row["learned_at"]
        for row in rows
        if row["variant"] == baseline and row["world_seed"] == world_seed and row.get("located")
    ]
    return found[0] if found else None
