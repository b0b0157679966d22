"""Notebook 02's charts of the surveyed evidence (kit.experiments.evidence): each source's values
as dots, differences with the paper's reading of them, and the concatenation series, one colour
per concept across the notebooks (kit.report.palette)."""

from __future__ import annotations

import re
from typing import Any

import altair as alt
import polars as pl

from kit.experiments import evidence
from kit.readout.numbers import GAIN, POINTS
from kit.readout.scalars import as_float
from kit.report import charts, labels, palette

#: panels a row of a chart with one panel per dataset: the four datasets wrap to two rows, so
#: that the chart fits a notebook's column in a 1,280-px window rather than scroll sideways
FACET_COLUMNS = 2


def concept(label: str) -> str:
    """The name whose palette colour a label of these charts takes, so that a concept has one
    colour in every notebook: a difference its first term's ('cat2 − cat1': cat2), a
    concatenation of ResNet-50s its catN's (cat4resnet50, '4 concatenated ResNet-50s': cat4), a
    wider ResNet-50 the wide family's (resnet50w2, 'a 2× wide ResNet-50': wide2), a pretraining
    its kind ('supervised (ImageNet-1k)': supervised)."""
    first = label.split(" − ")[0].split(" (")[0]
    if found := re.fullmatch(r"cat(\d+)resnet50|(\d+) concatenated ResNet-50s", first):
        return f"cat{found[1] or found[2]}"
    if found := re.fullmatch(r"resnet50w(\d+)|(?:an? )?(\d+)× wide ResNet-50", first):
        return f"wide{found[1] or found[2]}"
    return first


def _source_concept(shown: str) -> str:
    """How a published value was obtained, as shown, back to the name its colour is keyed by
    ('printed in a table': table), so the colour stays the one every notebook gives it."""
    return {text: source for source, text in labels.VALUES.items()}[shown]


def _colour(field: str, frame: pl.DataFrame, **kwargs: Any) -> alt.Color:
    """A colour channel on `field` with each of its values in its palette colour."""
    values = sorted(frame[field].drop_nulls().unique().to_list())
    return alt.Color(f"{field}:N", scale=palette.scale(values, concept), **kwargs)


def dot_plot(frame: pl.DataFrame, series: str, title: str) -> alt.FacetChart:
    """Each method's accuracy per evaluation dataset, as dots on a zoomed axis (bars would
    claim a zero they do not show). Datasets sit 50 points apart (iNat18 near 40 %, CIFAR-10
    near 93 %), so each gets its own axis; the gaps are charted on a shared scale by
    `difference_chart`."""
    frame = labels.readable(frame)
    order = frame[series].unique(maintain_order=True).to_list()
    sources = [labels.VALUES[source] for source in sorted(evidence.VALUE_SOURCES)]
    return (
        alt.Chart(frame)
        .transform_calculate(
            read_within="isValid(datum.uncertainty) ? '± ' + format(datum.uncertainty, '.1f') "
            "+ ' points' : 'as printed'"
        )
        .mark_point(filled=True, size=70)
        .encode(
            y=alt.Y(f"{series}:N", title=None, sort=order),
            x=alt.X("value:Q", title="top-1 (%)", scale=alt.Scale(zero=False, padding=8)),
            color=alt.Color(
                "value_source:N", title="value", scale=palette.scale(sources, _source_concept)
            ),
            tooltip=charts.tooltips(
                frame,
                ["study", "method", "architecture", "eval_dataset", "value", "value_source"],
                {"value": POINTS},
            )
            + [alt.Tooltip("read_within:N", title="read to within")],
        )
        .properties(width=150, height=alt.Step(18))
        .facet(
            facet=alt.Facet("eval_dataset:N", sort=evidence.TRANSFER_DATASETS, title=None),
            columns=FACET_COLUMNS,
            title=alt.Title(title, subtitle="zoomed: each dataset on its own axis, not from 0"),
        )
        .resolve_scale(x="independent")
    )


