"""The charts and displayed tables of notebook 01 (the toy counterexample of the paper's
Section 3), and its interactive panel: how kit.experiments.toy's constructions and results are
shown. An accuracy or an error rate a reader sees is in % to one decimal (kit.readout.numbers'
POINTS), as in every other notebook; the result files keep their fractions."""

from __future__ import annotations

import altair as alt
import polars as pl
import torch

from kit.experiments import toy, toy_construction
from kit.experiments.toy_settings import SparseTrainingSettings
from kit.readout.numbers import MEAN_COUNT, POINTS
from kit.readout.progress import Described
from kit.readout.scalars import as_float
from kit.report import charts, labels, palette, tables

# ---------------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------------

#: the order of the kept-feature labels in charts and tables
KEPT_ORDER = ["phi1", "phi2", "both", "none"]
#: the same labels as a chart shows them (the features by their symbols: kit.report.labels)
KEPT_SHOWN = [labels.value_text("kept", kept) for kept in KEPT_ORDER]
#: panels a row of a chart with one panel per component: the four components wrap to two
#: rows, so that the chart fits a notebook's column in a 1,280-px window
FACET_COLUMNS = 2
#: the concatenation chart's numbers: means of components solved (kit.readout.numbers)
MEAN_COUNTS = dict.fromkeys(["mean", "std", "low", "high"], MEAN_COUNT)
#: the accuracy chart's numbers: probe accuracies in % (kit.readout.numbers)
PERCENT = dict.fromkeys(["mean", "std", "low", "high"], POINTS)
#: the columns of toy.accuracy_table as its displayed table heads them, in % (as notebook 03's
#: "top-1 %" and "top-1 % std")
ACCURACY_HEADERS = {"mean": "accuracy %", "std": "accuracy % std"}


def percent(values: pl.Expr) -> pl.Expr:
    """Fractions (a probe's accuracy, a classifier's error on a mixture) in %, as a reader
    reads them (keeping the columns' names)."""
    return values * 100


def accuracy_table(table: pl.DataFrame) -> pl.DataFrame:
    """toy.accuracy_table as notebook 01 displays it: the mean and std of the probe accuracy
    in % (its result file keeps the fractions)."""
    return table.with_columns(percent(pl.col(*ACCURACY_HEADERS))).rename(ACCURACY_HEADERS)


def optimum_table(shares: list[float]) -> pl.DataFrame:
    """toy_construction.optimum_table as notebook 01 displays it: the least-error classifier's
    error (the mixture's mass it gives up) in %, beside the masses of the support points."""
    table = toy_construction.optimum_table(shares)
    return table.with_columns(percent(pl.col("error"))).rename({"error": "error %"})


def all_solved_table(fresh: pl.DataFrame, shared: pl.DataFrame) -> pl.DataFrame:
    """toy.all_solved_by_k as notebook 01 displays it: the groups solving every component in %
    of the groups of each size k, as its summary says them (its result file keeps fractions)."""
    table = toy.all_solved_by_k(fresh, shared)
    shown = [c for c in table.columns if c != "k"]
    return table.with_columns(percent(pl.col(*shown))).rename({c: f"{c} %" for c in shown})


