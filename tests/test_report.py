"""Charts a reader can decode without guessing, and tables formatted for reading."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import altair as alt
import polars as pl
import pytest
from ipywidgets.widgets.widget import _instances as live_widgets  # Widget.widgets, deprecated

from kit.report import charts, tables
from kit.report.notebook_html import WIDGET_VIEW

#: longer than Vega's default legend label limit, so a shortened label would show
LONG_RUN = "rep0/direct-shape/seed0 (a run name longer than Vega's default label limit)"


def curves() -> pl.DataFrame:
    rows = [
        {"run": run, "method": method, "step": step, "loss": loss + step / 10}
        for run, method, loss in [
            ("rep0/cat1/seed0", "cat1", 1.0),
            ("rep0/cat2/seed0", "cat2", 2.0),
            ("rep0/cat2/seed1", "cat2", 3.0),
            (LONG_RUN, "direct-shape", 4.0),
        ]
        for step in (0, 10)
    ]
    return pl.DataFrame(rows)


def test_every_line_of_a_faceted_chart_is_named_in_full(tmp_path: Path, chart_texts) -> None:
    chart = charts.series_lines(
        curves(), "step", "loss", series="run", facet="method", x_title="step", y_title="loss"
    )
    (svg,) = charts.save_chart(chart, tmp_path, "curves", ["svg"])
    texts = chart_texts(svg)
    for run in curves()["run"].unique():
        assert run in texts, f"no legend entry for {run}"
    for method in ("cat1", "cat2", "direct-shape"):
        assert method in texts, f"no panel title for {method}"


def test_reference_and_chance_lines_say_what_they_are(tmp_path: Path, chart_texts) -> None:
    stats = pl.DataFrame(
        {
            "task": ["colour", "colour", "shape", "shape"],
            "n": [1, 2, 1, 2],
            "mean": [60.0, 65.0, 40.0, 45.0],
            "direct": [70.0, 70.0, 55.0, 55.0],
            "chance": [50.0, 50.0, 25.0, 25.0],
        }
    )
    title = "top-1 (%)"
    lines = alt.Chart().mark_line(point=True).encode(x="n:O", y=alt.Y("mean:Q", title=title))
    chart = alt.layer(
        lines,
        charts.reference_lines("direct", "direct training"),
        charts.chance_lines(),
        data=stats,
    ).facet(column="task:N")
    (svg,) = charts.save_chart(chart, tmp_path, "accuracy", ["svg"])
    texts = chart_texts(svg)
    for label in ("direct training 70.0", "direct training 55.0", "chance 50.0", "chance 25.0"):
        assert texts.count(label) == 1, f"{label!r} should be written once: {texts}"
    assert [t for t in texts if "top-1" in t] == [title]  # the lines add no axis title


@pytest.mark.parametrize("faceted", [False, True])
def test_a_reference_label_lies_right_of_the_plot_never_on_a_data_point(
    tmp_path: Path, faceted: bool
) -> None:
    """Points sit on the chance line at both ends of the axis; the label is written beyond the
    plotting area's right edge (a facet panel's, too), where no point can be."""
    stats = pl.DataFrame({"variant": ["cat1", "cat2", "cat4"], "mean": [10.0, 50.0, 10.0]})
    points = alt.Chart().mark_point().encode(x="variant:N", y=alt.Y("mean:Q", title="top-1"))
    chart = alt.layer(
        points,
        charts.chance_lines(),
        data=stats.with_columns(chance=pl.lit(10.0), task=pl.lit("shape")),
    ).properties(width=200, height=100)
    if faceted:
        chart = chart.facet(column="task:N", spacing=charts.LABEL_ROOM)
    (svg,) = charts.save_chart(chart, tmp_path, "chance", ["svg"])
    text = svg.read_text()
    (label_x,) = re.findall(r"<text[^>]*translate\(([\d.]+),[\d.]+\)[^>]*>chance 10.0<", text)
    point_xs = re.findall(r'aria-roledescription="point" transform="translate\(([\d.]+),', text)
    assert len(point_xs) == 3
    assert float(label_x) >= 200 > max(float(x) for x in point_xs)


@pytest.fixture
def displayed_chart(monkeypatch) -> Iterator[alt.Chart]:
    """A small chart to display; the kit's renderer for a kernel outside a Jupyter server is
    enabled again afterwards."""
    yield alt.Chart(pl.DataFrame({"x": [1, 2], "y": [3, 4]})).mark_line().encode(x="x", y="y")
    monkeypatch.delenv(charts.JUPYTER_SESSION_ENV, raising=False)
    charts.setup()


def test_displayed_chart_outside_a_jupyter_server_is_its_spec_and_an_image(
    displayed_chart, monkeypatch
) -> None:
    monkeypatch.delenv(charts.JUPYTER_SESSION_ENV, raising=False)  # papermill's and nbval's
    charts.setup()
    bundle, _ = displayed_chart._repr_mimebundle_()
    assert charts.VEGALITE_MIME.startswith("application/vnd.vegalite.v6")
    assert bundle[charts.VEGALITE_MIME]["mark"]["type"] == "line"  # what the report page draws
    assert len(bundle["image/png"]) > 100  # base64 PNG for GitHub, nbviewer, the notebooks' HTML
    assert "text/html" not in bundle  # GitHub would prefer it and strip its scripts
    assert not [m for m in bundle if "vegalite.v5" in m]  # Lab's Vega-Lite 5 would draw it


def test_displayed_chart_in_a_jupyter_server_is_a_widget_with_vega_lite_6_offline(
    displayed_chart, monkeypatch
) -> None:
    monkeypatch.setenv(charts.JUPYTER_SESSION_ENV, "notebooks/01_toy_counterexample.ipynb")
    charts.setup()
    bundle, _ = displayed_chart._repr_mimebundle_()
    assert not [m for m in bundle if "vegalite" in m]  # no spec for Lab's own Vega-Lite 5
    widget = live_widgets[bundle[WIDGET_VIEW]["model_id"]]
    assert isinstance(widget, alt.JupyterChart)
    assert widget.spec["mark"]["type"] == "line"
    assert not re.search(r"""(from|import)\s*\(?\s*["']https?:""", widget._esm)  # no CDN
    assert f'"{alt.SCHEMA_VERSION.removeprefix("v")}"' in widget._esm  # the spec's Vega-Lite


def test_wide_mean_std_keeps_numbers() -> None:
    stats = pl.DataFrame(
        {
            "method": ["cat1", "cat1", "cat2", "cat2"],
            "task": ["colour", "shape", "colour", "shape"],
            "mean": [61.23, 40.0, 65.5, 45.25],
            "std": [1.5, None, 0.25, 2.0],
        }
    )
    wide = tables.wide_mean_std(stats, ["method"], "task")
    assert wide.columns == ["method", "colour mean", "colour std", "shape mean", "shape std"]
    assert all(wide[c].dtype == pl.Float64 for c in wide.columns[1:])
    assert wide.filter(pl.col("method") == "cat2")["shape std"].item() == 2.0


@pytest.mark.parametrize(
    ("values", "places"),
    [
        ([75.58, 37.91, 90.5], 2),  # published numbers print as published
        ([0.6666667, 1.0, 0.5], 3),  # computed accuracies: three significant digits
        ([0.0478123, 0.0123456, 0.0], 4),  # their spreads too
        ([0.001, 0.003, 0.0], 3),  # small settings are not rounded away
        ([450000.0, 400000.0], 0),
        ([None, 12.345678], 1),
        ([None, None], 0),
    ],
)
def test_float_columns_get_sensible_decimals(values: list, places: int) -> None:
    assert tables.decimals(pl.Series(values, dtype=pl.Float64)) == places


def test_table_reads_without_quotes_or_long_floats() -> None:
    frame = pl.DataFrame(
        {
            "training": ["mixture, kept phi1", "direct"],
            "n": [3, 2],
            "mean": [0.6666667, 1.0],
            "std": [0.0478123, None],
        }
    )
    shown = tables.table(frame)
    text, page = repr(shown), shown._repr_html_()
    # the mean to the precision its std supports (two significant digits of the std)
    assert "0.667" in text and "0.6666667" not in text and "0.048" in text and "0.0478" not in text
    assert '"' not in text and "&quot;" not in page
    assert '<td style="text-align:left">mixture, kept φ1</td>' in page  # by its symbol
    assert shown.frame["mean"].dtype == pl.Float64  # the numbers stay numbers


def test_short_names_drop_the_shared_folders() -> None:
    assert charts.short_names(
        ["/o/ci/time_concat/rep0/cat2/seed550", "/o/ci/time_concat/rep1/cat1/seed0"]
    ) == ["rep0/cat2/seed550", "rep1/cat1/seed0"]
    assert charts.short_names(["/o/a/seed0"]) == ["seed0"]
