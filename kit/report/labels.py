"""How a column or field reads: one mapping of the kit's code names to the words a table header,
a chart tooltip or a report caption shows.

The frames keep their code names (tests and later notebooks read them back); only what a reader
sees goes through `label`. A name not listed reads with its underscores as spaces. A column's
values that are code names (how a published value was obtained) read through VALUES, in a
table's cells (`value_text`) as in a chart's legend.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from kit.readout.numbers import GAIN, MEAN_COUNT, POINTS, Quantity

LABELS: dict[str, str] = {
    # notebook 03's secondary comparisons (kit.experiments.timecat.comparisons.gains)
    "gain_mean": "gain (points, mean)",
    "gain_std": "gain (points, std)",
    "p_value": "p",
    "p_adjusted": "p (Holm-adjusted)",
    "low": "95% interval, low",
    "high": "95% interval, high",
    "comparisons": "tasks in the comparison",
    "iterations_per_model": "iterations per model",
    "total_iterations": "total iterations",
    # notebook 03's budget: a variant's width against cat1's (Table 3's layout), a run's channel
    # multiplier (the run table: cat1's network at width 1 may be a quarter-width ResNet), and
    # the compute a variant spends in cat1's iterations
    "width": "width (× cat1's)",
    "channel_width": "channel width (× the ResNet's)",
    "compute": "compute (cat1 iterations)",
    "world_seed": "world seed",
    # label-free diagnostics (kit.stats.diagnostics)
    "rankme_mean": "RankMe (mean)",
    "rankme_std": "RankMe (std)",
    "alpha_req_mean": "alpha-ReQ (mean)",
    "alpha_req_std": "alpha-ReQ (std)",
    "cka_mean": "linear CKA between models (mean)",
    "cka_std": "linear CKA between models (std)",
    "seed_cka_mean": "linear CKA between a variant's models (mean)",
    "seed_cka_std": "linear CKA between a variant's models (std)",
    # notebook 04's regime (kit.experiments.timecat.sweep_outcome.learned_budgets)
    "learned_at": "learns the mixture at (iterations)",
    "located": "saturation located",
    "own_accuracy": "own in-distribution accuracy",
    # the toy (notebook 01)
    "components_solved_mean": "components solved (mean)",
    "components_solved_std": "components solved (std)",
    "predicted_by_optimum": "feature of the least-error classifier",
    "weight_decay": "weight decay",
    # the paper's published numbers (notebook 02)
    "eval_dataset": "dataset",
    "value_source": "value read from",
    "n_models": "models",
    "resnet50_equivalents": "size (ResNet-50 equivalents)",
    "total_iters": "total iterations",
    "ID gain": "in-distribution gain (points)",
    "mean OOD gain": "mean transfer gain (points)",
    "top1": "top-1",
    "cat4resnet50_minus_resnet50w2": "4 concatenated ResNet-50s − a 2× wide ResNet-50",
    "cat4resnet50_minus_resnet50": "4 concatenated ResNet-50s − one ResNet-50",
    "resnet50w2_minus_resnet50": "a 2× wide ResNet-50 − one ResNet-50",
    "train_top1": "top-1 on the probe's own rows",
    # notebook 03's probe cells (kit.experiments.timecat.cells)
    "heldout %": "held-out rows %",
    "train/eval gap": "train/eval gap (points)",
    "optimism": "selection optimism (points, held-out − evaluation)",
    "optimism low": "selection optimism, 97.5% lower bound (points)",
    # the toy's charts (notebook 01)
    "share": "weight of the dominant component",
    "k": "models concatenated",
    "kept": "features kept",
    "dominant": "dominant component",
    "groups": "groups of models",
    "len": "trained models",
    # how many models: a variant's (cat4: 4), the toy's per group of runs
    "n": "models",
    # the toy's two features by their symbols (SYMBOLS), as columns of a table
    "phi1": "φ1",
    "phi2": "φ2",
    "solved_by_phi1_alone": "solved by φ1 alone",
    "solved_by_phi2_alone": "solved by φ2 alone",
}
#: values a reader sees in a legend or a tooltip, by their code names
VALUES: dict[str, str] = {
    "read_from_figure": "read from the authors' figure",
    "table": "printed in a table",
}
#: values that are code names by pattern, by the column holding them: notebook 02's
#: architectures as the surveyed papers name them, a variant's per-task run
#: (kit.experiments.timecat.variants, `direct-<task>`)
VALUE_PATTERNS: dict[str, list[tuple[re.Pattern[str], str]]] = {
    "architecture": [
        (re.compile(r"resnet50"), "ResNet-50"),
        (re.compile(r"resnet50w(\d+)"), r"\1× wide ResNet-50"),
        (re.compile(r"cat(\d+)resnet50"), r"\1 concatenated ResNet-50s"),
    ],
    "variant": [(re.compile(r"direct-(\w+)"), r"direct (\1)")],
}
#: the toy's features (notebook 01) by their symbols, as Section 3 and the notebook's prose write
#: them: the code names phi1 and phi2 as φ1 and φ2 wherever a value names them ('phi1 | phi2',
#: 'mixture, kept phi1'), in the columns of SYMBOL_COLUMNS
SYMBOLS = (re.compile(r"\bphi(\d)\b"), r"φ\1")
SYMBOL_COLUMNS = ("kept", "training", "features", "predicted_by_optimum")
#: the columns whose values are code names a table cell shows through VALUES, VALUE_PATTERNS or
#: SYMBOLS
VALUE_COLUMNS = ("value_source", *VALUE_PATTERNS, *SYMBOL_COLUMNS)
#: the quantity of a number column by its code name (kit.readout.numbers): how its numbers read;
#: a column not listed reads as the unit in its header says (`quantity`)
QUANTITIES: dict[str, Quantity] = {
    # accuracies in % and their spreads: the published values (notebook 02, one column per
    # evaluation dataset where laid out as printed) and the kit's
    "value": POINTS,
    **dict.fromkeys(
        ["ImageNet-1k", "iNat18", "CIFAR-100", "CIFAR-10", "Waterbirds", "CelebA", "MultiNLI",
         "CivilComments"],
        POINTS,
    ),
    "own_accuracy": POINTS,
    "kit mean": POINTS,
    "kit std": POINTS,
    "baseline best": POINTS,
    "gap": POINTS,
    "train/eval gap": POINTS,
    "optimism": GAIN,
    "optimism low": GAIN,
    "difference": POINTS,
    "gain_std": POINTS,
    "components_solved_mean": MEAN_COUNT,
    "components_solved_std": MEAN_COUNT,
    # gains: differences of accuracies in points, signed
    "gain_mean": GAIN,
    "low": GAIN,
    "high": GAIN,
    "kit − paper": GAIN,
    "ID gain": GAIN,
    "mean OOD gain": GAIN,
    "mean (points)": GAIN,
    "direct minus transfer": GAIN,
    "transfer minus ERM": GAIN,
}  # fmt: skip
#: words in a column's header that say it holds points (an accuracy in %, or a gain)
POINTS_WORDS = ("%", "(points", "top-1")
#: the encoding channels whose title a reader sees (an axis, a legend, a facet header, a tooltip)
TITLED_CHANNELS = (
    "x", "y", "color", "fill", "stroke", "shape", "size", "opacity", "strokeDash", "column",
    "row", "facet", "tooltip",
)  # fmt: skip


def label(name: str) -> str:
    """What a reader sees for the column or field `name`."""
    if name in LABELS:
        return LABELS[name]
    return name.replace("_", " ")


def value_text(column: str, value: str) -> str:
    """What a reader sees for the string `value` of the column `column`: a code name of
    VALUES or VALUE_PATTERNS in words where the column holds such names."""
    if column not in VALUE_COLUMNS:
        return value
    if column in SYMBOL_COLUMNS:
        return SYMBOLS[0].sub(SYMBOLS[1], value)
    for pattern, words in VALUE_PATTERNS.get(column, []):
        if pattern.fullmatch(value):
            return pattern.sub(words, value)
    return VALUES.get(value, value)


def readable(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with the code names among the values of its VALUE_COLUMNS in words: what a
    chart's axis, legend and tooltip show (its data, not only its titles)."""
    shown = [c for c in VALUE_COLUMNS if c in frame.columns and frame.schema[c] == pl.String]
    return frame.with_columns(
        pl.col(c).replace_strict(
            {v: value_text(c, v) for v in frame[c].drop_nulls().unique()}, default=pl.col(c)
        )
        for c in shown
    )


