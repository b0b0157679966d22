"""One colour per name across every chart of every notebook.

A variant keeps its colour whichever chart shows it and whichever other variants share the
chart: time-concat variants (`cat1`, `cat2`, ...) are shades of blue that darken with the number
of models, wide ones oranges, untrained (`random…`) ones greys, `direct` green (and its runs
per task, `direct-<task>`, too); the toy's kept
features and labels, and notebook 02's value sources, pretrainings and metrics have fixed
colours too. Any other name gets a colour from a fixed list,
chosen by a hash of the name, so it is the same in every chart and every session.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable

import altair as alt

#: shades by the number in the name (1, 2, 3, ...; the last repeats beyond it)
FAMILIES: dict[str, list[str]] = {
    "cat": ["#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"],
    "wide": ["#fd8d3c", "#e6550d", "#a63603"],
    "random": ["#bdbdbd", "#969696", "#737373", "#525252"],
}
#: names whose colour is fixed
NAMED: dict[str, str] = {
    "direct": "#31a354",
    # the toy's kept features (notebook 01) and its labels
    "phi1": "#756bb1",
    "phi2": "#d6616b",
    "φ1": "#756bb1",  # as charts show them (kit.report.labels.SYMBOLS)
    "φ2": "#d6616b",
    "both": "#8c6d31",
    "none": "#cccccc",
    "positive": "#1b9e77",
    "negative": "#d95f02",
    # task roles (notebook 03)
    "in-distribution": "#2171b5",
    "in-mixture": "#8c6d31",
    "unseen": "#d6616b",
    # the published numbers (notebook 02): how a value was read, the pretraining of a series,
    # Table 1a's metrics
    "table": "#252525",
    "read_from_figure": "#ce6dbd",
    "supervised": "#393b79",
    "self-supervised": "#e7ba52",
    "worst-group accuracy": "#843c39",
    "mean accuracy": "#6b6ecf",
}
#: every other name: chosen by a hash of the name (none of these is used above)
OTHERS = [
    "#17becf",
    "#e377c2",
    "#bcbd22",
    "#7f7f7f",
    "#9467bd",
    "#8c564b",
    "#ff9896",
    "#c49c94",
    "#dbdb8d",
    "#9edae5",
]
#: 'cat4', 'wide2', 'random-init4', 'cat2_long' (a family, a number, a suffix after - or _)
_FAMILY = re.compile(r"(?P<family>cat|wide|random)(?:-init)?[-_]?(?P<n>\d*)(?:[-_].*)?")


def color(name: str) -> str:
    """The colour of `name` (a variant, a kept feature, a label...), the same in every chart."""
    name = str(name)
    if name in NAMED:
        return NAMED[name]
    match = _FAMILY.fullmatch(name)
    if match:
        shades = FAMILIES[match["family"]]
        n = int(match["n"] or 1)
        return shades[min(max(n, 1), len(shades)) - 1]
    if "-" in name:  # one task's run of a variant ('direct-shape'): the variant's colour
        return color(name.rsplit("-", 1)[0])
    if " (" in name:  # a name with words after it ('direct (shape)', 'cat1 (baseline)')
        return color(name.split(" (", 1)[0])
    return OTHERS[zlib.crc32(name.encode()) % len(OTHERS)]


def scale(names: Iterable[str], key: Callable[[str], str] = str) -> alt.Scale:
    """An Altair colour scale giving each of `names` its colour; `key` maps a shown name to the
    name whose colour it takes ('mixture, kept phi1' -> 'phi1')."""
    domain = [str(name) for name in dict.fromkeys(names)]
    return alt.Scale(domain=domain, range=[color(key(name)) for name in domain])
