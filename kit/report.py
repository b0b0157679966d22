"""Showing and saving results: charts that render offline, tables with spread, result files.

Charts render as SVG inside notebooks (vl-convert, no JavaScript from the internet) and are saved
as PNG, SVG and self-contained HTML. Key results go to JSON so that tests and later notebooks read
back what a notebook measured instead of trusting its prose.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from kit.paths import resolve

CHART_FORMATS = ("png", "svg", "html")


def setup() -> None:
    """Offline rendering for notebooks: static SVG charts, tables shown whole."""
    alt.renderers.enable("svg")
    alt.data_transformers.disable_max_rows()
    pl.Config.set_tbl_rows(60)
    pl.Config.set_tbl_cols(20)


def output_dir(path: str | Path) -> Path:
    folder = resolve(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_chart(chart: alt.TopLevelMixin, folder: Path, name: str,
               formats: Iterable[str] = CHART_FORMATS) -> list[Path]:
    """Write the chart in each format; HTML inlines its JavaScript so it opens offline."""
    paths = []
    for fmt in formats:
        path = folder / f"{name}.{fmt}"
        if fmt == "html":
            chart.save(str(path), inline=True)
        else:
            chart.save(str(path))
        paths.append(path)
    return paths


def chart_saver(folder: Path, formats: Iterable[str]
                ) -> Callable[[alt.TopLevelMixin, str], alt.TopLevelMixin]:
    """`show = chart_saver(out, formats)`; `show(chart, name)` saves and returns the chart, so a
    notebook cell ending with it both saves and displays."""
    formats = list(formats)

    def show(chart: alt.TopLevelMixin, name: str) -> alt.TopLevelMixin:
        save_chart(chart, folder, name, formats)
        return chart

    return show


def mean_std(frame: pl.DataFrame, by: list[str], columns: list[str]) -> pl.DataFrame:
    """Mean, standard deviation and count of `columns` per group, sorted by the group keys."""
    aggregations = [pl.len().alias("n")]
    for column in columns:
        aggregations += [pl.col(column).mean().alias(f"{column}_mean"),
                         pl.col(column).std().alias(f"{column}_std")]
    return frame.group_by(by).agg(aggregations).sort(by)


def write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2, sort_keys=True))


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
