"""Two-sided group-sequential boundaries by alpha spending, for a normal statistic with known
variance looked at after several rounds.

A run adds replicates in rounds and judges the claim after each; looking at the data several
times and stopping at the first interval that excludes the margin would make a false `holds`
more likely than a single look does. Alpha spending (Lan and DeMets, Biometrika 70(3):659-663,
1983) fixes how much of the two-sided error `level` may be used up by the time a fraction t of
the planned replicates has been seen, through a spending function alpha(t) with alpha(0) = 0 and
alpha(1) = level; the boundary c_k at look k is then the value for which the probability, under
no effect, of first crossing |Z| >= c at look k equals alpha(t_k) - alpha(t_{k-1}). Because only
the fractions seen so far enter c_k, the looks need not be equally spaced nor all made.

Two spending functions are offered (Jennison and Turnbull, Group Sequential Methods with
Applications to Clinical Trials, Chapman & Hall/CRC 2000, Section 7.2):

- `obrien-fleming`: each side spends 2 - 2 Phi(z_{1 - level/4} / sqrt(t)) of its level / 2, so
  alpha(t) = 4 - 4 Phi(z_{1 - level/4} / sqrt(t)); it spends almost nothing early, so that the
  last look's boundary stays close to the fixed-sample one;
- `pocock`: alpha(t) = level log(1 + (e - 1) t), which spends evenly and stops earlier at the
  price of a wider last interval.

The crossing probabilities come from the canonical joint distribution of the z statistics
(Z_k sqrt(n_k) is a sum of n_k independent unit normals), integrated look by look on a grid
(Simpson's rule), which is deterministic and accurate to well below the errors that matter here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import scipy.optimize
import scipy.stats

OBRIEN_FLEMING, POCOCK = "obrien-fleming", "pocock"
SPENDING = (OBRIEN_FLEMING, POCOCK)
#: grid points across the continuation region of one look (odd, for Simpson's rule)
GRID = 801
#: a boundary beyond this many standard deviations is treated as never crossed
FAR = 40.0


def spent(fraction: float, level: float, spending: str) -> float:
    """The two-sided error used up by information fraction `fraction` (clipped to [0, 1])."""
    t = min(max(fraction, 0.0), 1.0)
    if t == 0:
        return 0.0
    if spending == OBRIEN_FLEMING:
        return float(4 * scipy.stats.norm.sf(scipy.stats.norm.isf(level / 4) / math.sqrt(t)))
    if spending == POCOCK:
        return level * math.log(1 + (math.e - 1) * t)
    raise ValueError(f"unknown spending function {spending!r}; one of {', '.join(SPENDING)}")


def _normal_density(x: np.ndarray) -> np.ndarray:
    """The standard normal density (numpy's, without scipy's argument checks, which dominate
    the time on a grid this size)."""
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _simpson(points: int) -> np.ndarray:
    """Simpson's weights for `points` (odd) equally spaced points on [0, 1]."""
    weights = np.ones(points)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return weights / (3 * (points - 1))


def _crossing(c: float, root: float, here: np.ndarray, mass: np.ndarray, scale: float) -> float:
    """The probability of reaching look k with the sum at `here` (its probability `mass`) and
    then crossing |sum| >= c `root` after a normal step of spread `scale`."""
    up = scipy.stats.norm.sf((c * root - here) / scale)
    down = scipy.stats.norm.cdf((-c * root - here) / scale)
    return float(np.sum(mass * (up + down)))


def _solve(root: float, here: np.ndarray, mass: np.ndarray, scale: float, target: float) -> float:
    """The boundary whose crossing probability is `target` (infinite when nothing is spent)."""
    if target <= 1e-15:
        return math.inf
    if _crossing(0.0, root, here, mass, scale) <= target:
        return 0.0
    return float(
        scipy.optimize.brentq(
            lambda c: _crossing(c, root, here, mass, scale) - target, 0.0, FAR, xtol=1e-10
        )
    )


@functools.lru_cache(maxsize=256)
def _cached(counts: tuple[int, ...], most: int, level: float, spending: str) -> tuple[float, ...]:
    """`z_boundaries` for a checked, hashable plan. Before the first look the sum is 0 with
    probability 1; after each look the probability the run goes on is carried on a grid over
    the continuation region |sum| < c_k sqrt(n_k), as masses (density times Simpson weight)."""
    spend = [spent(n / most, level, spending) for n in counts]
    increments = np.diff([0.0, *spend])
    here, mass = np.zeros(1), np.ones(1)
    bounds: list[float] = []
    for k, n in enumerate(counts):
        root, scale = math.sqrt(n), math.sqrt(n - (counts[k - 1] if k else 0))
        c = _solve(root, here, mass, scale, float(increments[k]))
        bounds.append(c)
        edge = min(c, FAR) * root
        grid = np.linspace(-edge, edge, GRID)
        density = _normal_density((grid[:, None] - here[None, :]) / scale) @ mass / scale
        here, mass = grid, density * _simpson(GRID) * 2 * edge
    return tuple(bounds)


def z_boundaries(
    counts: Sequence[int], most: int, level: float = 0.05, spending: str = OBRIEN_FLEMING
) -> tuple[float, ...]:
    """The two-sided z boundary at each look made after `counts` replicates (increasing), for a
    plan of `most` replicates: |Z_k| >= c_k at look k spends alpha(n_k / most) -
    alpha(n_{k-1} / most) of `level` under no effect. One look at `most` gives z_{1 - level/2}.
    A count above `most` is read as the plan's end (the error left is spent there)."""
    counts = tuple(int(n) for n in counts)
    if not counts or any(b <= a for a, b in zip(counts, counts[1:], strict=False)):
        raise ValueError(f"looks must be increasing replicate counts, got {counts}")
    if counts[0] < 1:
        raise ValueError(f"a look needs at least one replicate, got {counts}")
    spent(0.5, level, spending)  # names an unknown spending function here
    return _cached(counts, max(int(most), counts[-1]), float(level), spending)
