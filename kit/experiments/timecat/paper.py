"""The paper's Table 3 (Section 5.1) and the kit's measurements in one table, row for row.

One row per measure of each of the paper's variants, in the paper's order (cat1, cat2, cat4,
cat5; within a variant: in distribution, the mean over the transfer datasets, the transfer gain
over cat1, then each dataset a task of the profile stands for): the paper's number and its source
(a table of arXiv 2506.18221v3, or the authors' figure it was read from), the kit's mean and
standard deviation over replicates side by side with it, and the kit's minus the paper's only
where both are measured on the same datasets (the kit's tasks are the paper's datasets
themselves: the paper profiles). Anything else is like with unlike, a gain over cat1 as much as
an accuracy (a gain over cat1 on synthetic tasks, from the synthetic baseline, is no gain on
iNat18 and CIFAR from the paper's), so no such row subtracts them, and the column `COMPARABLE`
says which rows are measured on the paper's datasets. The kit's
synthetic world has no ImageNet, so its rows stand for the paper's by role: the pretraining
mixture (the in-distribution task) for ImageNet-1k, and the mean over the tasks the pretraining
did not train on for the mean over iNat18, CIFAR-100 and CIFAR-10. Where a profile maps its tasks
to the paper's datasets (`paper_columns`), each mapped dataset gets its own row.

The transfer gain is the paper's primary endpoint for the time-concat claim: it is computed per
replicate, paired with cat1 of the same replicate, as notebook 03's verdicts compute it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from kit.experiments import evidence
from kit.readout.citation import PAPER
from kit.readout.scalars import as_float, as_optional_float

PAPER_BASELINE = "cat1"
PAPER_IN_DISTRIBUTION = "ImageNet-1k"
IN_DISTRIBUTION = "in distribution, top-1 %"
TRANSFER = "transfer, mean top-1 %"
GAIN = "transfer gain over cat1, points"
PAPER_NUMBER = f"paper's number (arXiv {PAPER.arxiv_id})"
PAPER_SOURCE = "source of the paper's number"
COMPARABLE = "measured on the paper's datasets?"
#: the columns of `paper_vs_kit`, before any key of `by`
COLUMNS = [
    "variant",
    "measure",
    "paper's dataset",
    "kit's task (stands for it)",
    PAPER_NUMBER,
    PAPER_SOURCE,
    "kit mean",
    "kit std",
    "replicates",
    "kit − paper",
    COMPARABLE,
]
#: how each value was read, by its `value_source` (a figure's value names its dataset)
_READ = {
    "table": f"Table 3, arXiv {PAPER.arxiv_id}",
    "read_from_figure": " read by eye from the authors' figure of Table 3, ±0.2, not in the "
    "paper's text",
}
#: what a row whose kit's tasks stand for the paper's datasets says (set side by side, never
#: subtracted), and what a row says where they are the paper's datasets themselves (the paper
#: profiles: "kit − paper" is their difference)
NOT_COMPARABLE = "no: the kit's tasks stand for them (side by side, not subtracted)"
SAME_DATASET = "yes: the paper's datasets (kit − paper subtracted)"


def paper_rows() -> pl.DataFrame:
    """The paper's Table 3 as (variant, dataset, value, read) rows in the paper's order."""
    return evidence.load("table3").select(
        pl.col("method").str.replace(r" \(baseline\)", "").alias("variant"),
        pl.col("eval_dataset").alias("dataset"),
        pl.col("value"),
        pl.when(pl.col("value_source") == "read_from_figure")
        .then(pl.col("eval_dataset") + _READ["read_from_figure"])
        .otherwise(pl.lit(_READ["table"]))
        .alias("read"),
    )


def variants_in_order() -> list[str]:
    """The paper's variants in the order its Table 3 lists them."""
    return list(dict.fromkeys(paper_rows()["variant"].to_list()))


