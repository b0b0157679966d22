"""Charts that are interactive in JupyterLab and still render as images anywhere else, and saved.

In a kernel a Jupyter server started (JupyterLab, Notebook 7), a displayed chart is altair's
`JupyterChart` widget: vega-embed with the Vega-Lite 6 the charts are written in, its JavaScript
bundled by vl-convert from the installed `vl-convert-python` package, so nothing is fetched from
the internet and the version Vega draws with is the version of the spec (JupyterLab's built-in
Vega extension draws Vega-Lite 5 and warns on every Vega-Lite 6 spec). Anywhere else (papermill,
nbval, a plain IPython) a displayed chart carries its Vega-Lite 6 spec, which the report page
draws, and a PNG drawn by vl-convert, which the executed notebooks' HTML, GitHub and nbviewer
show. Charts are also saved as PNG, SVG and self-contained HTML.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal, cast

import altair as alt
import polars as pl
from altair.vegalite.v6.display import png_renderer
from IPython.display import Markdown

from kit.readout.numbers import OTHER, Quantity
from kit.report import palette
from kit.report.labels import label, quantity

CHART_FORMATS = ("png", "svg", "html")
#: the MIME type of a displayed chart's spec outside a Jupyter server, named as Jupyter names
#: the earlier ones (`application/vnd.vegalite.v5+json`): no JupyterLab 4 renderer claims it, so
#: an executed copy opened in Lab shows the PNG rather than drawing the spec with Lab's older
#: Vega-Lite. (altair 6's own name, `...v6.json`, lacks the `+json` under which nbformat's schema
#: accepts a JSON value, so a notebook holding it would not validate.)
VEGALITE_MIME = "application/vnd.vegalite.v6+json"
#: the environment variable jupyter_server sets for the kernels of its sessions (the notebook's
#: path); `python -m kit run` removes it for the kernels it starts
JUPYTER_SESSION_ENV = "JPY_SESSION_NAME"
RENDERER = "kit"
#: altair's renderer of JupyterChart widgets
WIDGET_RENDERER = "jupyter"
THEME = "kit"
REFERENCE_COLOR = "#555555"
#: pixels between facet panels that leaves room for a reference line's label ("Bayes ceiling
#: 100.0" at 10 px) right of its panel
LABEL_ROOM = 105


def _render(spec: dict[str, Any], **metadata: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Altair renderer outside a Jupyter server: the spec for the report page and a PNG for
    everything else."""
    # altair annotates png_renderer's result as one bundle or a pair; with PNG output it is a pair
    bundle, png_metadata = cast(
        tuple[dict[str, Any], dict[str, Any]], png_renderer(spec, **metadata)
    )
    return ({VEGALITE_MIME: spec, **bundle, "text/plain": "<chart>"}, png_metadata)


@alt.theme.register(THEME, enable=False)
def _theme() -> alt.theme.ThemeConfig:
    """Altair's defaults, with legend and facet labels never shortened to '…'."""
    return {
        "config": {
            "view": {"continuousWidth": 300, "continuousHeight": 300},
            "legend": {"labelLimit": 0, "titleLimit": 0},
            "header": {"labelLimit": 0, "titleLimit": 0},
        }
    }


def in_jupyter_server() -> bool:
    """Whether a Jupyter server (JupyterLab, Notebook 7) started this kernel, so that a browser
    with the widget manager shows its outputs."""
    return bool(os.environ.get(JUPYTER_SESSION_ENV))


def setup() -> None:
    """Charts in the kit's theme, with no limit on the rows a chart embeds: in a Jupyter
    server's kernel JupyterChart widgets with their JavaScript bundled offline, elsewhere the
    spec and a PNG."""
    if in_jupyter_server():
        alt.renderers.enable(WIDGET_RENDERER, offline=True)
    else:
        alt.renderers.register(RENDERER, _render)
        alt.renderers.enable(RENDERER)
    alt.theme.enable(THEME)
    alt.data_transformers.disable_max_rows()


