"""Polars' scalars (a Series' mean or maximum, a row's cell) as the Python numbers they hold.

Polars types such a scalar as any value a cell may hold (a number, a date, a string, a list or
None), so arithmetic on it needs the number it is known to be. These say which is expected, and
a value of another type fails here, naming what it was, rather than later in arithmetic.
"""

from __future__ import annotations

from numbers import Real


def as_float(value: object) -> float:
    """`value`, a number, as a float; TypeError for anything else (None included)."""
    if isinstance(value, Real):
        return float(value)
    raise TypeError(f"expected a number, got {value!r}")


def as_optional_float(value: object) -> float | None:
    """`value`, a number or None (the mean or maximum of no values), as a float or None."""
    return None if value is None else as_float(value)