@dataclass(frozen=True)
class _Measure:
    """One (variant, measure) of the paper: its dataset(s), value and how it was read, and
    `key`, what the kit's rows for it are: ("role", role), ("gain", "transfer") or ("dataset",
    the paper's dataset)."""

    variant: str
    measure: str
    dataset: str
    paper: float
    read: str
    key: tuple[str, str]


def _paper_measures() -> list[_Measure]:
    """Each (variant, measure) of the paper with its value, in the paper's order (read from
    the table's rows in Python: it is a few dozen rows, and every claim line reads it)."""
    rows = paper_rows().to_dicts()
    transfer_sets = [row for row in rows if row["dataset"] != PAPER_IN_DISTRIBUTION]
    transfer_names = ", ".join(dict.fromkeys(row["dataset"] for row in transfer_sets))
    order = variants_in_order()
    values = {v: [row["value"] for row in transfer_sets if row["variant"] == v] for v in order}
    means = {v: as_float(pl.Series(x, dtype=pl.Float64).mean()) for v, x in values.items()}
    measures: list[_Measure] = []
    for variant in order:
        own = [row for row in rows if row["variant"] == variant]
        inside = next(row for row in own if row["dataset"] == PAPER_IN_DISTRIBUTION)
        reads = "; ".join(dict.fromkeys(row["read"] for row in own))
        measures.append(
            _Measure(
                variant=variant,
                measure=IN_DISTRIBUTION,
                dataset=PAPER_IN_DISTRIBUTION,
                paper=as_float(inside["value"]),
                read=inside["read"],
                key=("role", "in-distribution"),
            )
        )
        measures.append(
            _Measure(
                variant=variant,
                measure=TRANSFER,
                dataset=transfer_names,
                paper=means[variant],
                read=reads,
                key=("role", "transfer"),
            )
        )
        if variant != PAPER_BASELINE:
            measures.append(
                _Measure(
                    variant=variant,
                    measure=GAIN,
                    dataset=transfer_names,
                    paper=means[variant] - means[PAPER_BASELINE],
                    read=reads,
                    key=("gain", "transfer"),
                )
            )
        for row in own:
            measures.append(
                _Measure(
                    variant=variant,
                    measure=f"{row['dataset']}, top-1 %",
                    dataset=row["dataset"],
                    paper=as_float(row["value"]),
                    read=row["read"],
                    key=("dataset", row["dataset"]),
                )
            )
    return measures


def smallest_effect_basis(smallest: float) -> str:
    """Where a smallest effect of interest of `smallest` points comes from, as a clause to
    follow it, when it is the kit's default (half the paper's cat4 transfer gain over cat1,
    with the gain's source: one of its values was read from the authors' figure); empty for
    any other value."""
    (gain,) = (m for m in _paper_measures() if m.variant == "cat4" and m.key[0] == "gain")
    if round(gain.paper / 2, 1) != round(smallest, 1):
        return ""
    return f": half the paper's cat4 transfer gain of {gain.paper:.1f} points ({gain.read})"


def _replicate_keys(results: pl.DataFrame, by: Sequence[str]) -> list[str]:
    """What identifies one replicate: its number, and its world seed where a sweep's results
    hold several worlds and `by` does not split them."""
    return [c for c in ("world_seed", "replicate") if c in results.columns and c not in by]


def _per_replicate(results: pl.DataFrame, rule: str, by: Sequence[str]) -> pl.DataFrame:
    """Per (by, variant, replicate): top-1 % in distribution and mean over the transfer tasks,
    and the transfer gain over cat1 of the same replicate."""
    chosen = results.filter(pl.col("rule") == rule)
    replicate = _replicate_keys(results, by)
    inside = pl.col("role") == "in-distribution"
    per = chosen.group_by([*by, "variant", *replicate]).agg(
        (100 * pl.col("top1").filter(inside).mean()).alias("in-distribution"),
        (100 * pl.col("top1").filter(~inside).mean()).alias("transfer"),
    )
    base = per.filter(pl.col("variant") == PAPER_BASELINE).select(
        *by, *replicate, pl.col("transfer").alias("baseline transfer")
    )
    return per.join(base, on=[*by, *replicate], how="left").with_columns(
        (pl.col("transfer") - pl.col("baseline transfer")).alias("gain")
    )


