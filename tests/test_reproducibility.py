"""The figures docs/ quotes are the recorded ones, and the pinned results are the CPU records'
(kit.numerics.cpu_records, tests/pins.py): the spread benchmark's reference is this CPU model's
record, every recorded model's own run passes the pins (as itself and as an unrecorded machine),
and the spread script's one-core configuration on whatever machine runs the suite passes them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pins
import pytest

from kit.cli import benchmark_figures, figures
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu_records

SPREAD = json.loads((benchmark_figures.DATA / "cpu_spread.json").read_text())


def test_the_docs_figures_are_their_recorded_sources() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit", "figures", "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_a_stale_block_is_named(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- figures: cpu-spread -->\nold figures\n<!-- /figures -->\nafter\n")
    monkeypatch.setattr(figures, "DOCS", tmp_path)
    assert figures.command(check=True) == 1
    assert figures.command(check=False) == 0
    text = page.read_text()
    assert "old figures" not in text and SPREAD["machine"] in text
    assert text.startswith("before\n") and text.endswith("<!-- /figures -->\nafter\n")
    assert figures.command(check=True) == 0
    page.write_text("<!-- figures: no-such-block -->\n<!-- /figures -->\n")
    assert figures.command(check=True) == 2


def test_the_sweeps_tables_are_written_from_its_record(tmp_path: Path) -> None:
    """docs/sweep.md's tables come from the recorded summary: the statement computed from its
    cells' outcomes by notebook 04's own function (not the line the record was made with), how
    many cells the rounds decided and why the others stopped, and each cell's difference and
    outcome by world and budget."""
    shutil.copy(
        figures.RESULTS / "sweep" / "04_when_concat_helps.provenance.json",
        tmp_path / "04_when_concat_helps.provenance.json",
    )
    cells = [
        {"world_seed": w, "budget": b, "status": s, "rounds": r, "stopped": why, "variant": "cat4"}
        for w, b, s, r, why in [
            (0, 60, "contradicted", 1, "contradicted"),
            (0, 240, "reproduced", 2, "reproduced"),
            (1, 60, "inconclusive", 3, "wall budget"),
        ]
    ]
    verdicts = [
        {
            "world_seed": c["world_seed"],
            "budget": c["budget"],
            "condition": "cat4 vs cat1",
            "against": "cat1",
            "mean": mean,
            "low": mean - 2,
            "high": mean + 2,
            "replicates": 3 * c["rounds"],
            "detectable": 3.0,
            "judgement": "holds",
        }
        for c, mean in zip(cells, (-10.44, 6.6, 1.0), strict=True)
    ]
    summary = {
        "claim": {"line": "the statement", "ran": "What ran: profile sweep"},
        "cells": cells,
        "verdicts": verdicts,
        "learned": [],
        "next": "1 cell(s) undecided ...",
    }
    (tmp_path / "sweep_summary.json").write_text(json.dumps(summary))
    text = figures.sweep(tmp_path)
    assert "the statement" not in text
    assert (
        "**The statement** (from the recorded cells' outcomes): Over the budget sweep, cat4 "
        "transfers better than cat1 beyond the controls (paper Section 5.1): inconclusive "
        "(world 0: crossover between 60 and 240 iterations (contradicted at 60; reproduced at "
        "240, the largest budget run); world 1: one budget (60 inconclusive): a crossover "
        "needs two)"
    ) in text
    assert (
        "2 of 3 cells decided (1 reproduced, 1 contradicted); undecided: 1 wall budget. "
        "To decide the rest: 1 cell(s) undecided ..." in text
    )
    assert "| world | 60 | 240 |" in text
    assert "| 0 | −10.4 contradicted (3) | +6.6 reproduced (6, 2 rounds) |" in text
    assert "| 1 | +1.0 inconclusive (9, 3 rounds) | not run |" in text


def test_the_reproducible_mode_gave_the_same_bits_and_every_mode_the_same_outcomes() -> None:
    runs = SPREAD["runs"]
    modes = {run["mode"] for run in runs.values()}
    assert modes == {"reproducible", "fast"}
    assert SPREAD["spread"]["identical_within_mode"]["reproducible"]
    assert SPREAD["spread"]["same_outcomes"]["reproducible"]
    reproducible = [run for run in runs.values() if run["mode"] == "reproducible"]
    assert len(reproducible) >= 5
    assert all(run["cpu_numerics"]["reproducible"] for run in reproducible)
    # the fast mode did move values: the comparison can fail
    assert SPREAD["spread"]["largest_move"]["fast"] > 0


def test_the_spread_benchmarks_reference_is_its_cpu_models_record() -> None:
    (record,) = [r for r in cpu_records.records() if r["ci"]["kit_commit"] == SPREAD["kit_commit"]]
    reference = SPREAD["runs"][next(iter(SPREAD["runs"]))]
    assert record["ci"]["values"] == SPREAD["spread"]["reference"]
    assert record["ci"]["outcomes"] == reference["outcomes"]


@pytest.mark.parametrize("recorded", [r["cpu_id"] for r in cpu_records.records()])
def test_each_recorded_models_own_run_passes_the_pins_as_itself_and_as_another_machine(
    recorded: str,
) -> None:
    """A recorded model's run, fed to the pins in place of this machine's: held to its own bits
    as that model, and within the measured move and the agreed outcomes as a model the records
    do not know (how README's test command passes on a CPU without a record)."""
    record = cpu_records.record_of(recorded)
    assert record is not None
    values, outcomes = record["ci"]["values"], record["ci"]["outcomes"]
    assert not pins.problems(values, outcomes, pins.expected(recorded))
    unknown = pins.expected("NoSuchVendor 0/0")
    assert not unknown.exact and unknown.bound >= cpu_records.largest_move("ci")[0]
    assert not pins.problems(values, outcomes, unknown)
    # the pins can fail: a value moved past the bound, or an agreed outcome changed
    moved = dict(values, **{next(iter(values)): next(iter(values.values())) + unknown.bound + 1})
    assert pins.problems(moved, outcomes, unknown)
    agreed = next(iter(unknown.outcomes))
    flipped = dict(
        outcomes, **{agreed: "reproduced" if outcomes[agreed] != "reproduced" else "contradicted"}
    )
    assert pins.problems(values, flipped, unknown)
    assert pins.problems(
        dict(values, **{next(iter(values)): 0.0}), outcomes, pins.expected(recorded)
    )


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is missing")
def test_the_spread_script_on_an_emulated_other_machine_gives_the_recorded_bits(
    tmp_path: Path,
) -> None:
    """benchmarks/cpu_spread.py's one-core configuration (one core, one training worker) on
    this machine, whatever it is: its CPU model's recorded values bit for bit and its outcomes
    where it has a record, else within the measured move and the agreed outcomes. Notebook 03
    alone: its training, features, fast and L-BFGS probes are every operation the ci profile
    runs (notebook 04 trains the same model on the same world for 20 iterations instead of 40),
    so what this leaves to the main job's pins (tests/test_notebook_results.py) is notebook
    04's values and outcomes on one core, not an operation."""
    out = tmp_path / "spread.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/cpu_spread.py", "--only", "one-core", "--notebooks", "03"]
        + ["--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = json.loads(out.read_text())["runs"]["one-core"]
    assert run["cpu_numerics"]["reproducible"], run["cpu_numerics"]["not_in_effect"]
    # every pinned value and claim of notebook 03 compared, and only notebook 03's
    pinned = pins.expected()
    assert set(run["values"]) == {k for k in pinned.values if k.startswith("03 ")}
    assert run["outcomes"] and all(k.startswith("03 ") for k in run["outcomes"])
    assert not pins.problems(run["values"], run["outcomes"], pins.expected())