def construction_chart() -> alt.FacetChart:
    """Each component's support points in the (φ1, φ2) plane, with their labels."""
    rows = []
    for c, name in enumerate(toy_construction.COMPONENT_NAMES):
        needs = toy_construction.FEATURES[toy_construction.COMPONENT_FEATURE[c]]
        for p, point in enumerate(toy_construction.POINT_NAMES):
            if toy_construction.COMPONENT_MASSES[c, p] > 0:
                rows.append(
                    {
                        "component": f"{name} (needs {labels.label(needs)})",
                        "point": point,
                        "phi1": float(toy_construction.POINTS[p, 0]),
                        "phi2": float(toy_construction.POINTS[p, 1]),
                        "label": "positive" if toy_construction.LABELS[p] == 1 else "negative",
                    }
                )
    frame = pl.DataFrame(rows)
    base = alt.Chart(frame).encode(
        x=alt.X("phi1:Q", title="feature φ1", scale=alt.Scale(domain=[-1.5, 1.5])),
        y=alt.Y("phi2:Q", title="feature φ2", scale=alt.Scale(domain=[-1.5, 1.5])),
    )
    classes = ["positive", "negative"]
    points = base.mark_point(filled=True, size=160).encode(
        color=alt.Color("label:N", scale=palette.scale(classes), title="label"),
        shape=alt.Shape("label:N", scale=alt.Scale(domain=classes), title="label"),
        tooltip=charts.tooltips(frame, ["component", "point", "label", "phi1", "phi2"]),
    )
    text = base.mark_text(dx=12, dy=-10).encode(text="point:N")
    return charts.wrapped(
        (points + text).properties(width=150, height=150),
        alt.Facet("component:N", title="component"),
        FACET_COLUMNS,
    )


def kept_chart(runs: pl.DataFrame) -> alt.FacetChart:
    """How many mixture-trained models kept each feature, by dominant component and weight."""
    counts = labels.readable(
        runs.group_by(["dominant", "share", "kept"])
        .len()
        .with_columns(
            pl.col("kept").replace_strict(KEPT_ORDER, range(len(KEPT_ORDER))).alias("stacked")
        )
    )
    chart = (
        alt.Chart(counts)
        .mark_bar()
        .encode(
            x=alt.X("share:O", title="weight of the dominant component"),
            y=alt.Y("len:Q", title="trained models"),
            color=alt.Color("kept:N", scale=palette.scale(KEPT_SHOWN), title="features kept"),
            order=alt.Order("stacked:Q"),  # KEPT_ORDER's rank: a nominal field has no order
            tooltip=charts.tooltips(counts, ["dominant", "share", "kept", "len"]),
        )
        .properties(width=170, height=160)
    )
    return charts.wrapped(chart, alt.Facet("dominant:N", title="dominant component"), FACET_COLUMNS)


def accuracy_chart(table: pl.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Probe accuracy per component and representation (toy.accuracy_table), in %, with
    chance."""
    chance = toy.majority_accuracy()
    shown = table.with_columns(percent(pl.col("mean", "std")))
    data = labels.readable(charts.error_bounds(shown, (0, 100))).with_columns(
        percent(pl.col("component").replace_strict(chance)).alias("chance")
    )
    title = "linear-probe accuracy (%, mean ± std)"
    base = alt.Chart(data).encode(
        x=alt.X("component:N", title="component"),
        xOffset="training:N",
        color=alt.Color(
            "training:N",
            title="representation",
            scale=palette.scale(sorted(data["training"]), key=_kept_name),
        ),
    )
    bars = base.mark_bar().encode(
        y=alt.Y("mean:Q", title=title, scale=alt.Scale(domain=[0, 100])),
        tooltip=charts.tooltips(data, ["training", "component", "n", "mean", "std"], PERCENT),
    )
    rules = base.mark_rule(color="black").encode(y=alt.Y("low:Q", title=title), y2="high:Q")
    return alt.layer(
        bars, rules, charts.chance_lines(number_format=POINTS.d3), data=data
    ).properties(width=420, height=220)


def _kept_name(training: str) -> str:
    """The palette name of a representation: 'mixture, kept φ1' is coloured as φ1, 'direct
    on the component' as the direct variant."""
    return training.rsplit(" ", 1)[-1] if training.startswith("mixture") else "direct"


def concat_chart(concat: pl.DataFrame) -> alt.LayerChart:
    """Components solved by concatenations of k models, by dominant weight."""
    data = concat.group_by(["share", "k"]).agg(
        pl.col("components_solved").mean().alias("mean"),
        pl.col("components_solved").std().fill_null(0).alias("std"),
        pl.len().alias("groups"),
    )
    data = charts.error_bounds(data, (0, len(toy_construction.COMPONENT_NAMES)))
    base = alt.Chart(data).encode(
        x=alt.X("k:O", title="models concatenated"),
        color=alt.Color("share:O", title="dominant weight"),
    )
    title = "components solved (of 4, mean ± std)"
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title=title, scale=alt.Scale(domain=[0, 4])),
        tooltip=charts.tooltips(data, ["share", "k", "groups", "mean", "std"], MEAN_COUNTS),
    )
    band = base.mark_errorbar().encode(
        y=alt.Y("low:Q", title=title),
        y2="high:Q",
        tooltip=charts.spread_tooltips(data, ["share", "k"], MEAN_COUNTS),
    )
    return (line + band).properties(width=320, height=220)


