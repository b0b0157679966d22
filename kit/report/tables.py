"""Tables formatted for reading: group statistics, wide layouts, numbers as kit.readout.numbers
prints them (an accuracy or a gain to one decimal, p-values to two significant digits, other
floats to sensible decimals, thousands separators), booleans as yes/no."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import polars as pl
import yaml
from IPython.display import Markdown
from pydantic import BaseModel

from kit.readout import numbers
from kit.readout.scalars import as_float, as_optional_float
from kit.report.labels import label, quantity, value_text


def setup() -> None:
    """Tables shown whole, without shapes, data types or shortened strings (numbers are
    formatted by `table`)."""
    pl.Config.set_tbl_rows(60)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_fmt_str_lengths(100)
    pl.Config.set_tbl_hide_dataframe_shape(True)
    pl.Config.set_tbl_hide_column_data_types(True)


def mean_std(frame: pl.DataFrame, by: list[str], columns: list[str]) -> pl.DataFrame:
    """Mean, standard deviation and count (`count`) of `columns` per group, sorted by the group
    keys."""
    aggregations = [pl.len().alias("count")]
    for column in columns:
        aggregations += [
            pl.col(column).mean().alias(f"{column}_mean"),
            pl.col(column).std().alias(f"{column}_std"),
        ]
    return frame.group_by(by).agg(aggregations).sort(by)


def wide_mean_std(
    stats: pl.DataFrame, index: list[str], on: str, mean: str = "mean", std: str = "std"
) -> pl.DataFrame:
    """Long mean/std rows to one row per `index`, with '<x> mean' and '<x> std' number
    columns side by side for every value x of `on` (in order of appearance): the layout of the
    paper's Table 3, whose numbers are top-1 % (they read as points: kit.report.labels)."""
    keys = stats[on].unique(maintain_order=True).to_list()
    wide = stats.pivot(on=on, index=index, values=[mean, std], separator="\t")
    return wide.select(
        *index,
        *[pl.col(f"{kind}\t{key}").alias(f"{key} {kind}") for key in keys for kind in (mean, std)],
    )


def decimals(values: pl.Series, published: int = 3) -> int:
    """Decimals to print a float column with: as many as its values have when that is at most
    `published` (so published numbers and settings such as 0.001 print as given), otherwise
    three significant digits of a typical (median non-zero) value."""
    finite = values.drop_nulls().filter(values.drop_nulls().is_finite())
    for places in range(published + 1):
        if (as_optional_float((finite.round(places) - finite).abs().max()) or 0.0) < 1e-9:
            return places
    typical = as_float(finite.abs().filter(finite.abs() > 0).median())
    return min(max(2 - math.floor(math.log10(typical)), 0), 6)


def spread_decimals(spread: pl.Series) -> int | None:
    """Decimals a mean and its spread (standard deviations) support: two significant digits of
    the typical (median non-zero) spread, so 93.4 ± 1.3 and not 93.41666 ± 1.2583; None when
    no spread is known (one replicate: no spread tells the precision)."""
    known = spread.drop_nulls()
    known = known.filter(known.is_finite() & (known.abs() > 0))
    if known.is_empty():
        return None
    return min(max(1 - math.floor(math.log10(as_float(known.abs().median()))), 0), 6)


#: a mean column and its spread column: 'top1 mean'/'top1 std', 'loss_mean'/'loss_std',
#: 'top-1 %'/'top-1 % std'
_SPREAD_SUFFIXES = ((" mean", " std"), ("_mean", "_std"), ("mean", "std"), ("", " std"))


def _places(frame: pl.DataFrame) -> dict[str, int | None]:
    """Decimals per float column: a quantity's (kit.report.labels.quantity: an accuracy or a
    gain to one decimal), else a mean and its std to what the std supports, other floats as
    `decimals` says."""
    places = {c: decimals(frame[c]) if frame[c].dtype.is_float() else None for c in frame.columns}
    for column in frame.columns:
        for mean, std in _SPREAD_SUFFIXES:
            sibling = column[: -len(std)] + mean
            if (
                column.endswith(std)
                and sibling in frame.columns
                and frame[column].dtype.is_float()
                and frame[sibling].dtype.is_float()
            ):
                supported = spread_decimals(frame[column])
                if supported is not None:
                    places[column] = places[sibling] = supported
                break
    for column in frame.columns:
        found = quantity(column)
        if found is not None and frame[column].dtype.is_float():
            places[column] = found.places
    return places


