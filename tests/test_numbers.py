"""One number formatter for the report and the notebooks (kit.readout.numbers): significant
digits, thousands separators, no negative zero, small p-values in scientific notation."""

from __future__ import annotations

import math

import polars as pl
import pytest

from kit.readout import numbers
from kit.report import tables


@pytest.mark.parametrize(
    ("value", "places", "shown"),
    [
        (78.4, 1, "78.4"),
        (99.93, None, "99.9"),
        (0.012345, None, "0.0123"),
        (450000, None, "450,000"),
        (1234.5, 1, "1,234.5"),
        (-0.004, 2, "0.00"),
        (-0.0, None, "0"),
        (None, 1, "–"),
        (float("nan"), 1, "NaN"),
    ],
)
def test_a_number_reads_to_its_places_or_three_significant_digits(
    value: float | None, places: int | None, shown: str
) -> None:
    assert numbers.number(value, places) == shown


def test_signed_values_and_intervals_never_show_a_negative_zero() -> None:
    assert numbers.signed(1.94) == "+1.9" and numbers.signed(-0.54) == "−0.5"
    assert numbers.signed(-0.04) == "0.0"
    assert numbers.interval(None, 1.0) == "–"
    assert numbers.interval(-0.5, 0.0) == "[−0.5, 0.0]"


def test_a_negative_number_reads_with_one_minus_sign_as_a_chart_writes_it() -> None:
    """U+2212, never a hyphen, in every formatter (d3 writes the same sign in a chart)."""
    assert numbers.number(-1234.5, 1) == "−1,234.5" and numbers.number(-3) == "−3"
    assert numbers.signed(-0.54) == "−0.5" and numbers.number(-math.inf) == "−∞"
    assert numbers.interval(-2.0, -1.0) == "[−2.0, −1.0]"
    assert numbers.GAIN.text(-3) == "−3.0" and numbers.p_value(0.5) == "0.50"
    shown = [numbers.number(v, p, sign=s) for v in (-1.5, -12.0, -1e6) for p in (0, 1, None)
             for s in (False, True)]  # fmt: skip
    assert not any("-" in text for text in shown) and all("−" in text for text in shown)


def test_an_interval_reads_like_its_mean_and_keeps_its_side_of_zero() -> None:
    """Both ends to one precision, the mean's one decimal (never '-0.38 ... 0.0'); an end that
    is not zero but would round to it takes its first significant digit, and the other end as
    many decimals, so an interval that lies below 0 (a verdict 'worse') never reads as touching
    it and its ends read alike (never '[-0.6, -0.03]')."""
    assert numbers.interval(-0.3812, 1.2049) == "[−0.4, +1.2]"
    assert numbers.interval(-0.38, -0.012) == "[−0.38, −0.01]"
    assert numbers.interval(-0.6, -0.03) == "[−0.60, −0.03]"
    assert numbers.interval(0.004, 2.0) == "[+0.004, +2.000]"
    assert numbers.interval(-0.5, -0.001) == "[−0.500, −0.001]"
    assert numbers.interval_end(-0.012) == "−0.01"  # one end alone keeps its own digit


def test_p_values_read_to_two_significant_digits_or_below_a_thousandth() -> None:
    assert numbers.p_value(0.0158) == "0.016"
    assert numbers.p_value(0.5) == "0.50"
    assert numbers.p_value(1.0) == "1.0"
    assert numbers.p_value(1.85e-4) == "< 0.001"
    assert numbers.p_value(0.0) == "< 0.001"
    assert numbers.p_value(None) == "–"


def test_each_quantity_has_one_rule_in_text_and_in_charts() -> None:
    """An accuracy and a gain to one decimal whatever their value (no '100.00' beside '35.4',
    no '78.40' beside '65.0'), a gain signed; the same rule as the d3 format a chart's tooltip
    and axis take."""
    assert [numbers.POINTS.text(v) for v in (100.0, 99.8, 35.41, 78.4)] == [
        "100.0",
        "99.8",
        "35.4",
        "78.4",
    ]
    assert numbers.GAIN.text(9.2) == "+9.2" and numbers.GAIN.text(-0.57) == "−0.6"
    assert numbers.POINTS.d3 == ",.1f" and numbers.GAIN.d3 == "+,.1f"
    assert numbers.counted(1, "round") == "1 round" and numbers.counted(3, "round") == "3 rounds"


def test_a_table_prints_its_cells_through_the_formatter() -> None:
    frame = pl.DataFrame(
        {
            "world_seed": [1234],
            "total_iters": [450000],
            "p_adjusted": [2e-6],
            "gain_mean": [-0.004],
            "gain_std": [0.5],
            "located": [True],
        }
    )
    (row,) = tables.table(frame).cells()
    assert row == ["1234", "450,000", "< 0.001", "0.0", "0.5", "yes"]


def test_a_table_reads_every_accuracy_and_gain_to_one_decimal() -> None:
    """Whatever the spread or the source: a published 75.58 beside a measured 63.0859, a std
    of 1.38 beside a mean, a gain's interval ends, each to one decimal; p-values to two
    significant digits."""
    frame = pl.DataFrame(
        {
            "variant": ["cat1", "cat2"],
            "mixture mean": [63.0859375, 42.3828125],
            "mixture std": [1.381068, 3.038349],
            "kit − paper": [-9.1323, 0.049],
            "ImageNet-1k": [75.58, 78.4],
            "p_value": [0.0954, 1.85e-4],
        }
    )
    assert tables.table(frame).cells() == [
        ["cat1", "63.1", "1.4", "−9.1", "75.6", "0.095"],
        ["cat2", "42.4", "3.0", "0.0", "78.4", "< 0.001"],
    ]


def test_a_wide_table_shows_fewer_columns_than_its_frame() -> None:
    """An interval's ends in one column; a value every row shares said once above the table."""
    frame = pl.DataFrame(
        {
            "variant": ["cat2", "wide1"],
            "gain_mean": [-20.7, 7.8],
            "low": [-100.0, -22.04],
            "high": [98.6, -0.012],
            "baseline": ["cat1", "cat1"],
        }
    )
    shown = tables.table(frame).layout()
    assert shown.headers == ["variant", "gain (points, mean)", tables.INTERVAL_HEADER]
    assert shown.rows == [
        ["cat2", "−20.7", "[−100.0, +98.6]"],
        ["wide1", "+7.8", "[−22.04, −0.01]"],
    ]
    assert shown.notes == ["baseline: cat1"]
    assert "In every row: baseline: cat1." in tables.table(frame)._repr_html_()


def test_a_tooltip_of_three_significant_digits_reads_as_a_table_cell() -> None:
    """A number of no named quantity (a training loss) reads in a chart's tooltip as in a
    table: '1.60' beside '1.19', never '1.6' (d3's '~' trims the zero a table keeps); drawn by
    vl-convert, the chart's texts are `numbers.OTHER.text`'s."""
    import re

    import altair as alt
    import vl_convert

    values = [1.6, 1.19, 0.955, 12.3]
    chart = (
        alt.Chart(alt.Data(values=[{"v": v, "i": i} for i, v in enumerate(values)]))
        .mark_text()
        .encode(y="i:O", text=alt.Text("v:Q", format=numbers.OTHER.d3))
    )
    drawn = re.findall(r">([\d.,]+)</text>", vl_convert.vegalite_to_svg(chart.to_dict()))
    assert [t for t in drawn if "." in t] == [numbers.OTHER.text(v) for v in values]
