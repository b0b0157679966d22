"""Notebook 04's chart: the time-concat claim's primary endpoint against the budget (catN's gain
over cat1 and over each control, mean over the transfer tasks, with its 95 % interval), per
world seed, with the smallest effect of interest and where each variant's models learn the
pretraining task."""

from __future__ import annotations

import altair as alt
import polars as pl

from kit.report import palette


def gain_chart(verdicts: pl.DataFrame, learned: pl.DataFrame, smallest: float) -> alt.FacetChart:
    """One panel per world seed: per condition (catN against the baseline, solid; against each
    control, dashed) the mean gain in points with its 95 % interval, a zero line, a dotted line
    at the smallest effect of interest, and vertical rules where each variant's models reach the
    saturation share of cat1's own in-distribution accuracy (`learned`,
    kit.experiments.timecat.sweep)."""
    gains = verdicts.select(
        "world_seed",
        "budget",
        "variant",
        "against",
        "condition",
        "mean",
        "low",
        "high",
        "judgement",
        "replicates",
        pl.when(pl.col("condition") == verdicts["condition"].first())
        .then(pl.lit("the baseline"))
        .otherwise(pl.lit("a control"))
        .alias("over"),
        pl.lit("gain").alias("layer"),
    )
    rules = learned.filter(pl.col("learned_at").is_not_null()).select(
        "world_seed",
        pl.col("variant").alias("against"),
        pl.col("learned_at").alias("budget"),
        pl.lit("learned").alias("layer"),
    )
    data = pl.concat([gains, rules], how="diagonal_relaxed")
    budgets = sorted(set(verdicts["budget"].to_list()))
    # one budget (the default job's) has no range to span: a log axis around it
    span = [budgets[0], budgets[-1]] if len(budgets) > 1 else [budgets[0] / 2, budgets[0] * 2]
    x = alt.X(
        "budget:Q",
        scale=alt.Scale(type="log", domain=span, zero=False),
        axis=alt.Axis(values=budgets),
        title="total budget (iterations)",
    )
    names = sorted(set(data["against"].drop_nulls().to_list()))
    colour = alt.Color("against:N", title="variant", scale=palette.scale(names))
    dash = alt.StrokeDash(
        "over:N",
        title="gain over",
        scale=alt.Scale(domain=["the baseline", "a control"], range=[[1, 0], [4, 3]]),
    )
    gain = alt.Chart().transform_filter(alt.datum.layer == "gain")
    tooltip = [
        alt.Tooltip("world_seed:N", title="world seed"),
        alt.Tooltip("budget:Q", title="budget"),
        alt.Tooltip("condition:N", title="condition"),
        alt.Tooltip("mean:Q", title="mean gain (points)", format="+.1f"),
        alt.Tooltip("low:Q", title="95% interval, low", format="+.1f"),
        alt.Tooltip("high:Q", title="95% interval, high", format="+.1f"),
        alt.Tooltip("judgement:N", title="judgement"),
    ]
    title = "gain (points)"
    lines = gain.mark_line(point=True).encode(
        x=x, y=alt.Y("mean:Q", title=title), color=colour, strokeDash=dash, tooltip=tooltip
    )
    bars = gain.mark_errorbar().encode(
        x=x, y=alt.Y("low:Q", title=title), y2="high:Q", color=colour, tooltip=tooltip
    )
    zero = alt.Chart().mark_rule(color="grey").encode(y=alt.datum(0))
    least = alt.Chart().mark_rule(color="grey", strokeDash=[1, 3]).encode(y=alt.datum(smallest))
    marks = (
        alt.Chart()
        .transform_filter(alt.datum.layer == "learned")
        .mark_rule(strokeDash=[2, 2], opacity=0.7)
        .encode(
            x=x,
            color=colour,
            tooltip=[
                alt.Tooltip("against:N", title="models of"),
                alt.Tooltip("budget:Q", title="learn the mixture from"),
            ],
        )
    )
    return (
        alt.layer(lines, bars, zero, least, marks, data=data)
        .properties(width=320, height=180)
        .facet(row=alt.Row("world_seed:N", title="world seed"))
        .properties(
            title=f"catN's gain on the mean transfer top-1 with 95% intervals; dotted: "
            f"the smallest effect of interest ({smallest:g}) and where each "
            "variant's models learn the mixture"
        )
    )
