"""How the group-sequential rule behaves, measured by simulation: the share of simulated runs
that end `holds`, `contradicted`, `no effect of interest` or `inconclusive`, the replicates
they use and the look at which they stop, for a planted effect and spread.

Each simulated run draws `most` paired values (the true effect above the margin plus noise of
the given spread) and is judged look by look exactly as `kit.stats.sequential.judge` judges a
run, stopping at its first stop; the draws are vectorised, so 100,000 runs take about a second.
The noise is normal or, since replicates of one world sometimes disagree by tens of points,
Student's t with 3 degrees of freedom scaled to the same spread (heavy tails).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.stats.sequential import (
    CONTRADICTED,
    FUTILITY_POWER,
    HOLDS,
    INCONCLUSIVE,
    NO_INTEREST,
    Rounds,
)

NORMAL, HEAVY = "normal", "t3"
NOISES = (NORMAL, HEAVY)
OUTCOMES = (HOLDS, CONTRADICTED, NO_INTEREST, INCONCLUSIVE)


@dataclass(frozen=True)
class Simulated:
    """The rates of one simulated setting: `rates` per final judgement, the mean replicates
    used, and the share of runs stopping at each look (`stopped`, one per planned look)."""

    draws: int
    rates: dict[str, float]
    replicates: float
    stopped: tuple[float, ...]

    def slack(self, rate: float, sigmas: float = 3.0) -> float:
        """The Monte-Carlo allowance for a rate near `rate` estimated from `draws` runs:
        `sigmas` binomial standard errors."""
        return sigmas * math.sqrt(max(rate * (1 - rate), 1e-12) / self.draws)


def noise(kind: str, std: float, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Centered noise of spread `std`: normal, or t with 3 degrees of freedom (variance 3)
    scaled to that spread."""
    if kind == NORMAL:
        return rng.normal(0.0, std, shape)
    if kind == HEAVY:
        return rng.standard_t(3, shape) * std / math.sqrt(3.0)
    raise ValueError(f"unknown noise {kind!r}; one of {', '.join(NOISES)}")


def simulate(
    rounds: Rounds,
    effect: float,
    std: float,
    smallest: float,
    draws: int,
    rng: np.random.Generator,
    kind: str = NORMAL,
    margin: float = 0.0,
) -> Simulated:
    """`draws` runs of `rounds` with a true effect `effect` above `margin` and noise `kind` of
    spread `std`, judged against `smallest` as the kit judges a condition."""
    values = margin + effect + noise(kind, std, (draws, rounds.most), rng)
    looks = rounds.looks
    final = np.full(draws, "", dtype=object)
    used = np.full(draws, rounds.most)
    stopped = []
    for k, count in enumerate(looks):
        part = values[:, :count]
        mean, spread = part.mean(axis=1), part.std(axis=1, ddof=1)
        critical = rounds.critical(looks[: k + 1])
        half = critical * spread / math.sqrt(count)
        open_ = final == ""
        judged = np.full(draws, "", dtype=object)
        judged[mean - half > margin] = HOLDS
        judged[(judged == "") & (mean + half < margin + smallest)] = CONTRADICTED
        if count >= rounds.most:
            judged[judged == ""] = INCONCLUSIVE
        elif rounds.futility:
            found = rounds.unit_detectable(looks[: k + 1], FUTILITY_POWER) * spread
            judged[(judged == "") & (found <= smallest)] = NO_INTEREST
        now = open_ & (judged != "")
        final[now] = judged[now]
        used[now] = count
        stopped.append(float(now.mean()))
    return Simulated(
        draws=draws,
        rates={name: float((final == name).mean()) for name in OUTCOMES},
        replicates=float(used.mean()),
        stopped=tuple(stopped),
    )
