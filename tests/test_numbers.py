"""One number formatter for the report and the notebooks (kit.core.numbers): significant
digits, thousands separators, no negative zero, small p-values in scientific notation."""

from __future__ import annotations

import polars as pl
import pytest

from kit.core import numbers
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
    assert numbers.signed(1.94) == "+1.9" and numbers.signed(-0.54) == "-0.5"
    assert numbers.signed(-0.04) == "0.0"
    assert numbers.interval(-0.5, -0.001) == "[-0.5, 0.0]"
    assert numbers.interval(None, 1.0) == "–"


def test_p_values_below_a_thousandth_read_in_scientific_notation() -> None:
    assert numbers.p_value(0.0158) == "0.0158"
    assert numbers.p_value(0.5) == "0.500"
    assert numbers.p_value(1.234e-5) == "1.23e-05"
    assert numbers.p_value(0.0) == "0"


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
    assert row == ["1234", "450,000", "2.00e-06", "0.00", "0.50", "yes"]