def _tasks(results: pl.DataFrame, in_distribution: bool) -> str:
    roles = pl.col("role") == "in-distribution"
    chosen = results.filter(roles if in_distribution else ~roles)
    return ", ".join(sorted(set(chosen["task"].to_list())))


def _row(measure: _Measure, task: str, values: pl.Series) -> dict[str, object]:
    """One measure's row: the paper's number and its source, the kit's mean and std over
    `values` (one per replicate) beside it, and their difference only where both are measured
    on the same datasets (`task` names the paper's datasets as the paper does: an accuracy or
    a gain over cat1 alike), else which datasets they are."""
    mean = as_optional_float(values.mean()) if values.len() else None
    same = set(task.split(", ")) == set(measure.dataset.split(", "))
    return {
        "variant": measure.variant,
        "measure": measure.measure,
        "paper's dataset": measure.dataset,
        "kit's task (stands for it)": task or None,
        PAPER_NUMBER: measure.paper,
        PAPER_SOURCE: measure.read,
        "kit mean": mean,
        "kit std": values.std() if values.len() > 1 else None,
        "replicates": values.len(),
        "kit − paper": mean - measure.paper if same and mean is not None else None,
        COMPARABLE: SAME_DATASET if same else NOT_COMPARABLE,
    }


def paper_vs_kit(
    results: pl.DataFrame,
    rule: str,
    paper_columns: Mapping[str, str] | None = None,
    by: Sequence[str] = (),
) -> pl.DataFrame:
    """The paper's Table 3 beside the kit's `results` under selection rule `rule`, one row per
    measure in the paper's order (see the module's docstring); `paper_columns` maps a task to
    the paper's dataset it stands for; `by` (a sweep's 'world_seed', 'budget') repeats each
    measure per value of those keys, in ascending order (a replicate is then one world seed's
    replicate where the results hold several worlds). A variant or task the kit did not run
    leaves its kit cells empty."""
    by = list(by)
    stands_for = {dataset: task for task, dataset in (paper_columns or {}).items()}
    replicate = _per_replicate(results, rule, by)
    chosen = results.filter(pl.col("rule") == rule)
    per_task = chosen.group_by([*by, "variant", *_replicate_keys(results, by), "task"]).agg(
        (100 * pl.col("top1").mean()).alias("value")
    )
    named = {"in-distribution": _tasks(chosen, True), "transfer": _tasks(chosen, False)}
    groups = list(replicate.select(by).unique().sort(by).iter_rows(named=True)) if by else [{}]
    rows = []
    for measure, group in ((m, g) for m in _paper_measures() for g in groups):
        where = [pl.col(k) == v for k, v in group.items()] or [pl.lit(True)]
        kind, what = measure.key
        if kind == "dataset":
            if what not in stands_for:
                continue
            task = stands_for[what]
            values = per_task.filter(
                *where, pl.col("variant") == measure.variant, pl.col("task") == task
            )["value"]
        else:
            task = named[what]
            values = replicate.filter(*where, pl.col("variant") == measure.variant)[
                what if kind == "role" else "gain"
            ]
        rows.append({**group, **_row(measure, task, values.drop_nulls().drop_nans())})
    schema = {k: results.schema[k] for k in by} | {
        "variant": pl.String,
        "measure": pl.String,
        "paper's dataset": pl.String,
        "kit's task (stands for it)": pl.String,
        PAPER_NUMBER: pl.Float64,
        PAPER_SOURCE: pl.String,
        "kit mean": pl.Float64,
        "kit std": pl.Float64,
        "replicates": pl.Int64,
        "kit − paper": pl.Float64,
        COMPARABLE: pl.String,
    }
    return pl.DataFrame(rows, schema=schema).select(COLUMNS[0], *by, *COLUMNS[1:])
