"""The group-sequential rule (kit.stats): its boundaries against published values, one look
against the fixed-sample verdict, and its error rates and power measured by simulation at the
looks the kit makes (rounds of 3 up to 12 and up to 24), with Monte-Carlo allowances computed
from the number of simulated runs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
import scipy.stats

from kit.stats import outcomes, sequential, simulation, spending
from kit.stats import rounds as claim_rounds
from kit.stats.sequential import Rounds

LEVEL = sequential.LEVEL
#: the looks the notebooks make with rounds of 3
PLANS = [Rounds(first=3, add=3, most=12), Rounds(first=3, add=3, most=24)]
DRAWS = 60_000


def test_obrien_fleming_and_pocock_boundaries_match_published_values() -> None:
    """Five equally spaced looks at two-sided 0.05: the Lan-DeMets O'Brien-Fleming-type
    boundaries tabulated by Jennison and Turnbull (2000), and one look gives z_0.975."""
    found = spending.z_boundaries([1, 2, 3, 4, 5], 5, LEVEL, spending.OBRIEN_FLEMING)
    assert found == pytest.approx([4.877, 3.357, 2.680, 2.290, 2.031], abs=2e-3)
    assert spending.z_boundaries([7], 7) == pytest.approx((scipy.stats.norm.isf(LEVEL / 2),))
    pocock = spending.z_boundaries([3, 6, 9, 12], 12, LEVEL, spending.POCOCK)
    assert max(pocock) - min(pocock) < 0.03


@pytest.mark.parametrize("rounds", PLANS, ids=["to12", "to24"])
def test_boundaries_fall_look_by_look(rounds: Rounds) -> None:
    """Both the normal boundaries and the t multipliers decrease from look to look, and the
    level spent is at most the stated one."""
    z = rounds.z_boundaries()
    critical = [rounds.critical(rounds.looks[: k + 1]) for k in range(len(rounds.looks))]
    assert all(a > b for a, b in zip(z, z[1:], strict=False))
    assert all(a > b for a, b in zip(critical, critical[1:], strict=False))
    assert 0.8 * LEVEL < rounds.spent_level <= LEVEL
    assert critical[-1] > scipy.stats.t.isf(LEVEL / 2, rounds.most - 1)


def test_one_look_is_the_fixed_sample_verdict() -> None:
    """`Rounds.fixed(n)` judges as kit.stats.outcomes does: same interval, same verdict."""
    rng = np.random.default_rng(11)
    for count in (2, 3, 5, 12):
        rounds = Rounds.fixed(count)
        assert rounds.looks == (count,) and rounds.spent_level == LEVEL
        assert rounds.critical() == pytest.approx(scipy.stats.t.isf(LEVEL / 2, count - 1))
        for _ in range(40):
            values = rng.normal(rng.uniform(-3, 6), rng.uniform(0.5, 4), count)
            fixed = outcomes.estimate(values)
            assert fixed.mean is not None and fixed.std is not None
            look = sequential.judge(
                fixed.mean, fixed.std, (count,), rounds, 0.0, 2.0, outcomes.METRIC_RANGE
            )
            assert (look.low, look.high) == pytest.approx((fixed.low, fixed.high))
            condition = outcomes.Condition("c", "a", "b", ("t",), fixed)
            assert look.judgement == outcomes.judge(condition, 2.0)


@pytest.mark.parametrize("futility", [True, False], ids=["futility", "no-futility"])
@pytest.mark.parametrize("rounds", PLANS, ids=["to12", "to24"])
def test_no_effect_holds_at_most_level_over_two(rounds: Rounds, futility: bool) -> None:
    """Under a true effect at the margin, `holds` at any look comes out at most LEVEL / 2 of
    the time (plus three Monte-Carlo standard errors); a tiny smallest effect of interest keeps
    the other stops away, the worst case for this rate."""
    plan = Rounds(rounds.first, rounds.add, rounds.most, futility=futility)
    for kind in simulation.NOISES:
        found = simulation.simulate(plan, 0.0, 5.0, 0.01, DRAWS, np.random.default_rng(12), kind)
        rate = found.rates[sequential.HOLDS]
        assert rate <= LEVEL / 2 + found.slack(LEVEL / 2), (kind, rate)


@pytest.mark.parametrize("rounds", PLANS, ids=["to12", "to24"])
def test_an_effect_of_interest_is_contradicted_at_most_level_over_two(rounds: Rounds) -> None:
    """Under a true effect of exactly margin + smallest, `contradicted` comes out at most
    LEVEL / 2 of the time (plus the Monte-Carlo allowance)."""
    for kind in simulation.NOISES:
        found = simulation.simulate(rounds, 3.0, 4.0, 3.0, DRAWS, np.random.default_rng(13), kind)
        rate = found.rates[sequential.CONTRADICTED]
        assert rate <= LEVEL / 2 + found.slack(LEVEL / 2), (kind, rate)


@pytest.mark.parametrize("rounds", PLANS, ids=["to12", "to24"])
def test_a_planted_effect_is_found_at_the_stated_power(rounds: Rounds) -> None:
    """An effect the size of the design's detectable effect, which is also the smallest of
    interest (the case the futility stop costs most), holds with at least the stated power
    less the Monte-Carlo allowance; twice that effect holds more often still."""
    std = 4.0
    effect = rounds.detectable(std)
    rng = np.random.default_rng(14)
    for kind in simulation.NOISES:
        found = simulation.simulate(rounds, effect, std, effect, DRAWS, rng, kind)
        rate = found.rates[sequential.HOLDS]
        assert rate >= sequential.POWER - found.slack(sequential.POWER), (kind, rate)
        assert found.replicates < rounds.most
    larger = simulation.simulate(rounds, 2 * effect, std, effect, DRAWS, rng)
    assert larger.rates[sequential.HOLDS] > 0.99


def test_every_run_stops_by_the_last_look_and_stops_are_counted_once() -> None:
    rounds = PLANS[0]
    found = simulation.simulate(rounds, 1.0, 3.0, 2.0, 20_000, np.random.default_rng(15))
    assert sum(found.stopped) == pytest.approx(1.0)
    assert sum(found.rates.values()) == pytest.approx(1.0)
    assert rounds.first <= found.replicates <= rounds.most


def test_a_condition_decided_at_the_first_look_asks_for_no_more_replicates() -> None:
    """Planted replicates that agree closely decide at the first look (holds above the
    margin, contradicted far below it), and a decided condition wants no more replicates; an
    undecided one wants the next round's count."""
    rounds = PLANS[0]
    assert sequential.wanted(rounds, 0, None) == 3
    decided = {
        sequential.HOLDS: np.array([10.0, 10.0005, 9.9995]),
        sequential.CONTRADICTED: np.array([-20.0, -20.0005, -19.9995]),
    }
    for judgement, values in decided.items():
        look = sequential.judge(values.mean(), values.std(ddof=1), (3,), rounds, 0.0, 3.0)
        assert look.judgement == judgement and look.stops
        assert sequential.wanted(rounds, 3, look) == 3
    spread = np.array([2.0, 9.0, -4.0])
    look = sequential.judge(spread.mean(), spread.std(ddof=1), (3,), rounds, 0.0, 3.0)
    assert look.judgement == sequential.CONTINUE
    assert sequential.wanted(rounds, 3, look) == 6


