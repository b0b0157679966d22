"""Replicates in rounds through the notebooks' loop (kit.stats.rounds.run_rounds) on planted
per-replicate results: a cell decided in round 1 gets no more replicates, an undecided one gets
the next round, a resumed run makes the same looks and decisions, the wall budget stops the
rounds; the `rounds` settings; and notebook 04's sweep in rounds with its training and probes
planted."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl
import pytest
from test_sweep import sweep_results

from kit.experiments.timecat import claims, in_rounds, sweep, sweep_outcome, sweep_settings
from kit.experiments.timecat.result_files import SWEEP
from kit.params import params
from kit.stats import outcomes, rounds
from kit.stats.sequential import Rounds
from kit.stats.settings import RoundsSettings

PLAN = Rounds(first=3, add=3, most=9)
#: per cell, the endpoint's value of each replicate: "decided" holds at the first look (its
#: replicates agree to a thousandth of a point), "open" never settles (it reaches most)
PLANTED = {
    "decided": [10.0, 10.0005, 9.9995] + [10.0] * 6,
    "open": [2.0, 9.0, -4.0] * 3,
}


def _judge(
    key: str, counts: tuple[int, ...], halt: str | None, flagged: str | None = None
) -> list[rounds.Round]:
    values = PLANTED[key][: counts[-1]]
    condition = outcomes.Condition(
        "c", "cat4", "cat1", ("t",), outcomes.estimate(values), flagged=flagged
    )
    return [rounds.judge_round("time-concat", [condition], 3.0, PLAN, counts, halt)]


def _loop(wall_s: float | None = None, clock=None) -> tuple[dict, list[dict[str, range]]]:
    asked: list[dict[str, range]] = []

    def step(pending: Mapping[str, range]) -> None:
        asked.append(dict(pending))

    extra = {} if clock is None else {"clock": clock}
    return rounds.run_rounds(list(PLANTED), PLAN, wall_s, step, _judge, **extra), asked


def test_a_cell_decided_in_round_one_gets_no_more_replicates() -> None:
    cells, asked = _loop()
    assert asked == [
        {"decided": range(0, 3), "open": range(0, 3)},
        {"open": range(3, 6)},
        {"open": range(6, 9)},
    ]
    decided = cells["decided"].claims["time-concat"]
    assert decided.record() == {
        "claim": "time-concat",
        "status": "reproduced",
        "stopped": "reproduced",
        "rounds": 1,
        "replicates": 3,
    }
    assert decided.how() == " after 1 round (3 replicates)"
    going = cells["open"].claims["time-concat"]
    assert cells["open"].counts == [3, 6, 9] and going.stopped == rounds.MOST
    assert going.how() == ": most replicates reached (9 replicates, 3 rounds)"


def test_a_resumed_run_makes_the_same_looks_and_decisions() -> None:
    first, asked = _loop()
    again, asked_again = _loop()
    assert asked_again == asked
    assert {k: c.records() for k, c in again.items()} == {k: c.records() for k, c in first.items()}


class _Clock:
    """Seconds that pass only while a round trains: 10 a replicate."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def step(self, pending: Mapping[str, range]) -> None:
        self.now += 10.0 * sum(len(span) for span in pending.values())


@pytest.mark.parametrize(("wall_s", "looks"), [(100.0, [3]), (130.0, [3, 6, 9])])
def test_no_round_starts_that_would_end_past_the_wall_budget(
    wall_s: float, looks: list[int]
) -> None:
    """The first round trains 6 replicates in 60 s; the next would add 3 to each of the two
    cells at 10 s each: 60 + 60 s is past a budget of 100 s, so none starts, and the undecided
    cell says what its plan would still take. Under 130 s the rounds go on (the later ones
    train the undecided cell alone) until its plan's last look."""
    clock = _Clock()
    cells = rounds.run_rounds(list(PLANTED), PLAN, wall_s, clock.step, _judge, clock)
    assert cells["open"].counts == looks
    assert cells["decided"].claims["time-concat"].stopped == rounds.REPRODUCED
    going = cells["open"].claims["time-concat"]
    decide = rounds.to_decide(cells, PLAN, "python -m kit run 03 --profile p")
    if looks == [3]:
        assert going.stopped == rounds.WALL
        assert cells["open"].left(PLAN) == (6, pytest.approx(60.0))
        # 60 s of rounds and a quarter more for fitting the finished replicates' probes again
        assert decide is not None and decide.endswith(
            "python -m kit run 03 --profile p --set rounds.wall_s=120"
        )
        assert "1 cell undecided" in decide and "6 more replicates (to 9 a cell)" in decide
    else:
        assert going.stopped == rounds.MOST and cells["open"].left(PLAN) is None
        assert decide is None
    assert cells["decided"].left(PLAN) is None


def test_a_wall_budget_of_zero_is_the_first_round_only_even_replayed_in_no_time() -> None:
    """A run again reads its first round back from finished replicates in next to no time; a
    budget of 0 must not take that as room for a second round."""
    asked: list[Mapping[str, range]] = []
    cells = rounds.run_rounds(list(PLANTED), PLAN, 0.0, asked.append, _judge, lambda: 5.0)
    assert asked == [{"decided": range(0, 3), "open": range(0, 3)}]
    # its stop says what stopped it: the plan's one round, not a wall budget it did not have
    assert cells["open"].claims["time-concat"].stopped == rounds.FIRST