def quantity(name: str) -> Quantity | None:
    """The quantity of the number column `name`: as QUANTITIES lists it; a difference of two
    named columns (`a_minus_b`) is a gain; a column of Table 3's layout (`<task> mean`,
    `<task> std`: kit.report.tables.wide_mean_std) an accuracy; otherwise points where its
    header names them (a gain where it says so), else None (kit.report.tables decides)."""
    if name in QUANTITIES:
        return QUANTITIES[name]
    if "_minus_" in name:
        return GAIN
    shown = label(name)
    if name.endswith((" mean", " std")) or any(word in shown for word in POINTS_WORDS):
        return GAIN if "gain" in shown and not name.endswith("std") else POINTS
    return None


def raw_names(spec: Any) -> list[str]:
    """The code names that a Vega-Lite `spec` shows a reader: keys of LABELS as a field's title
    (an encoding in a titled channel without a title, or titled with the code name itself), and
    keys of VALUES in a scale's domain (a legend's entries)."""
    found: list[str] = []
    if isinstance(spec, list):
        return [name for item in spec for name in raw_names(item)]
    if not isinstance(spec, dict):
        return found
    for channel, encoding in (spec.get("encoding") or {}).items():
        for one in encoding if isinstance(encoding, list) else [encoding]:
            if channel in TITLED_CHANNELS and isinstance(one, dict) and "field" in one:
                shown = one.get("title", one["field"])
                found += [shown] if shown in LABELS else []
            domain = (one.get("scale") or {}).get("domain") if isinstance(one, dict) else None
            found += [v for v in domain if v in VALUES] if isinstance(domain, list) else []
    return found + [name for value in spec.values() for name in raw_names(value)]
