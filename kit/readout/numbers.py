"""How a number reads, in the report, the notebooks, the charts and the LaTeX tables alike: one
formatter, and one precision rule per quantity (`Quantity`):

- an accuracy in % and a gain in points (a difference of accuracies) to one decimal (`POINTS`,
  `GAIN`; a gain with its sign: +1.9, −0.5, 0.0), whatever the spread, the table or the source
  (a published 75.58 reads 75.6; the result files keep every digit); an accuracy a reader sees
  is always in %, an error rate too (the toy's probe accuracies of notebook 01 read 66.7, never
  0.667, though its result files keep them as fractions);
- a p-value to two significant digits, or "< 0.001" below a thousandth (`p_value`);
- an interval like its mean (`interval`): both ends to one precision, the mean's decimals, with
  their signs; where an end is not zero but would round to it, both ends take the decimals that
  show its first significant digit (−0.38 to −0.012 reads [−0.38, −0.01], not [−0.4, 0.0]
  nor [−0.4, −0.01]), so that an interval never seems to touch 0 when it lies on one side of
  it, and its two ends read alike;
- any other number to a given number of decimals, or else to three significant digits (docs:
  Sharing results), with thousands separators (450,000; 1,234.5);
- a negative number with the minus sign U+2212 (−0.5), the sign a chart's d3 format writes, so
  a table, a sentence and a chart read alike (the result files keep their own numbers; LaTeX
  sets it as a math minus);
- never a negative zero: a value that rounds to zero prints as 0 (−0.004 at two decimals is
  0.00, not −0.00).

Each quantity also gives its rule as a d3 format (`Quantity.d3`), which a chart's axis or
tooltip takes, so that a chart reads as the table beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: significant digits of a number printed without a fixed number of decimals
SIGNIFICANT = 3
#: below this a p-value reads "< 0.001"
SMALL_P = 1e-3
#: significant digits of a p-value
P_DIGITS = 2
#: decimals of an accuracy in % and of a gain in points
POINTS_PLACES = 1
#: the minus sign a reader sees (U+2212, as d3 formats a chart's numbers), never a hyphen
MINUS = "\u2212"


def significant_places(value: float, digits: int = SIGNIFICANT) -> int:
    """Decimals that show `value` to `digits` significant digits (none for a large value)."""
    if value == 0 or not math.isfinite(value):
        return 0
    return max(digits - 1 - math.floor(math.log10(abs(value))), 0)


def number(value: float | int | None, places: int | None = None, sign: bool = False) -> str:
    """`value` with `places` decimals (three significant digits when None), thousands
    separators, no negative zero, a '+' before a positive value when `sign`, a negative one
    with the minus sign (MINUS); '–' for None, NaN and infinities as words."""
    if value is None:
        return "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return (f"{value:+,}" if sign and value else f"{value:,}").replace("-", MINUS)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return ("+" if sign and value > 0 else "") + ("∞" if value > 0 else f"{MINUS}∞")
    places = significant_places(value) if places is None else places
    rounded = round(value, places)
    if rounded == 0:
        rounded = 0.0  # -0.0 prints as 0
    text = f"{rounded:,.{places}f}".replace("-", MINUS)
    return f"+{text}" if sign and rounded > 0 else text


def counted(count: int, noun: str, many: str | None = None) -> str:
    """`count` and its noun, in the plural unless one: '1 round', '2 rounds', '1,000 replicates'
    (`many`: an irregular plural)."""
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"


def signed(value: float | None, places: int = POINTS_PLACES) -> str:
    """A difference in points with its sign: +1.9, −0.5, 0.0 (never −0.0)."""
    return number(value, places, sign=True)


def end_places(value: float | None, places: int = POINTS_PLACES) -> int:
    """Decimals an interval's end needs: `places`, or those of its first significant digit
    where it is not zero but would round to it at `places`."""
    if value is not None and value != 0 and math.isfinite(value) and round(value, places) == 0:
        return significant_places(value, 1)
    return places


def interval_end(value: float | None, places: int = POINTS_PLACES) -> str:
    """One end of an interval alone: signed to `end_places`; '–' when unknown (`interval` sets
    both ends of one interval to one precision)."""
    if value is None:
        return "–"
    return signed(value, end_places(value, places))


def interval(low: float | None, high: float | None, places: int = POINTS_PLACES) -> str:
    """An interval as '[−0.5, +1.2]', both ends signed to one precision: the decimals of its
    mean (`places`), or more where an end that is not zero would round to 0 (see the module
    docstring); '–' when unknown."""
    if low is None or high is None:
        return "–"
    both = max(end_places(low, places), end_places(high, places))
    return f"[{signed(low, both)}, {signed(high, both)}]"


def p_value(p: float | None) -> str:
    """A p-value: two significant digits (0.012, 0.50), "< 0.001" below a thousandth."""
    if p is None or math.isnan(p):
        return "–"
    if p < SMALL_P:
        return f"< {SMALL_P:g}"
    return number(p, significant_places(p, P_DIGITS))


@dataclass(frozen=True)
class Quantity:
    """What a number measures, and so how it reads: to `places` decimals (None: three
    significant digits), with its sign where `sign` (a difference)."""

    name: str
    places: int | None
    sign: bool = False

    def text(self, value: float | int | None) -> str:
        """`value` as this quantity reads."""
        if isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        return number(value, self.places, sign=self.sign)

    @property
    def d3(self) -> str:
        """The same rule as a d3 format (a Vega-Lite axis's or tooltip's `format`); three
        significant digits keep their trailing zeros ('1.60' beside '1.19', as `number` prints
        them; a value of 1,000 or more reads rounded to three digits, '1,230')."""
        if self.places is None:
            return f"{'+' if self.sign else ''},.{SIGNIFICANT}r"
        return f"{'+' if self.sign else ''},.{self.places}f"


#: an accuracy in % (top-1 %), a standard deviation of one, or an effect size in points
POINTS = Quantity("accuracy in %", POINTS_PLACES)
#: a gain: a difference of accuracies in points, with its sign
GAIN = Quantity("gain in points", POINTS_PLACES, sign=True)
#: a mean of counts (the toy's components solved, of 4)
MEAN_COUNT = Quantity("a mean of counts", 2)
#: anything else: three significant digits
OTHER = Quantity("other", None)
