"""How a number reads, in the report and the notebooks alike: one formatter.

- a float to a given number of decimals, or else to three significant digits (docs: Sharing
  results, "Tables are rounded ..."), with thousands separators (450,000; 1,234.5);
- never a negative zero: a value that rounds to zero prints as 0 (-0.004 at two decimals is
  0.00, not -0.00), so an interval never reads [-0.5, -0.00];
- a p-value to three significant digits, in scientific notation below 0.001 (1.2e-05, not
  0.00001);
- a signed difference with its sign (+1.9, -0.5, 0.0).
"""

from __future__ import annotations

import math

#: significant digits of a number printed without a fixed number of decimals
SIGNIFICANT = 3
#: below this a p-value is printed in scientific notation
SMALL_P = 1e-3


def significant_places(value: float, digits: int = SIGNIFICANT) -> int:
    """Decimals that show `value` to `digits` significant digits (none for a large value)."""
    if value == 0 or not math.isfinite(value):
        return 0
    return max(digits - 1 - math.floor(math.log10(abs(value))), 0)


def number(value: float | int | None, places: int | None = None, sign: bool = False) -> str:
    """`value` with `places` decimals (three significant digits when None), thousands
    separators, no negative zero, a '+' before a positive value when `sign`; '–' for None,
    NaN and infinities as words."""
    if value is None:
        return "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:+,}" if sign and value else f"{value:,}"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return ("+" if sign and value > 0 else "") + ("∞" if value > 0 else "-∞")
    places = significant_places(value) if places is None else places
    rounded = round(value, places)
    if rounded == 0:
        rounded = 0.0  # -0.0 prints as 0
    text = f"{rounded:,.{places}f}"
    return f"+{text}" if sign and rounded > 0 else text


def signed(value: float | None, places: int = 1) -> str:
    """A difference in points with its sign: +1.9, -0.5, 0.0 (never -0.0)."""
    return number(value, places, sign=True)


def interval(low: float | None, high: float | None, places: int = 1) -> str:
    """An interval as '[-0.5, +1.2]', each end as `signed` prints it; '–' when unknown."""
    if low is None or high is None:
        return "–"
    return f"[{signed(low, places)}, {signed(high, places)}]"


def p_value(p: float | None) -> str:
    """A p-value: three significant digits, scientific notation below 0.001 (2.3e-05)."""
    if p is None or math.isnan(p):
        return "–"
    if 0 < p < SMALL_P:
        return f"{p:.{SIGNIFICANT - 1}e}"
    return number(p, significant_places(p) if p else 0)
