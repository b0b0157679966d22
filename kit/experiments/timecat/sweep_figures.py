"""Notebook 04's chart: the time-concat claim's primary endpoint against the budget (catN's gain
over cat1 and over each control, mean over the transfer tasks, with its 95 % interval), per
world seed, with the smallest effect of interest and where each variant's models learn the
pretraining task."""

from __future__ import annotations

import altair as alt
import polars as pl

from kit.experiments.timecat import sweep_outcome
from kit.readout.numbers import GAIN
from kit.report import palette


def gains(swept: sweep_outcome.Swept) -> alt.FacetChart | str:
    """Notebook 04's gain chart (`gain_chart`) of what the sweep measured; for a profile that
    sweeps no budget, or only one (one x position, nothing to compare), the sentence saying so
    (`charts.chart_saver`'s `show` displays it and saves nothing)."""
    if not swept.cells:
        return sweep_outcome.not_swept("no gain to draw")
    one = swept.one_budget()
    if one is not None:
        return (
            f"This run swept one total budget ({one:,} iterations): a gain against the budget "
            "needs two or more, so no chart is drawn; the gain at this budget is in the verdicts "
            "below. A second budget places a crossover, if there is one, between the two (the "
            "cpu profile sweeps 60 and 240 iterations; the sweep profile six budgets on three "
            "worlds; what each costs on 2 cores: docs, Notebook 04, Profiles and cost)."
        )
    return gain_chart(swept.judged.verdicts, swept.learned, swept.cells[0].settings.smallest_effect)


def gain_chart(verdicts: pl.DataFrame, learned: pl.DataFrame, smallest: float) -> alt.FacetChart:
    """One panel per world seed: per condition the mean gain of catN (in catN's colour, the same
    as in notebook 03) in points with its 95 % interval, over the baseline (solid line, circles)
    and over each control (dashed, one shape per control), a zero line, a dotted line at the
    smallest effect of interest, and vertical rules where each variant's models reach the
    saturation share of cat1's own in-distribution accuracy (`learned`,
    kit.experiments.timecat.sweep_outcome). The legends name only what is drawn. The budgets
    (two or more) lie on a log axis spanning them."""
    baseline = verdicts["against"].first()
    gains = verdicts.select(
        "world_seed",
        "budget",
        "variant",
        "condition",
        "mean",
        "low",
        "high",
        "judgement",
        "replicates",
        pl.format(
            "{} ({})",
            "against",
            pl.when(pl.col("against") == baseline)
            .then(pl.lit("the baseline"))
            .otherwise(pl.lit("a control")),
        ).alias("over"),
        pl.lit("gain").alias("layer"),
    )
    rules = learned.filter(pl.col("learned_at").is_not_null()).select(
        "world_seed",
        "variant",
        pl.col("learned_at").alias("budget"),
        pl.lit("learned").alias("layer"),
    )
    data = pl.concat([gains, rules], how="diagonal_relaxed")
    budgets = sorted({int(budget) for budget in verdicts["budget"]})
    x = alt.X(
        "budget:Q",
        scale=_budget_scale(budgets),
        axis=alt.Axis(values=budgets),
        title="total budget (iterations)",
    )
    colour = alt.Color(
        "variant:N",
        title="variant",
        scale=palette.scale(data["variant"].unique(maintain_order=True)),
    )
    over = list(dict.fromkeys(gains.sort(pl.col("over").str.contains("a control"))["over"]))
    dash = alt.StrokeDash(
        "over:N",
        title="gain over",
        scale=alt.Scale(domain=over, range=[[1, 0]] + [[4, 3]] * (len(over) - 1)),
    )
    shape = alt.Shape(
        "over:N", title="gain over", scale=alt.Scale(domain=over, range=SHAPES[: len(over)])
    )
    gain = alt.Chart().transform_filter(alt.datum.layer == "gain")
    tooltip = [
        alt.Tooltip("world_seed:N", title="world seed"),
        alt.Tooltip("budget:Q", title="budget"),
        alt.Tooltip("condition:N", title="condition"),
        alt.Tooltip("mean:Q", title="mean gain (points)", format=GAIN.d3),
        alt.Tooltip("low:Q", title="95% interval, low", format=GAIN.d3),
        alt.Tooltip("high:Q", title="95% interval, high", format=GAIN.d3),
        alt.Tooltip("judgement:N", title="judgement"),
    ]
    title = "gain (points)"
    y = alt.Y("mean:Q", title=title)
    lines = gain.mark_line().encode(x=x, y=y, color=colour, strokeDash=dash, detail="over:N")
    points = gain.mark_point(filled=True, size=60).encode(
        x=x, y=y, color=colour, shape=shape, tooltip=tooltip
    )
    bars = gain.mark_errorbar().encode(
        x=x, y=alt.Y("low:Q", title=title), y2="high:Q", color=colour, tooltip=tooltip
    )
    zero = alt.Chart().mark_rule(color="grey").encode(y=alt.datum(0))
    least = alt.Chart().mark_rule(color="grey", strokeDash=[1, 3]).encode(y=alt.datum(smallest))
    marks = (
        alt.Chart()
        .transform_filter(alt.datum.layer == "learned")
        .mark_rule(strokeDash=[2, 2], opacity=0.7, clip=True)
        .encode(
            x=x,
            color=colour,
            tooltip=[
                alt.Tooltip("variant:N", title="models of"),
                alt.Tooltip("budget:Q", title="learn the mixture from"),
            ],
        )
    )
    return (
        alt.layer(lines, points, bars, zero, least, marks, data=data)
        .properties(width=320, height=180)
        .facet(row=alt.Row("world_seed:N", title=None, header=SEED_HEADER))
        .properties(
            title=f"catN's gain on the mean transfer top-1 with 95% intervals; dotted: "
            f"the smallest effect of interest ({smallest:g}) and where each "
            "variant's models learn the mixture"
        )
    )


#: each panel's title above it ("world seed 0"), apart from the y-axis title at its left, which
#: a row header's title and label would stand beside and read as part of
SEED_HEADER = alt.Header(
    labelExpr="'world seed ' + datum.value", labelAngle=0, labelOrient="top", labelAnchor="start"
)
#: the point shape of each comparison: the baseline's first, then one per control
SHAPES = ["circle", "triangle-up", "square", "diamond", "triangle-down", "cross"]


def _budget_scale(budgets: list[int]) -> alt.Scale:
    """The budgets (ascending, two or more: `gains` draws no chart of one) on a log scale
    spanning them (each doubles the last)."""
    return alt.Scale(type="log", domain=[budgets[0], budgets[-1]])