def test_the_last_look_is_inconclusive_rather_than_continue() -> None:
    rounds = PLANS[0]
    look = sequential.judge(1.0, 6.0, rounds.looks, rounds, 0.0, 3.0)
    assert look.judgement == sequential.INCONCLUSIVE and look.stops
    assert math.isfinite(look.low) and look.low < 0 < 3.0 < look.high


def test_no_effect_of_interest_stops_a_precise_inconclusive_look() -> None:
    """A look precise enough to have found the smallest effect of interest, whose interval
    still straddles the margin, stops as `no effect of interest`; without futility it goes on."""
    rounds = PLANS[1]
    counts = rounds.looks[:5]
    look = sequential.judge(0.72, 1.0, counts, rounds, 0.0, 1.45)
    assert look.judgement == sequential.NO_INTEREST and look.stops
    assert look.low < 0 < 1.45 < look.high and look.detectable < 1.45
    plain = Rounds(rounds.first, rounds.add, rounds.most, futility=False)
    assert sequential.judge(0.72, 1.0, counts, plain, 0.0, 1.45).judgement == sequential.CONTINUE


def _conditions(*values: Sequence[float], margin: float = 0.0) -> list[outcomes.Condition]:
    return [
        outcomes.Condition(f"c{i}", "cat4", "cat1", ("t",), outcomes.estimate(v), margin)
        for i, v in enumerate(values)
    ]