@pytest.mark.parametrize(
    ("side", "stops"),
    [("variant", rounds.REPRODUCED), ("against", rounds.FLAGGED), ("both", rounds.FLAGGED)],
)
def test_a_flag_that_blocks_a_decision_spends_the_plan_on_it(side: str, stops: str) -> None:
    """A gain that holds at the first look with the treatment's cell flagged stands (its bias
    can only lower the gain); with the reference's cell flagged (or both) it cannot stand, and
    instead of stopping the cell as a missing condition the plan goes on to its last look, stops
    for the flag there, and the line to decide says what would clear it."""
    asked: list[Mapping[str, range]] = []

    def judge(key: str, counts: tuple[int, ...], halt: str | None) -> list[rounds.Round]:
        return _judge(key, counts, halt, flagged=side)

    cells = rounds.run_rounds(["decided"], PLAN, None, asked.append, judge)
    found = cells["decided"].claims["time-concat"]
    assert found.stopped == stops
    if stops == rounds.REPRODUCED:
        assert asked == [{"decided": range(0, 3)}] and "holds stands" in found.rows[0]["flag"]
        assert rounds.to_decide(cells, PLAN, "python -m kit run 03") is None
        return
    assert [span.stop for pending in asked for span in pending.values()] == [3, 6, 9]
    assert found.status == outcomes.INCONCLUSIVE and "not judged" in found.rows[0]["flag"]
    decide = rounds.to_decide(cells, PLAN, "python -m kit run 03")
    assert decide is not None and "more held-out probe rows" in decide
    assert "reached the plan's most replicates" in decide


def test_a_round_read_back_from_finished_runs_gives_no_rate() -> None:
    """A run again reads its rounds back in next to no time: that is no rate for the rounds
    still to come, and the command that goes on says the time was not measured."""
    clock = _Clock()
    cells = rounds.run_rounds(
        list(PLANTED), PLAN, 0.0, lambda pending: clock.step(pending) or False, _judge, clock
    )
    assert cells["open"].per_replicate is None and cells["open"].left(PLAN) == (6, None)
    decide = rounds.to_decide(cells, PLAN, "python -m kit run 04 --profile p")
    assert decide is not None and "did not measure" in decide
    assert decide.endswith("--set rounds.wall_s=SECONDS")


def test_a_fixed_design_is_one_round() -> None:
    calls: list[Mapping[str, range]] = []
    found = rounds.run_rounds(["open"], Rounds.fixed(9), None, calls.append, _judge)
    assert calls == [{"open": range(0, 9)}] and found["open"].counts == [9]
    assert found["open"].claims["time-concat"].stopped == rounds.MOST


def test_rounds_settings_are_refused_by_key_and_make_the_plan() -> None:
    with pytest.raises(ValueError, match="most"):
        RoundsSettings(first=6, most=3, wall_s=60.0)
    with pytest.raises(ValueError, match="spending"):
        RoundsSettings(wall_s=60.0, spending="haybittle")
    with pytest.raises(ValueError, match="wall_s"):
        RoundsSettings()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="wall_s"):
        RoundsSettings(wall_s=-1.0)
    given = {"first": 3, "add": 3, "most": 9, "wall_s": 900.0, "spending": "pocock"}
    loaded, _ = params.load("03_time_concat", "ci", overrides={"rounds": given})
    assert loaded.design == Rounds(3, 3, 9, spending="pocock")
    assert claims.design_words(loaded).startswith("replicates in rounds (3, then 3 per round")
    assert claims.design_words(loaded).endswith("pocock spending; wall budget 900 s)")
    first_only, _ = params.load("03_time_concat", "ci", overrides={"rounds": given | {"wall_s": 0}})
    assert "wall budget 0" not in claims.design_words(first_only)
    assert "no wall budget: this run makes the first round only" in claims.design_words(first_only)
    with pytest.raises(params.ParameterError, match="seed_sets: 2 sets for 9 replicates"):
        params.load(
            "03_time_concat", "ci", overrides={"rounds": given, "seed_sets": [[1, 2], [3, 4]]}
        )
    with pytest.raises(params.ParameterError, match="replicates: give a fixed design or rounds"):
        params.load("04_when_concat_helps", "ci", overrides={"rounds": given, "replicates": 2})
    sweep_params, _ = params.load("04_when_concat_helps", "ci", overrides={"rounds": given})
    cells = sweep_settings.cells(sweep_params)
    assert {(c.settings.replicates, c.settings.design.most) for c in cells} == {(3, 9)}


