"""A finished tqdm bar's text, read as a reader reads it: its count, elapsed time and rate, and
whether the rate is its count over its elapsed time to the precision the line shows them
(tqdm's clock in whole seconds, cut not rounded; its rate with two decimals, as units a second
or, below one, seconds a unit). Shared by the progress tests and the browser test."""

from __future__ import annotations

import re

#: a finished tqdm bar's line: 'fast probes: 100%|##########| 26/26 [00:13<00:00, 2.07probe/s]'
BAR_LINE = re.compile(
    r"(?P<desc>.*?): +\d+%\|[^|]*\| *(?P<n>\d+)/(?P<total>\d+) \[(?P<elapsed>[\d:]+)<[^,\]]*, *"
    r"(?:(?P<rate>[\d.]+)(?P<scale>[kMG]?)|\?)(?:s/(?P<per>\w+)|(?P<unit>\w+)/s)"
)
#: the counts, time and rate of a bar wherever its text shows them (Lab's widget splits the
#: description and bar from them): ' 10/10 [00:17<00:00,  1.07s/run]'
BAR_COUNTS = re.compile(
    r"(?P<n>\d+)/(?P<total>\d+) \[(?P<elapsed>[\d:]+)<[^,\]]*, *"
    r"(?:(?P<rate>[\d.]+)(?P<scale>[kMG]?)|\?)(?:s/(?P<per>\w+)|(?P<unit>\w+)/s)"
)
#: tqdm's SI prefixes of a scaled rate ('1.23MB/s')
SCALES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def clock_seconds(clock: str) -> int:
    """tqdm's '01:05' or '1:02:05' in seconds."""
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total


def rate_disagrees(bar: re.Match[str]) -> str | None:
    """Why a finished bar's rate is not its count over its elapsed time as shown (None when it
    is, or when it shows no rate): the elapsed time shown, E, means [E, E + 1) seconds."""
    if bar["rate"] is None:
        return None
    n, low = int(bar["n"]), clock_seconds(bar["elapsed"])
    scale = SCALES[bar["scale"]]
    shown = float(bar["rate"]) * scale
    decimals = len(bar["rate"].partition(".")[2])
    half = 0.5 * 10**-decimals * scale + 1e-9  # half the last digit shown, and float's margin
    if bar["per"]:  # seconds a unit
        fits = low / n - half <= shown <= (low + 1) / n + half
    else:  # units a second
        fits = n / (low + 1) - half <= shown and (low == 0 or shown <= n / low + half)
    return None if fits else f"{bar[0]!r}: the rate shown is not {n} over {bar['elapsed']}"
