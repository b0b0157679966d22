"""The toy counterexample's construction (paper Section 3), analysed exactly, without training:
the four support points in XOR position in the (phi1, phi2) plane, the mixture's four components,
which feature solves each, whether a set of points is linearly separable, and the classifier a
mixture's optimum keeps. kit.experiments.toy trains and probes models on it."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import polars as pl
import torch
from scipy.optimize import linprog

FEATURES = ("phi1", "phi2")
POINT_NAMES = ("A", "B", "C", "D")
#: support points of the mixture in the (phi1, phi2) plane, and their labels (1 = positive)
POINTS = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
LABELS = torch.tensor([1.0, 1.0, 0.0, 0.0])
COMPONENT_NAMES = ("P1", "P2", "P3", "P4")
#: mass each component puts on A, B, C, D: a third on each of three points
COMPONENT_MASSES = (
    torch.tensor([[1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 1]], dtype=torch.float32) / 3
)
#: the feature that solves each component alone (index into FEATURES)
COMPONENT_FEATURE = (0, 0, 1, 1)


def mixture_masses(weights: torch.Tensor) -> torch.Tensor:
    """Mass of A, B, C, D under mixtures with the given component weights (rows sum to 1)."""
    return weights @ COMPONENT_MASSES


def linearly_separable(points: np.ndarray, labels: np.ndarray) -> bool:
    """Exact test: two finite sets are linearly separable iff their convex hulls are disjoint.

    The hulls meet iff some convex combination of positives equals one of negatives, a linear
    feasibility problem.
    """
    pos, neg = points[labels == 1], points[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return True
    n_pos, n_neg = len(pos), len(neg)
    a_eq = np.zeros((points.shape[1] + 2, n_pos + n_neg))
    a_eq[: points.shape[1], :n_pos] = pos.T
    a_eq[: points.shape[1], n_pos:] = -neg.T
    a_eq[-2, :n_pos] = 1
    a_eq[-1, n_pos:] = 1
    b_eq = np.zeros(points.shape[1] + 2)
    b_eq[-2:] = 1
    result = linprog(np.zeros(n_pos + n_neg), A_eq=a_eq, b_eq=b_eq, bounds=(0, None))
    return result.status != 0  # infeasible: hulls are disjoint


def separable_by_feature(points: np.ndarray, labels: np.ndarray, feature: int) -> bool:
    """True when a threshold on one feature alone separates the classes."""
    pos, neg = points[labels == 1, feature], points[labels == 0, feature]
    if len(pos) == 0 or len(neg) == 0:
        return True
    return bool(pos.min() > neg.max() or pos.max() < neg.min())


def features_needed(points: np.ndarray, labels: np.ndarray) -> str:
    """Which features a perfect linear classifier of these points needs: 'phi1', 'phi2',
    'phi1+phi2', 'none' (one class only) or 'not separable'."""
    if len(set(labels.tolist())) < 2:
        return "none"
    alone = [name for k, name in enumerate(FEATURES) if separable_by_feature(points, labels, k)]
    if alone:
        return " or ".join(alone)
    return "phi1+phi2" if linearly_separable(points, labels) else "not separable"


def component_table() -> pl.DataFrame:
    """The construction: each component's support, and which single features solve it."""
    rows = []
    points, labels = POINTS.numpy(), LABELS.numpy()
    for c, name in enumerate(COMPONENT_NAMES):
        on = COMPONENT_MASSES[c].numpy() > 0
        rows.append(
            {
                "component": name,
                "positives": ", ".join(
                    p for p, s, y in zip(POINT_NAMES, on, labels, strict=True) if s and y == 1
                ),
                "negatives": ", ".join(
                    p for p, s, y in zip(POINT_NAMES, on, labels, strict=True) if s and y == 0
                ),
                "solved_by_phi1_alone": separable_by_feature(points[on], labels[on], 0),
                "solved_by_phi2_alone": separable_by_feature(points[on], labels[on], 1),
            }
        )
    return pl.DataFrame(rows)


def optimal_mixture_classifier(weights: torch.Tensor) -> dict[str, object]:
    """The linear classifiers with least 0-1 error on a mixture, found by exhaustive search.

    Every set of support points is tried as the set to give up; among those whose complement is
    linearly separable, the lightest ones win (several when masses tie). Reports what they give
    up, their error and which features their separators need.
    """
    masses = mixture_masses(weights.reshape(1, -1))[0].numpy()
    candidates = [
        (float(masses[list(dropped)].sum()), dropped, features)
        for dropped, features in _separable_complements()
    ]
    error = min(c[0] for c in candidates)
    best = [c for c in candidates if c[0] <= error + 1e-9]
    given_up = [", ".join(POINT_NAMES[i] for i in c[1]) or "-" for c in best]
    return {
        "dropped": " | ".join(given_up),
        "error": round(error, 4),
        "features": " | ".join(sorted({c[2] for c in best})),
    }


@functools.cache
def _separable_complements() -> tuple[tuple[tuple[int, ...], str], ...]:
    """Every set of support points whose complement is linearly separable, with the features
    that complement's separators need: the support is fixed, so its linear programs are solved
    once per process, not once per mixture (notebook 01 asks for every trained model's)."""
    points, labels = POINTS.numpy(), LABELS.numpy()
    found = []
    for size in range(len(points) + 1):
        for dropped in itertools.combinations(range(len(points)), size):
            kept = [i for i in range(len(points)) if i not in dropped]
            if linearly_separable(points[kept], labels[kept]):
                found.append((dropped, features_needed(points[kept], labels[kept])))
    return tuple(found)


def dominated_weights(dominant: int, share: float) -> torch.Tensor:
    """Mixture weights with `share` on one component and the rest split evenly."""
    weights = torch.full(
        (len(COMPONENT_NAMES),),
        (1 - share) / (len(COMPONENT_NAMES) - 1),
    )
    weights[dominant] = share
    return weights


def optimum_table(shares: list[float]) -> pl.DataFrame:
    """`optimal_mixture_classifier` of every mixture with `share` on one component (the rest
    split evenly), after the mixture's mass on each support point."""
    rows = [
        (share, name, dominated_weights(d, share))
        for share in shares
        for d, name in enumerate(COMPONENT_NAMES)
    ]
    return pl.DataFrame(
        [
            {
                "share": share,
                "dominant": name,
                **{
                    f"mass {p}": m
                    for p, m in zip(POINT_NAMES, mixture_masses(w[None])[0].tolist(), strict=True)
                },
                **optimal_mixture_classifier(w),
            }
            for share, name, w in rows
        ]
    )


def mixture_is_linearly_separable() -> bool:
    return linearly_separable(POINTS.numpy(), LABELS.numpy())