def sparsity_chart(sweep: pl.DataFrame) -> alt.Chart:
    """The share of models keeping each feature as the sparsity bias grows."""
    counts = labels.readable(sweep.group_by(["weight_decay", "kept"]).len())
    return (
        alt.Chart(counts)
        .mark_bar()
        .encode(
            x=alt.X("weight_decay:O", title="weight decay (sparsity bias)"),
            y=alt.Y(
                "len:Q",
                stack="normalize",
                title="share of trained models",
                axis=alt.Axis(format="%"),  # in %, as the notebook's sentences say shares
            ),
            color=alt.Color("kept:N", scale=palette.scale(KEPT_SHOWN), title="features kept"),
            tooltip=charts.tooltips(counts, ["weight_decay", "kept", "len"]),
        )
        .properties(width=320, height=200)
    )


# ---------------------------------------------------------------------------------------------
# Interactive exploration (JupyterLab); nothing runs until the button is pressed
# ---------------------------------------------------------------------------------------------


def interactive_panel(config: SparseTrainingSettings, seed: int, replicates: int = 8) -> Described:
    """Sliders for the four mixture weights and a button that trains and probes `replicates`
    sparse models on that mixture. Headless runs only display the (inert) widgets, which read
    as a sentence where no frontend draws them."""
    import ipywidgets as widgets
    from IPython.display import display

    sliders = [
        widgets.FloatSlider(
            value=0.25, min=0.0, max=1.0, step=0.05, description=name, continuous_update=False
        )
        for name in toy_construction.COMPONENT_NAMES
    ]
    button = widgets.Button(description=f"train {replicates} models")
    output = widgets.Output()

    def train_clicked(_: object) -> None:
        weights = torch.tensor([s.value for s in sliders])
        if weights.sum() <= 0:
            with output:
                output.clear_output()
                print("set at least one weight above zero")
            return
        weights = (weights / weights.sum()).repeat(replicates, 1)
        models = toy.train_sparse(weights, config, seed)
        probe = toy.probe_components(models.representation_maps(), config, seed + 2)
        table = pl.DataFrame(
            {
                "kept": toy.kept_label(models.kept),
                **{
                    f"{c} accuracy %": (100 * probe[:, i]).tolist()
                    for i, c in enumerate(toy_construction.COMPONENT_NAMES)
                },
            }
        )
        optimum = toy_construction.optimal_mixture_classifier(weights[0])
        with output:
            output.clear_output()
            print(
                "normalised weights:",
                ", ".join(
                    f"{name} {w:.2f}"
                    for name, w in zip(
                        toy_construction.COMPONENT_NAMES, weights[0].tolist(), strict=True
                    )
                ),
            )
            print(
                f"least-error linear classifier: gives up points {optimum['dropped']} "
                f"(error {POINTS.text(100 * as_float(optimum['error']))}%), uses "
                f"{labels.value_text('features', str(optimum['features']))}"
            )
            display(
                tables.table(
                    table.group_by("kept")
                    .agg(pl.len().alias("models"), pl.col("^.* accuracy %$").mean())
                    .sort("kept")
                )
            )

    button.on_click(train_clicked)
    panel = widgets.VBox([widgets.HBox(sliders[:2]), widgets.HBox(sliders[2:]), button, output])
    return Described(
        panel,
        "(an interactive panel: sliders for the four mixture weights and a "
        "button that trains models on them; open the notebook in JupyterLab to use "
        "it)",
    )
