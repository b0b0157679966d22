"""The chart checks the report's browser test runs (tests/chart_checks.py) fail on the planted
bad chart each names and pass on the kit's charts drawn from planted results; every chart the
notebooks save has a caption of its own (kit.report.chart_captions)."""

from __future__ import annotations

import re

import altair as alt
import nbformat
import polars as pl
import pytest
from chart_checks import repeated_captions, signed_both_ways, unreadable

from kit.experiments import toy_charts
from kit.experiments.timecat import figures, sweep_figures
from kit.files.paths import NOTEBOOKS_DIR
from kit.report import charts
from kit.report.chart_captions import CHART_CAPTIONS, chart_caption

#: a planted frame of five panels: wrapped three a row, the second row is short
FIVE = pl.DataFrame({"panel": list("abcde"), "x": [1.0] * 5, "mean": [2.0] * 5})


def _spec(chart: alt.TopLevelMixin) -> dict:
    return chart.to_dict()


def test_a_wrapped_facet_sharing_its_x_axis_fails_and_the_kits_wrap_passes() -> None:
    base = alt.Chart(FIVE).mark_point().encode(x="x:Q", y="mean:Q")
    shared = base.facet(facet=alt.Facet("panel:N"), columns=3)
    assert "wrapped facets sharing their x-axis" in unreadable(_spec(shared))
    assert unreadable(_spec(charts.wrapped(base, alt.Facet("panel:N"), 3))) == {}


def test_a_row_header_beside_the_y_axis_title_fails() -> None:
    base = alt.Chart(FIVE).mark_point().encode(x="x:Q", y="mean:Q")
    titled = base.facet(row=alt.Row("panel:N", title="panel"))
    assert "row headers beside the y-axis title" in unreadable(_spec(titled))
    above = base.facet(row=alt.Row("panel:N", title=None, header=sweep_figures.SEED_HEADER))
    assert unreadable(_spec(above)) == {}


def test_an_interval_tooltip_without_its_mean_fails() -> None:
    frame = charts.error_bounds(FIVE.with_columns(std=pl.lit(0.5)), (0, 10))
    ends = (
        alt.Chart(frame)
        .mark_errorbar()
        .encode(y="low:Q", y2="high:Q", tooltip=charts.tooltips(frame, ["panel", "low", "high"]))
    )
    assert "interval tooltips without their mean" in unreadable(_spec(ends))
    spread = charts.spread_tooltips(frame, ["panel"])
    with_mean = alt.Chart(frame).mark_errorbar().encode(y="low:Q", y2="high:Q", tooltip=spread)
    assert unreadable(_spec(with_mean)) == {}
    # the ends of a spread, titled as such: not an interval of confidence
    assert [t.to_dict()["title"] for t in spread][-2:] == ["mean − std", "mean + std"]


def _results() -> pl.DataFrame:
    """Planted probe results: three variants on five tasks of two roles, two replicates."""
    rows = [
        {"variant": v, "task": t, "role": "unseen" if t > "c" else "in distribution",
         "rule": "heldout", "replicate": r, "top1": 0.2 + 0.1 * i + 0.01 * r}
        for i, v in enumerate(["cat1", "cat4", "direct-shape"])
        for t in "abcde"
        for r in range(2)
    ]  # fmt: skip
    return pl.DataFrame(rows)


def test_the_kits_charts_from_planted_results_pass_every_check() -> None:
    results = _results()
    concat = pl.DataFrame(
        {"share": [0.5, 0.5, 0.9, 0.9], "k": [1, 2, 1, 2], "components_solved": [1, 2, 1, 3]}
    )
    verdicts = pl.DataFrame(
        {"world_seed": [0, 0, 1, 1], "budget": [60, 240, 60, 240], "variant": ["cat4"] * 4,
         "against": ["cat1"] * 4, "condition": ["cat4 over cat1"] * 4,
         "mean": [1.0, 2.0, -1.0, 3.0], "low": [-1.0, 0.5, -2.0, 1.0],
         "high": [3.0, 3.5, 0.0, 5.0], "judgement": ["inconclusive"] * 4, "replicates": [6] * 4}
    )  # fmt: skip
    learned = pl.DataFrame(
        {"world_seed": [0], "variant": ["cat4"], "learned_at": [240]},
        schema={"world_seed": pl.Int64, "variant": pl.String, "learned_at": pl.Int64},
    )
    drawn = {
        "accuracy": figures.accuracy_chart(results, "heldout", dict.fromkeys("abcde", 16.7)),
        "roles": figures.role_chart(results, "heldout"),
        "concatenation": toy_charts.concat_chart(concat),
        "construction": toy_charts.construction_chart(),
        "sweep": sweep_figures.gain_chart(verdicts, learned, 2.9),
    }
    failing = {name: found for name, chart in drawn.items() if (found := unreadable(_spec(chart)))}
    assert not failing, failing


#: the name a notebook cell saves a chart under: `show(<chart>, "<name>")`
SAVED = re.compile(r',\s*"(\w+)"\)+\s*$', re.MULTILINE)


def test_every_chart_the_notebooks_save_has_a_caption_of_its_own() -> None:
    saved = [
        name
        for path in sorted(NOTEBOOKS_DIR.glob("0*.ipynb"))
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "code" and "show(" in cell.source
        for name in SAVED.findall(cell.source)
    ]
    assert len(saved) >= 15, saved
    assert sorted(set(saved) - set(CHART_CAPTIONS)) == []
    heading = "03 · Accuracy of every variant on every task"
    captions = [chart_caption(heading, name) for name in saved]
    assert repeated_captions(captions) == []
    assert repeated_captions([chart_caption(heading, None)] * 2) == [heading]  # as before


@pytest.mark.parametrize("name", sorted(CHART_CAPTIONS))
def test_a_caption_says_what_its_chart_shows_in_words(name: str) -> None:
    said = CHART_CAPTIONS[name]
    assert said.endswith(".") and not re.search(r"\w_\w|phi\d|direct-", said), said


def test_two_columns_showing_one_number_signed_and_unsigned_fail() -> None:
    """Table 3's gains as the report showed them: ImageNet-1k unsigned, its in-distribution
    gain (the same numbers) signed."""
    before = [["cat2", "0.1", "+6.7", "+0.1"], ["cat4", "−0.1", "+9.2", "−0.1"]]
    assert signed_both_ways(before) == [(1, 3)]
    after = [["cat2", "+0.1", "+6.7", "+0.1"], ["cat4", "−0.1", "+9.2", "−0.1"]]
    assert signed_both_ways(after) == []
    by_chance = [["cat2", "5.8", "+5.8"], ["cat4", "2.3", "+0.4"]]  # an accuracy, a gain
    assert signed_both_ways(by_chance) == []