#: columns holding p-values (kit.experiments.timecat.comparisons.gains)
P_COLUMNS = ("p_value", "p_adjusted")
#: columns holding an interval's ends, which keep their side of zero (kit.readout.numbers)
INTERVAL_ENDS = ("low", "high")


def _is_identifier(column: str) -> bool:
    """A column of numbers that name rather than count (a seed, a replicate's number): printed
    without thousands separators."""
    return "seed" in column or column == "replicate"


def _cell(column: str, value: Any, places: int | None) -> str:
    """One cell as a reader sees it (kit.readout.numbers: a gain with its sign)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and column in P_COLUMNS:
        return numbers.p_value(value)
    if isinstance(value, float) and column in INTERVAL_ENDS:
        return numbers.interval_end(value, places if places is not None else 1)
    if value is None or isinstance(value, float):
        found = quantity(column)
        return numbers.number(value, places, sign=found is not None and found.sign)
    if isinstance(value, int) and not _is_identifier(column):
        found = quantity(column)  # a whole accuracy in % reads as any other: 10.0
        return found.text(value) if found is not None else numbers.number(value)
    return value_text(column, str(value))


@dataclass(frozen=True)
class Layout:
    """A table as a reader sees it: headers in words, which columns hold numbers (aligned
    right), the cells as text, and the notes said once above it (a value every row shares)."""

    headers: list[str]
    numeric: list[bool]
    rows: list[list[str]]
    notes: list[str]


#: how a cell of numbers and a cell of text sit: a number right-aligned on one line ('< 0.001')
NUMBER_CELL, TEXT_CELL = '"text-align:right;white-space:nowrap"', '"text-align:left"'
#: the interval columns a table shows as one, '[-0.5, +1.2]' (kit.readout.numbers.interval)
INTERVAL_HEADER = "95% interval (points)"


@dataclass(frozen=True)
class Table:
    """A frame formatted for reading: headers in words (kit.report.labels), numbers as their
    quantity reads (kit.readout.numbers; a mean and its std otherwise to the precision the std
    supports), strings unquoted, nothing shortened, no data-type row. So that it fits a page
    rather than scroll, it is shown with fewer columns than the frame has (`layout`): an
    interval's two ends in one column, and a column whose value every row shares said once
    above it. `.frame` keeps the names and numbers."""

    frame: pl.DataFrame

    def cells(self) -> list[list[str]]:
        """Every cell of the frame as text, column for column."""
        places = _places(self.frame)
        return [
            [_cell(c, v, places[c]) for c, v in zip(self.frame.columns, row, strict=True)]
            for row in self.frame.iter_rows()
        ]

    def layout(self) -> Layout:
        """What a reader sees (see the class docstring)."""
        frame, columns = self.frame, list(self.frame.columns)
        cells = self.cells()
        at = {c: i for i, c in enumerate(columns)}
        shared = [c for c in columns if frame.height > 1 and _constant(frame[c])]
        notes = [f"{label(c)}: {cells[0][at[c]]}" for c in shared]
        merged = "low" in at and "high" in at
        headers, numeric, picks = [], [], []
        for c in columns:
            if c in shared or (merged and c == "high"):
                continue
            if merged and c == "low":
                headers.append(INTERVAL_HEADER)
                numeric.append(False)
                picks.append(-1)
                continue
            headers.append(label(c))
            numeric.append(frame[c].dtype.is_numeric())
            picks.append(at[c])
        places = _places(frame).get("low") if merged else None
        rows = [
            [
                numbers.interval(r["low"], r["high"], places if places is not None else 1)
                if pick < 0
                else row[pick]
                for pick in picks
            ]
            for row, r in zip(cells, frame.iter_rows(named=True), strict=True)
        ]
        return Layout(headers, numeric, rows, notes)

    def _repr_html_(self) -> str:
        shown = self.layout()
        head = "".join(f"<th>{html.escape(h)}</th>" for h in shown.headers)
        body = "".join(
            "<tr>"
            + "".join(
                f"<td style={NUMBER_CELL if n else TEXT_CELL}>{html.escape(v)}</td>"
                for v, n in zip(row, shown.numeric, strict=True)
            )
            + "</tr>"
            for row in shown.rows
        )
        notes = (
            f'<tfoot><tr><td colspan="{len(shown.headers)}" class="kit-table-notes" '
            f'style="text-align:left">In every row: {html.escape("; ".join(shown.notes))}.'
            "</td></tr></tfoot>"
            if shown.notes
            else ""
        )
        return (
            f'<table class="dataframe"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody>{notes}</table>"
        )

    def __repr__(self) -> str:
        shown = self.layout()
        rows = [shown.headers, *shown.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(
                v.rjust(w) if n else v.ljust(w)
                for v, w, n in zip(r, widths, shown.numeric, strict=True)
            ).rstrip()
            for r in rows
        ]
        notes = [f"In every row: {'; '.join(shown.notes)}."] if shown.notes else []
        return "\n".join([*notes, lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _constant(column: pl.Series) -> bool:
    """Whether every row holds the same value (nulls included)."""
    try:
        return column.n_unique() == 1
    except pl.exceptions.PolarsError:  # a type without equality: never folded
        return False


def table(frame: pl.DataFrame) -> Table:
    """`display(tables.table(frame))`: the frame formatted for reading (see `Table`)."""
    return Table(frame)


def table_or_text(value: pl.DataFrame | str) -> Table | Markdown:
    """A frame as `table` shows it; a sentence (what a table would only have held blanks for)
    as Markdown."""
    return Markdown(value) if isinstance(value, str) else table(value)


@dataclass(frozen=True)
class Settings:
    """A notebook's resolved parameters as one compact table, to show right after the
    parameters cell, whose names are mostly None (the profile supplies them): a plain value on
    its row, a section (a mapping or a list of mappings) folded to a line that opens to its
    YAML."""

    values: dict[str, Any]

    def _repr_html_(self) -> str:
        rows = []
        for name, value in self.values.items():
            if _is_section(value):
                shown = (  # code, as the plain values: the YAML a profile or -f file takes
                    f"<details><summary><code>{html.escape(_folded(value))}</code></summary>"
                    f'<pre style="margin:0"><code>{html.escape(_yaml(value))}</code></pre>'
                    "</details>"
                )
            else:
                shown = f"<code>{html.escape(_flow(value))}</code>"
            rows.append(
                f'<tr><td style="text-align:left"><code>{html.escape(name)}</code></td>'
                f'<td style="text-align:left">{shown}</td></tr>'
            )
        return (
            "<details open><summary>the resolved parameters (each None above takes this value "
            f"from profile {html.escape(str(self.values.get('profile')))})</summary>"
            '<table class="dataframe kit-settings"><thead><tr><th>name</th><th>value</th></tr>'
            "</thead>"
            f"<tbody>{''.join(rows)}</tbody></table></details>"
        )

    def __repr__(self) -> str:
        width = max(len(name) for name in self.values)
        return "\n".join(
            f"{name.ljust(width)}  {_folded(value) if _is_section(value) else _flow(value)}"
            for name, value in self.values.items()
        )


def settings(parameters: BaseModel) -> Settings:
    """`display(tables.settings(P))`: the values a notebook runs with (see `Settings`)."""
    return Settings(parameters.model_dump(mode="json"))


def _is_section(value: Any) -> bool:
    return isinstance(value, dict) or (
        isinstance(value, list) and any(isinstance(v, dict | list) for v in value)
    )


#: characters of a folded section's line
FOLDED_WIDTH = 90


def _folded(value: Any) -> str:
    """A section in one line: a list by its entries' names, a mapping by its first values."""
    if isinstance(value, list):
        names = [str(v.get("name", "…")) if isinstance(v, dict) else _flow(v) for v in value]
        line = f"{len(value)}: {', '.join(names)}"
    else:
        line = ", ".join(
            f"{key}: {_folded(v) if _is_section(v) else _flow(v)}" for key, v in value.items()
        )
        line = "{" + line + "}"
    return line if len(line) <= FOLDED_WIDTH else line[: FOLDED_WIDTH - 1] + "…"


def _flow(value: Any) -> str:
    """A plain value as YAML writes it in one line (None as null, a list in brackets)."""
    return (
        yaml.safe_dump(value, default_flow_style=True, width=10_000)
        .strip()
        .removesuffix("\n...")
        .removesuffix("...")
        .strip()
    )


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False).strip()