def save_chart(
    chart: alt.TopLevelMixin, folder: Path, name: str, formats: Iterable[str] = CHART_FORMATS
) -> list[Path]:
    """Write the chart in each format (with the kit's theme, whether or not `setup` ran); HTML
    inlines its JavaScript so it opens offline."""
    paths = []
    with alt.theme.enable(THEME):
        for fmt in formats:
            path = folder / f"{name}.{fmt}"
            if fmt == "html":
                chart.save(str(path), inline=True)
            else:
                chart.save(str(path))
            paths.append(path)
    return paths


def chart_saver(
    folder: Path, formats: Iterable[str]
) -> Callable[[alt.TopLevelMixin | str, str], alt.TopLevelMixin | Markdown]:
    """`show = chart_saver(out, formats)`; `show(chart, name)` saves and returns the chart, so a
    notebook cell ending with it both saves and displays; the displayed spec names its files
    (`saved_name`), so that the report links them and writes its PDF. A sentence in place of
    the chart (what a chart would have drawn nothing for, as `tables.table_or_text` takes for a
    table) is returned as Markdown and saves nothing."""
    formats = list(formats)

    def show(chart: alt.TopLevelMixin | str, name: str) -> alt.TopLevelMixin | Markdown:
        if isinstance(chart, str):
            return Markdown(chart)
        named = chart.properties(usermeta={USERMETA: {"file": name}})
        save_chart(named, folder, name, formats)
        return named

    return show


#: the key of a chart spec's `usermeta` under which the kit records the chart's file name
USERMETA = "timecat-kit"


def saved_name(spec: dict[str, Any]) -> str | None:
    """The name of the files a displayed chart was saved as (`<name>.svg`, ...), from its spec;
    None for a chart `chart_saver` did not save."""
    found = ((spec.get("usermeta") or {}).get(USERMETA) or {}).get("file")
    return str(found) if found else None


# ---------------------------------------------------------------------------------------------
# Chart pieces
# ---------------------------------------------------------------------------------------------


def reference_lines(
    value: str,
    label: str,
    *,
    number_format: str = ".1f",
    dash: Sequence[int] = (6, 3),
    color: str = REFERENCE_COLOR,
) -> alt.LayerChart | alt.FacetChart:
    """Horizontal lines at the field `value`, each with "<label> <value>" written at its right
    end, outside the plotting area, so the reader needs no legend to know what the line is and
    the label never covers a data point.

    The layer takes its data from the chart it is layered into (also inside a facet: one line
    per panel, at that panel's value; give the facet `spacing=LABEL_ROOM` so that a label does
    not run into the next panel). The lines take the y-axis title of the layers they join.
    """
    base = (
        alt.Chart()
        .transform_filter(f"isValid(datum[{json.dumps(value)}])")
        .transform_aggregate(count="count()", groupby=[value])
        .transform_calculate(
            reference_text=f"{json.dumps(label + ' ')} + format(datum[{json.dumps(value)}], "
            f"{json.dumps(number_format)})"
        )
    )
    y = alt.Y(f"{value}:Q")
    rule = base.mark_rule(strokeDash=list(dash), color=color).encode(y=y)
    text = base.mark_text(
        align="left", baseline="middle", dx=4, color=color, fontSize=10, fontWeight="bold"
    ).encode(y=y, x=alt.value("width"), text="reference_text:N")
    return alt.layer(rule, text)


def chance_lines(
    value: str = "chance", *, number_format: str = ".1f"
) -> alt.LayerChart | alt.FacetChart:
    """Dotted lines labelled 'chance <value>': what guessing the majority class scores."""
    return reference_lines(
        value, "chance", number_format=number_format, dash=(2, 2), color="#b22222"
    )


