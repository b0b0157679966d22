"""Polars' scalars read as the numbers they hold, and anything else refused naming it."""

from __future__ import annotations

import datetime
import re

import polars as pl
import pytest

from kit.readout.scalars import as_float, as_optional_float


def test_a_series_mean_or_maximum_reads_as_a_float() -> None:
    assert as_float(pl.Series([1, 2]).mean()) == 1.5
    value = as_float(pl.Series([1, 3]).max())
    assert value == 3.0 and isinstance(value, float)
    assert as_optional_float(pl.Series([], dtype=pl.Float64).max()) is None


@pytest.mark.parametrize("value", [None, "1.5", datetime.date(2024, 1, 1), [1.0]])
def test_a_scalar_that_is_no_number_is_refused_naming_it(value: object) -> None:
    with pytest.raises(TypeError, match=re.escape(f"expected a number, got {value!r}")):
        as_float(value)
