"""The time-concat experiment's tables: Table 3's layout, paired gains against the baseline and
the controls with their intervals, the paper beside the kit, and the verdict lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from kit.experiments.timecat import cells
from kit.experiments.timecat.claims import (
    BOTTLENECK,
    TIME_CONCAT,
    TITLES,
    bottleneck_claim,
    claimed_variant,
    controls_of,
    outcome_line,
    time_concat_claim,
)
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.variants import VARIANT_KINDS, kinds_where
from kit.readout import numbers
from kit.readout.scalars import as_float
from kit.report import tables
from kit.stats import outcomes, rounds, verdicts


def diagnostics_table(measured: pl.DataFrame) -> pl.DataFrame:
    """Mean and std over replicates of each variant's diagnostics, task by task."""
    order = {v: i for i, v in enumerate(variant_order(measured))}
    stats = measured.group_by("task", "variant").agg(
        pl.col("features").first(),
        *[
            aggregate
            for column in ("rankme", "alpha_req", "seed_cka")
            for aggregate in (
                pl.col(column).mean().alias(f"{column}_mean"),
                pl.col(column).std().alias(f"{column}_std"),
            )
        ],
        pl.len().alias("replicates"),
    )
    return stats.sort("task", pl.col("variant").replace_strict(order, return_dtype=pl.Int64))


def variant_order(results: pl.DataFrame) -> list[str]:
    """Variants in the order the parameters list them (the order results were recorded in)."""
    return list(dict.fromkeys(results["variant"].to_list()))


