"""Secondary verdicts from paired differences (kit.stats.verdicts): planted effects are found,
null families rarely produce a label (family-wise error controlled by Holm's method), intervals
agree with labels and stay within the range of an accuracy difference."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kit.stats import verdicts as v


def family(
    effects: list[float], replicates: int = 5, noise: float = 1.0, seed: int = 0, name: str = "f"
) -> pl.DataFrame:
    """Per-replicate differences of one family: comparison c<i> has mean effects[i]."""
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        [
            {
                "family": name,
                "comparison": f"c{i}",
                "replicate": r,
                "difference": float(effect + noise * rng.normal()),
            }
            for i, effect in enumerate(effects)
            for r in range(replicates)
        ]
    )


def test_holm_matches_a_hand_computed_example_and_is_monotone() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4x, 3x, 2x, 1x = 0.02, 0.03, 0.06, 0.04 -> running max
    assert v.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rng = np.random.default_rng(3)
    for _ in range(20):
        raw = rng.uniform(size=12) ** 3
        adjusted = v.holm(list(raw))
        order = np.argsort(raw)
        assert np.all(np.diff(np.array(adjusted)[order]) >= 0)  # monotone in p
        assert np.all(np.array(adjusted) >= raw) and max(adjusted) <= 1.0
    assert v.holm([]) == [] and v.holm([0.2]) == [0.2]


def test_a_planted_effect_is_found_better_after_holm_over_ten_comparisons() -> None:
    judged = v.verdicts(family([3.0] + [0.0] * 9), by=["comparison"])
    assert judged.height == 10 and (judged["comparisons"] == 10).all()
    planted = judged.row(0, named=True)
    assert planted["verdict"] == v.BETTER and planted["mean"] == pytest.approx(3.0, abs=1.0)
    assert planted["p_adjusted"] <= v.LEVEL and planted["low"] > 0
    assert planted["p_adjusted"] >= planted["p_value"]
    assert (judged["verdict"][1:] == v.UNCLEAR).all()
    # over seeds, the planted effect is found most of the time (power about 0.7 at 5 replicates)
    found = [
        v.verdicts(family([3.0] + [0.0] * 9, seed=s), by=["comparison"])["verdict"][0] == v.BETTER
        for s in range(60)
    ]
    assert np.mean(found) >= 0.5


def test_a_negative_planted_effect_is_worse() -> None:
    judged = v.verdicts(family([-3.0, 0.0, 0.0, 0.0]), by=["comparison"])
    assert judged["verdict"][0] == v.WORSE and judged["high"][0] < 0


def test_null_families_are_labelled_in_at_most_five_percent_plus_a_margin() -> None:
    families = 400
    frames = pl.concat([family([0.0] * 10, seed=1000 + s, name=f"f{s}") for s in range(families)])
    judged = v.verdicts(frames, by=["family", "comparison"], family=["family"])
    assert (judged["comparisons"] == 10).all()
    labelled = judged.group_by("family").agg((pl.col("verdict") != v.UNCLEAR).any())
    rate = labelled["verdict"].mean()
    margin = 3 * np.sqrt(0.05 * 0.95 / families)  # three binomial standard errors
    assert rate <= 0.05 + margin
    # unadjusted, the same tables would label far more families (about 1 - 0.95**10 = 0.40)
    assert (judged["p_value"] <= 0.05).sum() > 2 * labelled["verdict"].sum()


def test_one_replicate_is_untested_and_left_out_of_the_family() -> None:
    rows = family([5.0, 3.0], replicates=5)
    single = pl.DataFrame(
        {"family": ["f"], "comparison": ["alone"], "replicate": [0], "difference": [9.0]}
    )
    judged = v.verdicts(pl.concat([rows, single]), by=["comparison"])
    alone = judged.filter(pl.col("comparison") == "alone").row(0, named=True)
    assert alone["verdict"] == v.UNTESTED and alone["p_value"] is None
    assert alone["low"] is None and alone["mean"] == 9.0
    assert (judged["comparisons"] == 2).all()


def test_intervals_exclude_zero_exactly_when_labelled() -> None:
    effects = [0.0, 0.5, 1.0, 1.5, 2.0, -1.0, -2.0, 3.0]
    judged = v.verdicts(
        pl.concat([family(effects, seed=s, name=f"f{s}") for s in range(30)]),
        by=["family", "comparison"],
        family=["family"],
    )
    excludes = (judged["low"] > 0) | (judged["high"] < 0)
    assert (excludes == (judged["verdict"] != v.UNCLEAR)).all()
    assert set(judged["verdict"]) == {v.BETTER, v.WORSE, v.UNCLEAR}


def test_equal_differences_and_an_empty_table() -> None:
    steady = pl.DataFrame(
        {
            "comparison": ["a"] * 3 + ["b"] * 3,
            "replicate": [0, 1, 2] * 2,
            "difference": [2.0] * 3 + [0.0] * 3,
        }
    )
    judged = v.verdicts(steady, by=["comparison"])
    assert judged["verdict"].to_list() == [v.BETTER, v.UNCLEAR]
    empty = v.verdicts(steady.clear(), by=["comparison"])
    assert empty.height == 0 and "verdict" in empty.columns


def test_intervals_stay_within_the_range_of_an_accuracy_difference() -> None:
    wild = pl.DataFrame(
        {"comparison": ["a"] * 3, "replicate": [0, 1, 2], "difference": [90.0, -70.0, 95.0]}
    )
    judged = v.verdicts(wild, by=["comparison"]).row(0, named=True)
    assert judged["low"] == -100.0 and judged["high"] == 100.0


def test_means_within_the_resolution_or_at_the_ceiling_are_tied() -> None:
    steady = pl.DataFrame(
        {
            "comparison": ["one row"] * 3 + ["four rows"] * 3 + ["at 100"] * 3,
            "replicate": [0, 1, 2] * 3,
            "difference": [-0.3] * 3 + [-1.6] * 3 + [-0.05] * 3,
            "resolution": [0.4] * 6 + [0.01] * 3,
            "at_ceiling": [False] * 6 + [True] * 3,
        }
    )
    judged = v.verdicts(steady, by=["comparison"], resolution="resolution", ceiling="at_ceiling")
    assert judged["verdict"].to_list() == [v.TIED, v.WORSE, v.TIED]
    plain = v.verdicts(steady, by=["comparison"], resolution="resolution")
    assert plain["verdict"].to_list() == [v.TIED, v.WORSE, v.WORSE]