def test_the_sweep_in_rounds_stops_a_decided_cell_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notebook 04's cells in rounds with training and probes planted: the cell with a large
    gain is reproduced after its first round and probed no further; the one without goes on,
    and every cell's row and line say its rounds, replicates and why it stopped."""
    planted = sweep_results({240: 30.0, 480: 1.5}, worlds=1, replicates=9).filter(
        pl.col("budget").is_in([240, 480])
    )
    probed: list[tuple[int, int, range]] = []

    def probe_cells(_params: object, looks: list[sweep_settings.Cell]) -> pl.DataFrame:
        probed.extend(
            (c.world_seed, c.budget, range(c.start, c.settings.replicates)) for c in looks
        )
        return pl.concat(
            planted.filter(
                (pl.col("budget") == c.budget)
                & pl.col("replicate").is_between(c.start, c.settings.replicates, closed="left")
            )
            for c in looks
        )

    monkeypatch.setattr(sweep, "train_all", lambda _params, looks: (0, len(looks)))
    monkeypatch.setattr(sweep, "probe_cells", probe_cells)
    monkeypatch.setattr(sweep, "own_accuracy", lambda looks: pl.DataFrame())
    monkeypatch.setattr(sweep_outcome, "learned_budgets", lambda *_: pl.DataFrame())
    given = {"first": 3, "add": 3, "most": 9, "wall_s": 3600.0, "spending": "pocock"}
    given["futility"] = False  # the cell of 480 is neither decided nor stopped for its spread
    loaded, _ = params.load(
        "04_when_concat_helps",
        "ci",
        output_dir=str(tmp_path),
        overrides={"budgets": [240, 480], "rounds": given},
    )
    swept = sweep.run(loaded, sweep_settings.cells(loaded), tmp_path)
    assert [p for p in probed if p[1] == 240] == [(0, 240, range(0, 3))]
    assert [p for p in probed if p[1] == 480][:2] == [(0, 480, range(0, 3)), (0, 480, range(3, 6))]
    cells = {row["budget"]: row for row in swept.judged.cells.iter_rows(named=True)}
    assert (cells[240]["status"], cells[240]["rounds"], cells[240]["replicates"]) == (
        "reproduced",
        1,
        3,
    )
    assert "REPRODUCED after 1 round (3 replicates)" in cells[240]["line"]
    assert "repeated interval" in cells[240]["line"]
    assert (cells[480]["status"], cells[480]["rounds"], cells[480]["replicates"]) == (
        "reproduced",
        2,
        6,
    )
    verdicts = pl.read_parquet(tmp_path / SWEEP.verdicts)
    assert verdicts.filter(pl.col("budget") == 240)["replicates"].to_list() == [3, 3, 3]
    assert set(verdicts["stopped"]) == {cells[240]["stopped"], cells[480]["stopped"]}
    assert verdicts["repeated"].all()


@pytest.mark.parametrize(
    ("wall_s", "why"),
    [
        (0.0, "undecided after the first round (this run had no wall budget for more);"),
        (30.0, "undecided when the wall budget ran out;"),
    ],
)
def test_notebook_03s_line_to_decide_says_why_the_rounds_stopped(wall_s: float, why: str) -> None:
    """Notebook 03's line to decide an undecided cell says it stopped after the first round where
    the run's wall budget was 0 ("no wall budget: this run makes the first round only", as its
    design's words say), and that the budget ran out only where one was given."""
    given = {"first": 3, "add": 3, "most": 9, "wall_s": wall_s, "futility": False}
    loaded, _ = params.load("03_time_concat", "ci", overrides={"rounds": given})
    clock = _Clock()
    cells = rounds.run_rounds(list(PLANTED), PLAN, wall_s, clock.step, _judge, clock)
    assert cells["open"].counts == [3]  # the first round takes 60 s: no room under 30 s either
    measured = in_rounds.Measured(loaded, cell=cells["open"], design=PLAN)
    line = measured.to_decide("python -m kit run 03 --profile ci")
    assert line is not None and why in line and line.startswith("1 cell ")


def test_notebook_04s_line_to_decide_says_a_first_round_only_run_stopped_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notebook 04's sweep with a wall budget of 0 and a cell left undecided (training and probes
    planted): its line to decide says the cell stopped after the first round, not that a budget
    ran out."""
    planted = sweep_results({240: 1.5}, worlds=1, replicates=9).filter(pl.col("budget") == 240)
    monkeypatch.setattr(sweep, "train_all", lambda _params, looks: (0, len(looks)))
    monkeypatch.setattr(
        sweep,
        "probe_cells",
        lambda _params, looks: pl.concat(
            planted.filter(pl.col("replicate").is_between(c.start, c.settings.replicates, "left"))
            for c in looks
        ),
    )
    monkeypatch.setattr(sweep, "own_accuracy", lambda looks: pl.DataFrame())
    monkeypatch.setattr(sweep_outcome, "learned_budgets", lambda *_: pl.DataFrame())
    given = {"first": 3, "add": 3, "most": 9, "wall_s": 0.0, "futility": False}
    loaded, _ = params.load(
        "04_when_concat_helps",
        "ci",
        output_dir=str(tmp_path),
        overrides={"budgets": [240], "rounds": given},
    )
    swept = sweep.run(loaded, sweep_settings.cells(loaded), tmp_path)
    assert swept.to_decide is not None and swept.to_decide.startswith(
        "1 cell undecided after the first round (this run had no wall budget for more);"
    )