def test_a_cell_decided_in_round_one_gets_no_more_replicates() -> None:
    """Planted per-replicate results: a claim whose conditions all hold at the first look, or
    one of whose conditions is contradicted there, stops after round 1 and wants no more
    replicates; an undecided one wants the next round; the last look stops as most reached."""
    plan = PLANS[0]
    holds = claim_rounds.judge_round(
        "c", _conditions([10.0, 10.0005, 9.9995], [5.0, 5.0002, 4.9998]), 3.0, plan, [3]
    )
    assert holds.status == claim_rounds.REPRODUCED and holds.decided
    assert (holds.rounds, holds.replicates, holds.wanted) == (1, 3, 3)
    assert holds.record()["stopped"] == claim_rounds.REPRODUCED
    contradicted = claim_rounds.judge_round(
        "c", _conditions([2.0, 9.0, -4.0], [-20.0, -20.0005, -19.9995]), 3.0, plan, [3]
    )
    assert contradicted.status == claim_rounds.CONTRADICTED and contradicted.wanted == 3
    going = claim_rounds.judge_round("c", _conditions([2.0, 9.0, -4.0]), 3.0, plan, [3])
    assert not going.decided and going.wanted == 6
    late = claim_rounds.judge_round("c", _conditions([2.0, 9.0, -4.0] * 4), 3.0, plan, plan.looks)
    assert late.stopped == claim_rounds.MOST and late.wanted == 12 and late.rounds == 4
    timed = claim_rounds.judge_round(
        "c", _conditions([2.0, 9.0, -4.0]), 3.0, plan, [3], claim_rounds.WALL
    )
    assert timed.stopped == claim_rounds.WALL and timed.wanted == 3


def test_a_claim_with_a_missing_condition_stops_rather_than_train_in_vain() -> None:
    plan = PLANS[0]
    missing = outcomes.Condition("m", "cat4", "wide", ("t",), outcomes.estimate([]), 0.0, "none")
    found = claim_rounds.judge_round("c", [*_conditions([2.0, 9.0, -4.0]), missing], 3.0, plan, [3])
    assert found.stopped == claim_rounds.MISSING and found.status == outcomes.INCONCLUSIVE


@pytest.mark.parametrize("kind", simulation.NOISES)
def test_the_sweep_profiles_plan_holds_its_error_rates(kind: str) -> None:
    """The plan the sweep profile spends its replicates by (parameters/sweep, chosen by
    benchmarks/sweep_plan.py for the cells it decides) keeps both error rates at most LEVEL / 2
    (plus the Monte-Carlo allowance): a false `holds` with nothing else to stop a run, and a
    false `contradicted` under an effect of exactly the smallest of interest."""
    from kit.experiments.timecat.sweep_settings import SweepSettings
    from kit.params import params

    loaded = params.load("04_when_concat_helps", "sweep")[0]
    assert isinstance(loaded, SweepSettings) and loaded.rounds is not None
    plan = loaded.rounds.design()
    rng = np.random.default_rng(15)
    null = simulation.simulate(plan, 0.0, 5.0, 0.01, DRAWS, rng, kind)
    assert null.rates[sequential.HOLDS] <= LEVEL / 2 + null.slack(LEVEL / 2)
    edge = simulation.simulate(plan, 3.0, 4.0, 3.0, DRAWS, rng, kind)
    assert edge.rates[sequential.CONTRADICTED] <= LEVEL / 2 + edge.slack(LEVEL / 2)
