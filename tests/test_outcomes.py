"""A claim's primary endpoint in three outcomes (kit.stats.outcomes): intervals within the
metric's range, the minimum detectable effect against a simulation, and the calibration the
verdicts promise, measured by simulation on tables shaped like notebook 03's (no training):
`reproduced` under no effect and `contradicted` under an effect equal to the smallest effect of
interest each come out at most about 5 % of the time, at 3, 5 and 8 replicates."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kit.experiments.timecat import comparisons
from kit.stats import outcomes as o

SMALLEST = 2.9
#: per-task top-1 spread (points) of one probe cell over replicates, and the spread shared by a
#: replicate's variants (its world draw): about what the cpu profile measures
TASK_SPREAD, SHARED_SPREAD = 3.0, 2.0
TASKS = {
    "mixture": "in-distribution",
    "shape": "in-mixture",
    "texture": "in-mixture",
    "position": "unseen",
}
VARIANTS = {
    "cat1": ("time-concat", 1, 1.0, 240),
    "cat4": ("time-concat", 4, 1.0, 60),
    "wide1": ("wide", 1, 2.0, 60),
    "random4": ("random-init", 4, 1.0, None),
}


def simulated(
    cat4_gain: float,
    replicates: int,
    rng: np.random.Generator,
    wide_gain: float = -6.0,
    random_gain: float = -30.0,
) -> pl.DataFrame:
    """Probe results of one run: every variant at 60 % plus its planted gain on the transfer
    tasks, a per-replicate shared draw and per-cell noise."""
    gains = {"cat1": 0.0, "cat4": cat4_gain, "wide1": wide_gain, "random4": random_gain}
    rows = []
    for r in range(replicates):
        shared = rng.normal(0, SHARED_SPREAD, size=len(TASKS))
        for (task, role), level in zip(TASKS.items(), shared, strict=True):
            for name, (kind, n, width, iterations) in VARIANTS.items():
                gain = gains[name] if role != "in-distribution" else 0.0
                top1 = 60 + level + gain + rng.normal(0, TASK_SPREAD)
                rows.append(
                    {
                        "variant": name,
                        "kind": kind,
                        "n": n,
                        "width": width,
                        "iterations_per_model": iterations,
                        "replicate": r,
                        "task": task,
                        "role": role,
                        "rule": "heldout",
                        "top1": top1 / 100,
                        "train_top1": top1 / 100,
                    }
                )
    return pl.DataFrame(rows)


def rate(cat4_gain: float, replicates: int, status: str, draws: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    found = [
        comparisons.summarize(
            simulated(cat4_gain, replicates, rng), "heldout", "cat1", None, SMALLEST
        )["claim"]["status"]
        for _ in range(draws)
    ]
    return float(np.mean([s == status for s in found]))


# the verdict rule's error rates by simulation, about a minute on 2 cores with the test below:
# the full suite's, not the fast lane's
@pytest.mark.slow
@pytest.mark.parametrize("replicates", [3, 5, 8])
def test_calibration_no_effect_is_rarely_reproduced_and_the_smallest_rarely_contradicted(
    replicates: int,
) -> None:
    draws = 200
    margin = 3 * np.sqrt(0.05 * 0.95 / draws)  # three binomial standard errors above 5 %
    assert rate(0.0, replicates, o.REPRODUCED, draws, seed=replicates) <= 0.05 + margin
    assert rate(SMALLEST, replicates, o.CONTRADICTED, draws, seed=100 + replicates) <= 0.05 + margin


@pytest.mark.slow
def test_a_paper_sized_gain_is_found_and_the_null_contradicted_with_enough_replicates() -> None:
    # the paper's cat4 gain (5.8 points) at 8 replicates: found most of the time
    assert rate(5.8, 8, o.REPRODUCED, 60, seed=7) >= 0.7
    # no effect at 8 replicates: a paper-sized gain is excluded most of the time
    assert rate(0.0, 8, o.CONTRADICTED, 60, seed=8) >= 0.5


def test_intervals_stay_within_the_metric_and_say_when_clipped() -> None:
    wide = o.estimate([90.0, -60.0, 95.0])
    assert wide.low == -100.0 and wide.high == 100.0 and wide.clipped
    narrow = o.estimate([1.0, 2.0, 3.0])
    assert not narrow.clipped and narrow.low < 2.0 < narrow.high
    assert o.estimate([5.0]).low is None and o.estimate([]).mean is None


def test_the_minimum_detectable_effect_is_found_with_the_stated_power() -> None:
    std, replicates = 4.0, 5
    effect = o.detectable(std, replicates)
    rng = np.random.default_rng(0)
    holds = [o.estimate(rng.normal(effect, std, replicates)).low > 0 for _ in range(4000)]
    assert np.mean(holds) == pytest.approx(o.POWER, abs=0.03)
    assert o.detectable(std, 20) < effect and o.detectable(None, 5) is None
    # the same spread detects its own effect at these replicates, and a smaller one needs more
    assert o.replicates_needed(std, effect * 1.001) == replicates
    assert o.replicates_needed(std, effect * 0.95) > replicates


@pytest.mark.parametrize(
    "values, margin, judgement",
    [
        ([4.0, 5.0, 6.0], 0.0, o.HOLDS),  # above 0
        ([-1.0, 0.0, 1.0], 0.0, o.CONTRADICTED),  # excludes 2.9
        ([-5.0, 3.0, 9.0], 0.0, o.INCONCLUSIVE),  # cannot tell
        ([-2.0, -1.0, -1.5], -2.9, o.HOLDS),  # not worse by 2.9
        ([-9.0, -8.0, -8.5], -2.9, o.CONTRADICTED),  # a loss: even no difference excluded
    ],
)
def test_a_condition_is_judged_against_its_margin(values, margin, judgement) -> None:
    found = o.Condition("c", "a", "b", ("t",), o.estimate(values), margin)
    assert o.judge(found, SMALLEST) == judgement


def test_the_claim_needs_every_condition_and_any_contradiction_decides() -> None:
    holds = o.Condition("support", "a", "b", ("t",), o.estimate([4.0, 5.0, 6.0]))
    unsure = o.Condition("control", "a", "c", ("t",), o.estimate([-5.0, 3.0, 9.0]))
    fails = o.Condition("control", "a", "d", ("t",), o.estimate([-1.0, 0.0, 1.0]))
    missing = o.Condition("control", "a", "wide", (), o.estimate([]), missing="not run")
    assert o.outcome("x", [holds], SMALLEST).status == o.REPRODUCED
    assert o.outcome("x", [holds, unsure], SMALLEST).status == o.INCONCLUSIVE
    assert o.outcome("x", [holds, unsure, fails], SMALLEST).status == o.CONTRADICTED
    found = o.outcome("x", [holds, missing], SMALLEST)
    assert found.status == o.INCONCLUSIVE and "control: not run" in found.reasons
    one = o.outcome("x", [o.Condition("s", "a", "b", ("t",), o.estimate([9.0]))], SMALLEST)
    assert one.status == o.INCONCLUSIVE and one.rows[0]["detectable"] is None