def table3(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """The paper's layout: one row per variant, for every task its top-1 % as mean and std over
    replicates (number columns '<task> mean', '<task> std'), and the number of replicates; its
    budget as models, width (times cat1's), iterations per model, total iterations and compute
    in cat1's iterations (models × width² × iterations: wide1's 60 cost cat4's 240)."""
    chosen = results.filter(pl.col("rule") == rule)
    stats = chosen.group_by("variant", "task", maintain_order=True).agg(
        (100 * pl.col("top1").mean()).alias("mean"), (100 * pl.col("top1").std()).alias("std")
    )
    wide = tables.wide_mean_std(stats, ["variant"], "task")
    budget = chosen.group_by("variant").agg(
        pl.col("kind").first(),
        pl.col("n").first(),
        pl.col("width").first(),
        pl.col("iterations_per_model").first(),
        pl.col("replicate").n_unique().alias("replicates"),
    )
    order = {v: i for i, v in enumerate(variant_order(results))}
    return (
        budget.join(wide, on="variant")
        .with_columns(
            (pl.col("n") * pl.col("iterations_per_model")).alias("total_iterations"),
            # an iteration of a model `width` times wider costs width² of cat1's
            (pl.col("n") * pl.col("width") ** 2 * pl.col("iterations_per_model")).alias("compute"),
        )
        .sort(pl.col("variant").replace_strict(order, return_dtype=pl.Int64))
        .select(
            "variant",
            "kind",
            "n",
            "width",
            "iterations_per_model",
            "total_iterations",
            "compute",
            "replicates",
            *[c for c in wide.columns if c != "variant"],
        )
    )


#: a top-1 (a fraction) at or above which an accuracy reads 100.0 % at one decimal: the
#: ceiling where two accuracies tie (kit.stats.verdicts)
CEILING = 0.9995


def paired_differences(results: pl.DataFrame, rule: str, baseline: str) -> pl.DataFrame:
    """Per replicate and task, each other variant's top-1 minus the baseline variant's, in
    points (column `difference`), with the most one evaluation row moves it (`resolution`) and
    whether both accuracies sit at the ceiling (`at_ceiling`: both read 100.0 %): the paired
    rows `gains` judges."""
    return _paired(results.filter(pl.col("rule") == rule), baseline)


def _paired(chosen: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """`paired_differences` of results already narrowed to one rule."""
    # both sides in one query; the pairing stays an eager step (claims.endpoint says why)
    others, reference = pl.collect_all(
        [
            chosen.lazy().filter(pl.col("variant") != baseline),
            chosen.lazy()
            .filter(pl.col("variant") == baseline)
            .select("replicate", "task", pl.col("top1").alias("baseline_top1")),
        ]
    )
    return others.join(reference, on=["replicate", "task"]).select(
        pl.lit(baseline).alias("baseline"),
        "variant",
        "kind",
        "n",
        "task",
        "role",
        "replicate",
        (100 * (pl.col("top1") - pl.col("baseline_top1"))).alias("difference"),
        # the most one evaluation row moves the difference (kit.stats.verdicts)
        (
            100 / pl.col("eval_rows")
            if "eval_rows" in chosen.columns
            else pl.lit(0.0, dtype=pl.Float64)
        ).alias("resolution"),
        ((pl.col("top1") >= CEILING) & (pl.col("baseline_top1") >= CEILING)).alias("at_ceiling"),
    )


def _judged(paired: pl.DataFrame, results: pl.DataFrame, level: float) -> pl.DataFrame:
    """`paired` judged task by task (kit.stats.verdicts), Holm's adjustment over the tasks of
    each (baseline, variant) comparison, in `gains`' layout and order."""
    judged = verdicts.verdicts(
        paired,
        by=["baseline", "variant", "kind", "n", "task", "role"],
        family=["baseline", "variant"],
        level=level,
        resolution="resolution",
        ceiling="at_ceiling",
    )
    order = {v: i for i, v in enumerate(variant_order(results))}
    rank = pl.col("variant").replace_strict(order, default=len(order), return_dtype=pl.Int64)
    base = pl.col("baseline").replace_strict(order, default=len(order), return_dtype=pl.Int64)
    return (
        judged.lazy()  # one query: every summary judges its gains and its controls
        .rename({"mean": "gain_mean", "std": "gain_std"})
        .sort(base, rank, "task")
        .select(
            "variant",
            "kind",
            "n",
            "task",
            "role",
            "gain_mean",
            "gain_std",
            "replicates",
            "low",
            "high",
            "baseline",
            "p_value",
            "p_adjusted",
            "comparisons",
            "verdict",
        )
        .collect()
    )


def gains(
    results: pl.DataFrame, rule: str, baseline: str, level: float = verdicts.LEVEL
) -> pl.DataFrame:
    """Secondary, exploratory results: per replicate, each variant's accuracy minus the baseline
    variant's on every task they share (points); per variant and task the mean gain, its std, a
    two-sided one-sample t test of the paired gains, and the label (`better`, `worse`, `no clear
    difference`, `untested (one replicate)`) its p-value supports once adjusted by Holm's method
    over the tasks of the same comparison, or `tied` where the two means are within one
    evaluation row or both at 100.0 % (kit.stats.verdicts, at `level`; the interval
    `low`-`high` is widened to match and clipped to [-100, 100]). No claim rests on them."""
    return _judged(paired_differences(results, rule, baseline), results, level)


def probe_agreement(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """The fast probe beside a converged L-BFGS fit of the same features (where `lbfgs_check`
    recorded one): top-1 % of both and their difference, largest first."""
    return (
        results.filter((pl.col("rule") == rule) & pl.col("lbfgs_top1").is_not_null())
        .select(
            "variant",
            "replicate",
            "task",
            (100 * pl.col("top1")).alias("fast %"),
            (100 * pl.col("lbfgs_top1")).alias("L-BFGS %"),
        )
        .with_columns((pl.col("fast %") - pl.col("L-BFGS %")).alias("difference"))
        .sort(pl.col("difference").abs(), descending=True)
    )


#: points of top-1 within which a probe and its converged L-BFGS reference agree
AGREEMENT_BAR = 0.5


def agreement_line(agreement: pl.DataFrame, params: TimecatSettings) -> str:
    """What `probe_agreement` found, in one line: the largest difference against the bar, or why
    nothing was compared."""
    kind = params.probe_kind
    if params.probe.reference() is None:
        return f"the {kind} probe has no converged L-BFGS reference: nothing to check"
    if not agreement.height:
        return "lbfgs_check is off for this profile: no converged reference was fitted"
    worst = as_float(agreement["difference"].abs().max())
    side = "within" if worst <= AGREEMENT_BAR else "outside"
    return (
        f"largest |{kind} - L-BFGS| over {agreement.height} probes: {worst:.2f} points "
        f"({side} the {AGREEMENT_BAR}-point bar)"
    )


def pretraining_passes(params: TimecatSettings) -> float | None:
    """How many times the longest pretraining run goes through its pool of synthetic images
    (at most 1: no image is seen twice, data streamed as the paper assumes); None on real
    data, where the budget sets the epochs."""
    if params.train is None or params.train.data.synthetic is None:
        return None
    most = max((params.iterations_for(v) for v in params.variants if v.trained), default=0)
    return most * params.train.batch_size / params.train.data.synthetic.num_train


def control_gains(results: pl.DataFrame, rule: str, level: float = verdicts.LEVEL) -> pl.DataFrame:
    """Secondary, exploratory results: each time-concat variant of several models against the
    controls a reviewer asks for, task by task, in `gains`' layout: every `wide` variant (one
    model with as many or more features) and the `random-init` variant of the same n (the same
    architecture without learning)."""
    variants = results.select("variant", "kind", "n").unique(maintain_order=True)
    concat = variants.filter(
        pl.col("kind").is_in(kinds_where(lambda kind: kind.concatenated)) & (pl.col("n") > 1)
    )
    chosen = results.filter(pl.col("rule") == rule)
    frames = []
    for control in controls_of(results).iter_rows(named=True):
        against = (
            concat.filter(pl.col("n") == control["n"])
            if VARIANT_KINDS.get(control["kind"]).controls == "same_n"
            else concat
        )
        frames.append(
            _paired(chosen, control["variant"]).filter(
                pl.col("variant").is_in(against["variant"].to_list())
            )
        )
    paired = pl.concat(frames) if frames else _paired(chosen, "").clear()
    return _judged(paired, results, level)


def _verdict_line(row: dict[str, Any]) -> str:
    spread = (
        ""
        if row["low"] is None
        else f", Holm-adjusted interval {numbers.interval(row['low'], row['high'])}, adjusted "
        f"p {numbers.p_value(row['p_adjusted'])} over the {row['comparisons']} tasks of this "
        "comparison"
    )
    return (
        f"secondary (exploratory): {row['variant']} vs {row['baseline']} on {row['task']} "
        f"({row['role']}): {numbers.signed(row['gain_mean'])} points over "
        f"{numbers.counted(row['replicates'], 'replicate')}{spread}: {row['verdict']}"
    )


def judged_gains(
    results: pl.DataFrame, rule: str, baseline: str, max_optimism: float | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The secondary comparisons as every output shows them: `gains` against the baseline and
    `control_gains`, each comparison that reads a flagged probe cell labelled so
    (kit.experiments.timecat.cells, the one rule)."""
    return _labelled(results, rule, baseline, cells.probe_cells(results, rule, max_optimism))


def _labelled(
    results: pl.DataFrame, rule: str, baseline: str, probed: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`judged_gains` with the probe cells (`cells.probe_cells`) computed by the caller."""
    return (
        cells.label_flagged(gains(results, rule, baseline), probed),
        cells.label_flagged(control_gains(results, rule), probed),
    )


def summarize(
    results: pl.DataFrame,
    rule: str,
    baseline: str,
    max_optimism: float | None = None,
    smallest: float = 2.9,
    ran: str = "",
    stops: Sequence[rounds.Round] = (),
    to_decide: str | None = None,
) -> dict[str, Any]:
    """What this run measured, as plain statements and numbers: first each claim judged on its
    primary endpoint (`time_concat_claim`, `bottleneck_claim`; a condition that reads a probe
    cell flagged under `max_optimism` is not judged, kit.experiments.timecat.cells), then the
    secondary, exploratory per-task comparisons against the baseline (`judged_gains`), their
    tally, and against the controls. "claim" is the headline (time-concat) claim; "claims"
    lists every claim; "verdicts" is the stored verdict table's rows (one per condition);
    `ran` is the what-ran line. `stops` are the claims' last rounds (kit.stats.rounds): each is
    then judged on the replicates of its last look, by its repeated intervals, and says how
    many rounds and replicates it took and why it stopped; `to_decide`
    (kit.stats.rounds.to_decide), where the wall budget left a claim undecided, is the
    summary's "next"."""
    last = {found.claim: found for found in stops}
    probed = cells.probe_cells(results, rule, max_optimism)
    judged = []
    for name, claim in ((TIME_CONCAT, time_concat_claim), (BOTTLENECK, bottleneck_claim)):
        seen = (  # judged on the replicates of its last look
            results.filter(pl.col("replicate") < last[name].replicates) if name in last else results
        )
        marked = cells.flagged(
            cells.probe_cells(seen, rule, max_optimism) if name in last else probed
        )
        found = claim(seen, rule, baseline, smallest, marked)
        if found is None:
            continue
        if found.claim in last:
            found = rounds.stopped(found, last[found.claim])
        judged.append(found)
    claims = [
        {
            "claim": found.claim,
            "status": found.status,
            "line": outcome_line(found, baseline),
            "title": TITLES[found.claim].format(baseline=baseline),
            "conditions": [outcomes.condition_words(row) for row in found.rows],
            "reasons": found.reasons,
            "how": found.how,
            **(last[found.claim].record() if found.claim in last else {}),
            "smallest_effect": smallest,
            "ran": ran,
        }
        for found in judged
    ]
    table, controls = _labelled(results, rule, baseline, probed)
    lines = [c["line"] for c in claims] + [
        _verdict_line(row) for row in table.iter_rows(named=True)
    ]
    tally = table.group_by("variant").agg(
        (pl.col("verdict") == "better").sum().alias("better"),
        (pl.col("verdict") == "worse").sum().alias("worse"),
        (pl.col("verdict") != verdicts.FLAGGED).sum().alias("tasks"),
        (pl.col("verdict") == verdicts.FLAGGED).sum().alias("flagged"),
    )
    order = {v: i for i, v in enumerate(variant_order(results))}
    tally = tally.sort(pl.col("variant").replace_strict(order, return_dtype=pl.Int64))
    for row in tally.iter_rows(named=True):
        lines.append(
            f"secondary (exploratory): {row['variant']}: better than {baseline} on "
            f"{row['better']} of {row['tasks']} tasks, worse on {row['worse']} (rule {rule})"
            + (f"; {row['flagged']} more flagged, not judged" if row["flagged"] else "")
        )
    lines += [_verdict_line(row) for row in controls.iter_rows(named=True)]
    return {
        "rule": rule,
        "baseline": baseline,
        "smallest_effect": smallest,
        "ran": ran,
        "next": to_decide,
        "claim": {
            **claims[0],
            "variant": claimed_variant(results),
            "flagged_cells": probed.filter(pl.col("flagged")).to_dicts(),
            "max_probe_optimism": max_optimism,
        },
        "claims": claims,
        "verdicts": [row for found in judged for row in found.rows],
        "gains": table.to_dicts(),
        "tally": tally.to_dicts(),
        "controls": controls.to_dicts(),
        "lines": lines,
    }


def verdict_table(summary: dict) -> pl.DataFrame:
    """The stored verdict table (one row per claim condition) from a summary's "verdicts"."""
    return outcomes.table(summary["verdicts"])


def ceilings(params: TimecatSettings) -> dict[str, float]:
    """Top-1 % a perfect reader of every cue reaches on each synthetic task (the Bayes ceiling,
    kit.data.synthetic.bayes_ceiling); tasks on real data have none. kit.data.synthetic (the
    world's images, torch tensors) is imported here, not by this module, which notebook 04's
    cost reads before anything runs."""
    from kit.data import synthetic

    levels = {}
    for task in params.tasks:
        task_data, classes = params.task_data(task)
        if task_data.synthetic is not None:
            levels[task.name] = 100 * synthetic.bayes_ceiling(task_data.synthetic, classes)
    return levels


def chance_levels(params: TimecatSettings) -> dict[str, float]:
    """Top-1 % of guessing on each task (its classes are balanced: the synthetic world draws
    labels uniformly, the paper's datasets are close to it)."""
    return {task.name: 100 / params.task_data(task)[1] for task in params.tasks}


def task_table(params: TimecatSettings) -> pl.DataFrame:
    """What each probe task is: its role, classes, chance level and Bayes ceiling (synthetic
    tasks), and the rows its probe trains on."""
    chance, ceiling = chance_levels(params), ceilings(params)
    rows = []
    for task in params.tasks:
        task_data, classes = params.task_data(task)
        every = task_data.synthetic.num_train if task_data.synthetic else None
        rows.append(
            {
                "task": task.name,
                "role": task.role,
                "classes": classes,
                "chance %": chance[task.name],
                "Bayes ceiling %": ceiling.get(task.name),
                "probe train rows": params.probe_train_rows or every,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "task": pl.String,
            "role": pl.String,
            "classes": pl.Int64,
            "chance %": pl.Float64,
            "Bayes ceiling %": pl.Float64,
            "probe train rows": pl.Int64,
        },
    )