def series_lines(
    frame: pl.DataFrame,
    x: str,
    y: str,
    series: str,
    facet: str | None = None,
    *,
    x_title: str,
    y_title: str,
    color_by: str | None = None,
) -> alt.Chart | alt.FacetChart:
    """One line per value of `series`, coloured by the shared palette (kit.report.palette) by
    `series` itself, named in a legend, or by `color_by` (a variant: the same colour it has in
    every other chart), which the panels name instead of a legend. Faceted: two panels a row
    (one when there is only one), one shared y scale across panels."""
    color_by = color_by or series
    legend = alt.Legend(columns=1, symbolLimit=0) if color_by == series else None
    chart = (
        alt.Chart(frame)
        .mark_line()
        .encode(
            x=alt.X(f"{x}:Q", title=x_title),
            y=alt.Y(f"{y}:Q", title=y_title),
            color=alt.Color(f"{color_by}:N", scale=palette.scale(frame[color_by]), legend=legend),
            detail=f"{series}:N",
            tooltip=tooltips(frame, [series, x, y]),
        )
    )
    if facet is None:
        return chart.properties(width=420, height=220)
    columns = min(2, frame[facet].n_unique())
    return wrapped(
        chart.properties(width=260, height=180), alt.Facet(f"{facet}:N", title=None), columns
    )


def wrapped(chart: Any, facet: alt.Facet, columns: int, **kwargs: Any) -> alt.FacetChart:
    """`chart` in one panel per value of `facet`, `columns` panels a row, each panel with its own
    x-axis under it: with the axes shared, Vega-Lite draws each column's x-axis under the grid's
    last row, so a column whose last row is empty gets its axis far below its panels."""
    return chart.facet(facet=facet, columns=columns, **kwargs).resolve_axis(x="independent")


def tooltips(
    frame: pl.DataFrame,
    fields: Sequence[str],
    quantities: dict[str, Quantity] | None = None,
    titles: dict[str, str] | None = None,
) -> list[alt.Tooltip]:
    """Tooltips for `fields` of `frame`, titled in words (`titles`, else kit.report.labels),
    floats as their quantity reads in a table (kit.readout.numbers: `quantities` gives a
    field's, else kit.report.labels.quantity, else three significant digits)."""
    quantities, titles = quantities or {}, titles or {}
    shown = []
    for field in fields:
        title = titles.get(field, label(field))
        if frame.schema[field].is_float():
            found = quantities.get(field) or quantity(field) or OTHER
            shown.append(alt.Tooltip(f"{field}:Q", format=found.d3, title=title))
        else:
            kind: Literal["quantitative", "nominal"] = (
                "quantitative" if frame.schema[field].is_numeric() else "nominal"
            )
            shown.append(alt.Tooltip(field, type=kind, title=title))
    return shown


#: the titles of `error_bounds`' two ends in a tooltip: a spread about the mean, not an interval
#: of confidence
SPREAD_ENDS = {"low": "mean − std", "high": "mean + std"}


def spread_tooltips(
    frame: pl.DataFrame, keys: Sequence[str], quantities: dict[str, Quantity] | None = None
) -> list[alt.Tooltip]:
    """The tooltip of an error bar drawn from `error_bounds`: what it is (`keys`), its mean and
    its two ends, titled as what they are (SPREAD_ENDS), each to its quantity's precision."""
    return tooltips(frame, [*keys, "mean", "low", "high"], quantities, SPREAD_ENDS)


def error_bounds(
    frame: pl.DataFrame, domain: tuple[float, float], mean: str = "mean", std: str = "std"
) -> pl.DataFrame:
    """`frame` with `low` and `high`, mean ∓ std clipped to the metric's `domain` (accuracy can
    not pass 100 %), a missing std counted as 0."""
    spread = pl.col(std).fill_null(0)
    return frame.with_columns(
        (pl.col(mean) - spread).clip(*domain).alias("low"),
        (pl.col(mean) + spread).clip(*domain).alias("high"),
    )


def short_names(names: Iterable[str]) -> list[str]:
    """Paths without the folders they all share: '.../time_concat/rep0/cat2/seed550' and
    '.../time_concat/rep1/cat1/seed0' become 'rep0/cat2/seed550' and 'rep1/cat1/seed0'."""
    parts = [PurePosixPath(str(name).replace("\\", "/")).parts for name in names]
    if len(parts) < 2:
        return [p[-1] if p else "" for p in parts]
    shared = 0
    while all(len(p) > shared + 1 for p in parts) and len({p[shared] for p in parts}) == 1:
        shared += 1
    return ["/".join(p[shared:]) for p in parts]