def difference_chart(
    frame: pl.DataFrame, comparison: str, value: str, title: str
) -> alt.LayerChart | alt.FacetChart:
    """Differences per evaluation dataset as bars from zero on one shared scale, each bar
    with its value written on it, so gaps of a point or two stay visible and comparable."""
    data = frame.filter(pl.col(value).is_not_null())
    datasets = [
        d
        for d in evidence.TRANSFER_DATASETS
        + data["eval_dataset"].unique(maintain_order=True).to_list()
        if d in data["eval_dataset"].to_list()
    ]
    base = alt.Chart(data, title=title).encode(
        x=alt.X(
            "eval_dataset:N",
            title=None,
            sort=list(dict.fromkeys(datasets)),
            axis=alt.Axis(labelAngle=0),
        ),
        xOffset=alt.XOffset(f"{comparison}:N"),
        color=_colour(comparison, data, title=None, legend=alt.Legend(orient="bottom", columns=1)),
        y=alt.Y(
            f"{value}:Q", title="difference (points)", scale=alt.Scale(domain=_padded(data[value]))
        ),
    )
    bars = base.mark_bar().encode(
        tooltip=charts.tooltips(data, ["eval_dataset", comparison, value], {value: GAIN})
    )
    text = alt.Text(f"{value}:Q", format=GAIN.d3)
    above = (
        base.transform_filter(f"datum['{value}'] >= 0")
        .mark_text(baseline="bottom", dy=-2, fontSize=9)
        .encode(text=text)
    )
    below = (
        base.transform_filter(f"datum['{value}'] < 0")
        .mark_text(baseline="top", dy=2, fontSize=9)
        .encode(text=text)
    )
    zero = alt.Chart().mark_rule(color="black").encode(y=alt.datum(0))
    return alt.layer(bars, above, below, zero).properties(width=alt.Step(30), height=220)


def _padded(values: pl.Series) -> list[float]:
    """A domain from zero to the extremes with room for the labels above and below the bars."""
    low, high = min(0.0, as_float(values.min())), max(0.0, as_float(values.max()))
    room = 0.15 * (high - low or 1.0)
    return [low - room if low < 0 else 0.0, high + room if high > 0 else 0.0]


def table1_gap_frame(gap: pl.DataFrame) -> pl.DataFrame:
    """`transfer_gap` rows as the differences Table 1a's text talks about."""
    return gap.select(
        "eval_dataset",
        pl.col("metric").str.replace(r" \(%\)$", "").alias("comparison"),
        pl.col("direct minus transfer").alias("points"),
    )


def table2_gain_frame(gains: pl.DataFrame) -> pl.DataFrame:
    """`ensemble_gains` as long rows: one per dataset and comparison, the comparison in words
    (kit.report.labels), which `concept` colours as the models it names."""
    names = {
        "cat4resnet50_minus_resnet50w2": f"{labels.label('cat4resnet50_minus_resnet50w2')} "
        "(same width)",
        "resnet50w2_minus_resnet50": f"{labels.label('resnet50w2_minus_resnet50')} "
        "(widening alone)",
    }
    return gains.unpivot(
        index="eval_dataset", on=list(names), variable_name="comparison", value_name="points"
    ).with_columns(pl.col("comparison").replace_strict(names))


def table3_gain_frame(gains: pl.DataFrame) -> pl.DataFrame:
    """`time_concat_gains` as long rows: catN − cat1 per dataset (cat1 itself left out)."""
    return (
        gains.filter(pl.col("n_models") > 1)
        .unpivot(
            index="method",
            on=[evidence.gain_column(d) for d in evidence.TRANSFER_DATASETS],
            variable_name="column",
            value_name="points",
        )
        .select(
            pl.col("column")
            .replace_strict({evidence.gain_column(d): d for d in evidence.TRANSFER_DATASETS})
            .alias("eval_dataset"),
            pl.format("{} − cat1", "method").alias("comparison"),
            "points",
        )
    )


def series_chart(series: pl.DataFrame) -> alt.FacetChart:
    """Accuracy against size; datasets sit 50 points apart, so each panel has its own axis."""
    data = labels.readable(
        series.filter(pl.col("resnet50_equivalents").is_not_null() & pl.col("value").is_not_null())
    )
    base = alt.Chart().encode(
        x=alt.X("resnet50_equivalents:Q", title="size (ResNet-50 equivalents)"),
        y=alt.Y(
            "value:Q",
            title="linear-probe top-1 (%), own axis per dataset",
            scale=alt.Scale(zero=False),
        ),
        color=_colour("pretraining", data, title="pretraining"),
        shape=alt.Shape(
            "kind:N",
            title="model",
            scale=alt.Scale(domain=["concatenation", "wider network"], range=["circle", "diamond"]),
        ),
        tooltip=charts.tooltips(
            data,
            ["pretraining", "architecture", "eval_dataset", "value", "value_source"],
            {"value": POINTS},
        ),
    )
    lines = base.transform_filter(alt.datum.kind == "concatenation").mark_line(point=True)
    wide = base.transform_filter(alt.datum.kind == "wider network").mark_point(
        size=120, filled=True
    )
    return charts.wrapped(
        alt.layer(lines, wide, data=data).properties(width=170, height=170),
        alt.Facet("eval_dataset:N", sort=evidence.TRANSFER_DATASETS, title=None),
        FACET_COLUMNS,
    ).resolve_scale(y="independent")
