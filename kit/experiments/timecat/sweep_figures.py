"""Notebook 04's chart: catN's gain over cat1 and over its best control against the budget, per
probe task and world seed, with where each variant's models learn the pretraining task."""

from __future__ import annotations

import altair as alt
import polars as pl


def gain_chart(gains: pl.DataFrame, learned: pl.DataFrame) -> alt.FacetChart:
    """One panel per world seed (rows) and task (columns): the mean gain in points (lines and
    points, solid over the baseline, dashed over the best control) with its Holm-adjusted
    interval, a zero line, and vertical rules where each variant's models reach the saturation
    share of cat1's own in-distribution accuracy (`learned`, kit.experiments.timecat.sweep)."""
    tasks = gains.select("task").unique(maintain_order=True)
    rules = (learned.filter(pl.col("learned_at").is_not_null())
             .join(tasks, how="cross")
             .select("world_seed", "task", "variant", pl.col("learned_at").alias("budget"),
                     pl.lit("learned").alias("layer")))
    data = pl.concat([gains.with_columns(pl.lit("gain").alias("layer")), rules],
                     how="diagonal_relaxed")
    x = alt.X("budget:Q", scale=alt.Scale(type="log"), title="total budget (iterations)")
    colour = alt.Color("variant:N", title="variant")
    gain = alt.Chart().transform_filter(alt.datum.layer == "gain")
    lines = gain.mark_line(point=True).encode(
        x=x, y=alt.Y("gain_mean:Q", title="gain (points)"), color=colour,
        strokeDash=alt.StrokeDash("against:N", title="gain over"),
        tooltip=["world_seed", "budget", "task", "variant", "against", "baseline",
                 "gain_mean", "low", "high", "verdict"])
    bars = gain.mark_errorbar().encode(x=x, y=alt.Y("low:Q", title="gain (points)"), y2="high:Q",
                                       color=colour)
    zero = alt.Chart().mark_rule(color="grey").encode(y=alt.datum(0))
    marks = (alt.Chart().transform_filter(alt.datum.layer == "learned")
             .mark_rule(strokeDash=[2, 2], opacity=0.7)
             .encode(x=x, color=colour, tooltip=["world_seed", "variant", "budget"]))
    return (alt.layer(lines, bars, zero, marks, data=data)
            .properties(width=170, height=140)
            .facet(row=alt.Row("world_seed:N", title="world seed"),
                   column=alt.Column("task:N", title=None)))
