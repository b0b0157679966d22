"""What notebook 01's runs show, as numbers (`summarize`, which its pinned results check) and in
sentences (`summary_markdown`)."""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import polars as pl

from kit.experiments.toy import SOLVED, all_solved_fraction
from kit.experiments.toy_construction import COMPONENT_FEATURE, COMPONENT_NAMES, FEATURES
from kit.readout.numbers import POINTS
from kit.readout.scalars import as_float
from kit.report import labels


class ToySummary(TypedDict):
    """What `summarize` returns: counts, fractions in [0, 1] and mean probe accuracies, by share,
    component or group size k where keyed (None where no model qualified)."""

    runs: int
    kept_counts: dict[str, int]
    one_feature_fraction: float
    one_feature_fraction_by_share: dict[str, float]
    kept_matches_optimum_fraction: float | None
    single_feature_accuracy_own_components: float | None
    single_feature_accuracy_other_components: float | None
    direct_accuracy: dict[str, float]
    concat_all_solved_fraction: dict[str, float]
    concat_all_solved_fraction_shared_sample: dict[str, float]
    unpruned_solves_all_fraction: float
    solved_threshold: float


def summarize(
    runs: pl.DataFrame,
    direct: pl.DataFrame,
    concat: pl.DataFrame,
    shared_concat: pl.DataFrame,
    solved: float = SOLVED,
) -> ToySummary:
    """The key measured results of notebook 01, as plain numbers (written to JSON)."""
    single = runs.filter(pl.col("kept").is_in(["phi1", "phi2"]))
    own: list[float] = []
    other: list[float] = []
    for row in single.iter_rows(named=True):
        feature = FEATURES.index(row["kept"])
        for c, name in enumerate(COMPONENT_NAMES):
            (own if COMPONENT_FEATURE[c] == feature else other).append(row[f"acc_{name}"])
    decided = single.filter(~pl.col("predicted_by_optimum").str.contains(r"\|"))
    return {
        "runs": runs.height,
        "kept_counts": dict(runs.group_by("kept").len().sort("kept").iter_rows()),
        "one_feature_fraction": single.height / runs.height,
        "one_feature_fraction_by_share": {
            str(share): frac
            for share, frac in runs.group_by("share")
            .agg(pl.col("kept").is_in(["phi1", "phi2"]).mean())
            .sort("share")
            .iter_rows()
        },
        "kept_matches_optimum_fraction": (
            as_float((decided["kept"] == decided["predicted_by_optimum"]).mean())
            if decided.height
            else None
        ),
        "single_feature_accuracy_own_components": float(np.mean(own)) if own else None,
        "single_feature_accuracy_other_components": float(np.mean(other)) if other else None,
        "direct_accuracy": dict(
            direct.group_by("component")
            .agg(pl.col("accuracy").mean())
            .sort("component")
            .iter_rows()
        ),
        "concat_all_solved_fraction": all_solved_fraction(concat),
        "concat_all_solved_fraction_shared_sample": all_solved_fraction(shared_concat),
        "unpruned_solves_all_fraction": as_float(runs["unpruned_solves_all"].mean()),
        "solved_threshold": solved,
    }


def summary_markdown(summary: ToySummary) -> str:
    """What `summarize` found, as sentences in a markdown list (what the notebook displays):
    shares of models and groups in whole %, probe accuracies in % to one decimal, as every
    notebook prints an accuracy (kit.readout.numbers; the summary keeps the fractions)."""

    def listed(values: dict[str, float], percent: bool, prefix: str = "") -> str:
        shown = (f"{v:.0%}" if percent else accuracy(v) for v in values.values())
        return ", ".join(f"{prefix}{key}: {v}" for key, v in zip(values, shown, strict=True))

    def percent(value: object) -> str:
        return "–" if value is None else f"{value:.0%}"

    def accuracy(value: float | None) -> str:
        """A probe's accuracy (a fraction in the summary) as every notebook prints one: in %
        to one decimal (kit.readout.numbers)."""
        return "–" if value is None else f"{POINTS.text(100 * value)}%"

    kept = ", ".join(
        f"{n} kept {labels.value_text('kept', k)}" for k, n in summary["kept_counts"].items()
    )
    lines = [
        f"{summary['runs']} mixture-trained models: {kept}.",
        "Kept exactly one feature, by the dominant component's weight: "
        f"{listed(summary['one_feature_fraction_by_share'], True, 'weight ')}.",
        "One-feature models whose feature is the least-error classifier's (mixtures without "
        f"ties): {percent(summary['kept_matches_optimum_fraction'])}.",
        "One-feature models, probe accuracy on the components their feature solves: "
        f"{accuracy(summary['single_feature_accuracy_own_components'])}; on the other two: "
        f"{accuracy(summary['single_feature_accuracy_other_components'])} (a threshold on the "
        f"wrong feature gets 2 of 3 points: {accuracy(2 / 3)} expected).",
        "Direct training, probe accuracy per component: "
        f"{listed(summary['direct_accuracy'], False)}.",
        "Concatenated groups solving all four components, by models concatenated: "
        f"{listed(summary['concat_all_solved_fraction'], True, 'k = ')}; with models sharing "
        "one training sample (seed and order only): "
        f"{listed(summary['concat_all_solved_fraction_shared_sample'], True, 'k = ')}.",
        "Models whose unpruned representation solves every component: "
        f"{percent(summary['unpruned_solves_all_fraction'])}.",
    ]
    return "\n".join(f"- {line}" for line in lines)


#: what a model kept, as the sparsity line says it (the features by their symbols:
#: kit.report.labels)
KEPT_WORDS = {
    "both": "both features",
    "phi1": f"only {labels.label('phi1')}",
    "phi2": f"only {labels.label('phi2')}",
    "none": "no feature",
}


def sparsity_line(sparsity: pl.DataFrame) -> str:
    """What the sparsity sweep's models kept (toy.sparsity_sweep: a row per model) at its
    smallest and its largest weight decay, counted from the run: the sentence notebook 01
    prints under the sweep, so that what the largest weight decay left is never said by hand."""

    def kept_at(weight_decay: float) -> str:
        models = sparsity.filter(pl.col("weight_decay") == weight_decay)
        counts = dict(models.group_by("kept").len().iter_rows())
        said = [
            f"{counts[k]} of {models.height} kept {KEPT_WORDS[k]}"
            for k in KEPT_WORDS
            if counts.get(k)
        ]
        return f"weight decay {weight_decay:g}: {', '.join(said)}"

    decays = sorted(set(sparsity["weight_decay"]))
    if len(decays) == 1:
        return f"At {kept_at(decays[0])}."
    return f"At the smallest {kept_at(decays[0])}; at the largest {kept_at(decays[-1])}."
