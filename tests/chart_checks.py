"""Whether a chart reads as a figure of a paper, from its Vega-Lite spec: no wrapped facet whose
x-axes are shared (Vega-Lite draws a shared x-axis under the grid's last row, so a column whose
last row is empty gets its axis far below its panels), no row header titled or labelled at the
left (it stands beside the y-axis title and reads as part of it), no tooltip giving an interval's
or a spread's two ends without the mean between them, and no two charts under one caption.
Shared by the report's browser test and the checks' own tests (test_chart_checks)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

#: the fields of an interval's or a spread's two ends (kit.report.charts.error_bounds and the
#: verdict tables) and of the mean they surround
ENDS, MEAN = ("low", "high"), "mean"


def nodes(spec: Any) -> Iterator[dict[str, Any]]:
    """Every object in a spec, the spec first."""
    if isinstance(spec, dict):
        yield spec
        for value in spec.values():
            yield from nodes(value)
    elif isinstance(spec, list):
        for item in spec:
            yield from nodes(item)


def _independent(spec: dict[str, Any], channel: str) -> bool:
    resolve = spec.get("resolve") or {}
    return any(
        (resolve.get(part) or {}).get(channel) == "independent" for part in ("axis", "scale")
    )


def orphan_axes(spec: Any) -> list[str]:
    """The wrapped facets (`facet` with `columns`) of `spec` whose panels share their x-axis."""
    return [
        str((node["facet"] or {}).get("field"))
        for node in nodes(spec)
        if isinstance(node.get("facet"), dict)
        and "spec" in node
        and node.get("columns")
        and not _independent(node, "x")
    ]


def row_headers_at_the_left(spec: Any) -> list[str]:
    """The row facets of `spec` whose header title shows, or whose labels sit at the left (the
    default), beside the panels' y-axis titles."""
    found = []
    for node in nodes(spec):
        row = (node.get("facet") or {}).get("row") if isinstance(node.get("facet"), dict) else None
        row = row or ((node.get("encoding") or {}).get("row") if "mark" in node else None)
        if not isinstance(row, dict):
            continue
        header = row.get("header") or {}
        titled = row.get("title", row.get("field")) not in (None, "") and header.get(
            "titleOrient"
        ) not in ("top", "bottom")
        if titled or header.get("labelOrient") not in ("top", "bottom"):
            found.append(str(row.get("field")))
    return found


def intervals_without_a_mean(spec: Any) -> list[list[str]]:
    """The tooltips of `spec` (their fields) giving an end of an interval or a spread without
    its mean."""
    found = []
    for node in nodes(spec):
        tips = (node.get("encoding") or {}).get("tooltip") if "mark" in node else None
        if not isinstance(tips, list):
            continue
        fields = [str(tip.get("field")) for tip in tips if isinstance(tip, dict)]
        if set(ENDS) & set(fields) and MEAN not in fields:
            found.append(fields)
    return found


def unreadable(spec: Any) -> dict[str, list[Any]]:
    """What of the checks above `spec` fails, by check (empty: none)."""
    checks = {
        "wrapped facets sharing their x-axis": orphan_axes(spec),
        "row headers beside the y-axis title": row_headers_at_the_left(spec),
        "interval tooltips without their mean": intervals_without_a_mean(spec),
    }
    return {check: found for check, found in checks.items() if found}


def repeated_captions(captions: list[str]) -> list[str]:
    """The captions that stand under more than one chart."""
    return sorted(caption for caption, n in Counter(captions).items() if n > 1)


#: a table cell that is one number, with its sign: '+0.1', '−0.1', '0.1'
SIGNED_NUMBER = re.compile(r"([+\-−]?)(\d[\d,]*\.\d+)")


def signed_both_ways(rows: list[list[str]]) -> list[tuple[int, int]]:
    """The pairs of a table's columns (by index) that show the same numbers in every row, one
    of them signed and the other not ('0.1' beside '+0.1': one quantity read two ways). Columns
    that only happen to share a number in one row are not such a pair."""
    parsed = [[SIGNED_NUMBER.fullmatch(cell.strip()) for cell in row] for row in rows]
    width = min((len(row) for row in parsed), default=0)
    pairs = []
    for a in range(width):
        for b in range(a + 1, width):
            cells = [(row[a], row[b]) for row in parsed]
            if not cells or any(x is None or y is None or x[2] != y[2] for x, y in cells):
                continue
            signs = {(x[1], y[1]) for x, y in cells if float(x[2].replace(",", ""))}
            if {("", "+"), ("+", "")} & signs:
                pairs.append((a, b))
    return pairs
