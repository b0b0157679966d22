"""Notebook 04's sweep: cells built from notebook 03's parameters, the statement over the budget
(kit.stats.crossover) on planted and null tables, flagged probe cells kept out of the claim, and
the paper beside the kit with its regime."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from types import SimpleNamespace

import altair as alt
import nbformat
import numpy as np
import pins
import polars as pl
import pytest
import torch
from IPython.display import Markdown
from torch.utils.data import TensorDataset

from kit import features
from kit.cli import terminal
from kit.experiments.timecat import (
    paper,
    planning,
    regime,
    sweep,
    sweep_cost,
    sweep_figures,
    sweep_outcome,
    sweep_settings,
)
from kit.experiments.timecat.result_files import SWEEP, TIME_CONCAT
from kit.params import params
from kit.readout.progress import STAGE_FILE_ENV
from kit.report import outputs, palette, tables
from kit.stats import crossover
from kit.train.run_files import RunFolder

KINDS = {
    "cat1": ("time-concat", 1),
    "cat4": ("time-concat", 4),
    "wide1": ("wide", 1),
    "random4": ("random-init", 4),
}
ROLES = {
    "mixture": "in-distribution",
    "shape": "in-mixture",
    "texture": "in-mixture",
    "position": "unseen",
}
BUDGETS = [60, 120, 240, 480, 960]


def sweep_results(
    cat4_gain: dict[int, float],
    worlds: int = 3,
    replicates: int = 4,
    gap: float = 0.0,
    seed: int = 0,
    optimism: float = 0.0,
    overrated: str = "cat4",
) -> pl.DataFrame:
    """Probe results of a sweep: every variant at 50% plus noise of std 1 point (seeded); cat4
    gains `cat4_gain[budget]` points on every transfer task, random4 sits 20 points lower;
    every probe's train accuracy is its eval accuracy plus `gap` points for cat4, and its
    chosen head's held-out accuracy its eval accuracy plus noise and, for `overrated`,
    `optimism` points."""
    rng = np.random.default_rng(seed)
    rows = []
    for world in range(worlds):
        for budget in BUDGETS:
            for r in range(replicates):
                for task, role in ROLES.items():
                    for name, (kind, n) in KINDS.items():
                        level = 50 + rng.normal()
                        if name == "cat4" and role != "in-distribution":
                            level += cat4_gain.get(budget, 0.0)
                        level -= 20 * (name == "random4")
                        rows.append(
                            {
                                "world_seed": world,
                                "budget": budget,
                                "variant": name,
                                "kind": kind,
                                "n": n,
                                "width": 1.0,
                                "replicate": r,
                                "iterations_per_model": budget // n,
                                "task": task,
                                "role": role,
                                "rule": "heldout",
                                "top1": level / 100,
                                "top5": None,
                                "train_top1": (level + gap * (name == "cat4")) / 100,
                                "heldout_top1": (
                                    level + rng.normal() + optimism * (name == overrated)
                                )
                                / 100,
                                "eval_rows": 512,
                            }
                        )
    return pl.DataFrame(rows)


def stated(results: pl.DataFrame, max_optimism: float | None = 2.9) -> crossover.BudgetClaim:
    return sweep_outcome.overall(
        sweep_outcome.judge_cells(results, "heldout", "cat1", max_optimism, 2.9), "cat1"
    )


def test_a_planted_crossover_is_found_between_two_budgets_on_every_world() -> None:
    found = stated(sweep_results({240: 8, 480: 8, 960: 8}))
    assert found.status == "depends on the budget"
    assert found.crossovers == {0: (120, 240), 1: (120, 240), 2: (120, 240)}
    assert "crossover between 120 and 240 iterations" in found.line and found.line.startswith(
        "Over the budget sweep, cat4 transfers better than cat1"
    )
    cells = {(row["world_seed"], row["budget"]): row["status"] for row in found.evidence}
    assert cells[(0, 120)] == "contradicted" and cells[(0, 240)] == "reproduced"


def test_a_planted_gain_at_every_budget_is_reproduced_and_a_null_sweep_contradicted() -> None:
    always = stated(sweep_results(dict.fromkeys(BUDGETS, 8.0)))
    assert always.status == "reproduced" and set(always.patterns.values()) == {"always"}
    null = stated(sweep_results({}))
    assert null.status == "contradicted" and set(null.patterns.values()) == {"never"}
    assert all(row["status"] == "contradicted" for row in null.evidence)


def test_a_flagged_cell_keeps_only_the_judgement_its_bias_cannot_have_made() -> None:
    """The one rule of kit.experiments.timecat.cells in every cell of a sweep: a gap alone flags
    nothing; a flag on cat4 (the treatment: its score can only be lowered) leaves a planted gain
    reproduced and says why; a flag on cat1 (the reference) leaves the same gain unjudged, and a
    planted null still contradicted."""
    gapped = sweep_outcome.judge_cells(
        sweep_results(dict.fromkeys(BUDGETS, 8.0), gap=30.0), "heldout", "cat1", 2.9, 2.9
    )
    assert not gapped.gaps["flagged"].any() and (gapped.cells["status"] == "reproduced").all()
    planted = sweep_results(dict.fromkeys(BUDGETS, 8.0), optimism=12.0)
    judged = sweep_outcome.judge_cells(planted, "heldout", "cat1", 2.9, 2.9)
    assert set(judged.gaps.filter(pl.col("flagged"))["variant"]) == {"cat4"}
    assert (judged.cells["flagged_cells"] == 4).all()  # cat4 on each of the four tasks
    assert (judged.cells["status"] == "reproduced").all()
    assert (
        judged.cells["line"]
        .str.contains("a noisy held-out choice can only lower cat4's score, so holds stands")
        .all()
    )
    # the endpoint itself does not move with the flags
    unflagged = sweep_outcome.judge_cells(planted, "heldout", "cat1", None, 2.9)
    assert judged.verdicts["mean"].to_list() == unflagged.verdicts["mean"].to_list()
    reference = sweep_outcome.judge_cells(
        sweep_results(dict.fromkeys(BUDGETS, 8.0), optimism=12.0, overrated="cat1"),
        "heldout",
        "cat1",
        2.9,
        2.9,
    )
    assert (reference.cells["status"] == "inconclusive").all()
    assert (
        reference.cells["line"]
        .str.contains("not judged: with cat1's cell flagged only contradicted can stand")
        .all()
    )
    null = sweep_outcome.judge_cells(
        sweep_results({}, optimism=12.0, overrated="cat1"), "heldout", "cat1", 2.9, 2.9
    )
    assert (null.cells["status"] == "contradicted").all()


Y, N, U = "reproduced", "contradicted", "inconclusive"


@pytest.mark.parametrize(
    "statuses, pattern, at",
    [
        ([N, N, Y, Y], "crossover", (2, 3)),
        ([N, U, Y, Y], "crossover", (1, 3)),
        # an undecided cell above the first reproduced one leaves the crossover where it was
        ([N, Y, U, Y], "crossover", (1, 2)),
        ([N, Y, Y, U], "crossover", (1, 2)),
        # no decided no-gain cell below: no crossover, whatever the reproduced cells
        ([U, U, Y, Y], "reproduced where decided", None),
        ([U, Y], "reproduced where decided", None),
        ([N, N, U, U], "contradicted where decided", None),
        ([Y] * 4, "always", None),
        ([N] * 4, "never", None),
        ([N, Y, N, Y], "mixed", None),
        ([U, U, U, U], "inconclusive", None),
        ([Y], "one budget", None),
    ],
)
def test_world_patterns(statuses: list[str], pattern: str, at) -> None:
    assert crossover.world_pattern([1, 2, 3, 4][: len(statuses)], statuses) == (pattern, at)


def test_the_overall_statement_from_mixed_worlds() -> None:
    def table(statuses: dict[int, list[str]]) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {"world_seed": w, "budget": b, "status": s}
                for w, row in statuses.items()
                for b, s in zip(BUDGETS, row, strict=False)
            ]
        )

    assert crossover.budget_claim(table({0: [Y] * 3, 1: [N] * 3})).status == "depends on the world"
    assert crossover.budget_claim(table({0: [N, Y, N]})).status == "inconclusive"
    assert (
        crossover.budget_claim(table({0: [N, U, Y], 1: [N, N, N]})).status
        == "depends on the budget"
    )
    assert crossover.budget_claim(table({0: [N, U, Y], 1: [N, U, U]})).status == "inconclusive"
    # one budget states neither a crossover nor "never", whatever its cell found
    for status in (Y, N, U):
        found = crossover.budget_claim(table({0: [status], 1: [status]}))
        assert found.status == "untested (one budget)" and "never" not in found.line
        assert found.crossovers == {0: None, 1: None}
    found = crossover.budget_claim(table({0: [N, U, Y], 1: [N, N, N]}))
    assert "world 1: contradicted at every budget run, from 60 to 240: no crossover" in found.line
    with pytest.raises(ValueError, match="once"):
        crossover.budget_claim(pl.concat([table({0: [Y]})] * 2))


def test_the_sweeps_silent_steps_print_their_own_stage_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m kit run` prints what notebook 04 judges and which cells it reads back
    instead of probing them again (the steps that were silent for up to 21 s)."""
    records = tmp_path / "stages.jsonl"
    monkeypatch.setenv(STAGE_FILE_ENV, str(records))
    sweep_outcome.judge_cells(
        sweep_results({}, worlds=1, replicates=2), "heldout", "cat1", 15.0, 2.9
    )
    loaded, _ = params.load(
        "04_when_concat_helps", "ci", overrides={"world_seeds": [0, 1], "output_dir": str(tmp_path)}
    )
    cells = sweep_settings.cells(loaded)
    for cell in cells:  # probed before: each cell's results file is there
        stored = sweep._cell_file(loaded, cell)
        stored.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(
            {
                "variant": ["cat1"],
                "replicate": [0],
                "world_seed": [cell.world_seed],
                "budget": [cell.budget],
            }
        ).write_parquet(stored)
    assert sweep.probe_cells(loaded, cells).height == len(cells) == 4
    lines = terminal.StageProgress(records, "04", every_s=3600.0).poll()
    assert lines[0] == (
        "04 verdicts: judging 5 cells: the primary endpoint against the "
        "baseline and the controls, the probes' selection optimism per cell"
    )
    assert re.fullmatch(r"04 verdicts: judged 5 cells \(.* s, .*cell/s\)", lines[1]), lines
    assert lines[2] == (
        f"04 cells: 4 cells: 4 probed before (read back from {tmp_path}/sweep/results), probing 0"
    )
    assert re.fullmatch(
        r"04 cells: read back 4, probed 0 cells \(0 of them with notebook "
        r"03's probe results for the variants it shares; 0 representations probed by an "
        r"earlier cell\) \(.*\)",
        lines[3],
    )
    assert len(lines) == 4


def test_a_cells_results_file_does_not_depend_on_the_plan_of_rounds(tmp_path: Path) -> None:
    """Going on with another wall budget or spending (the command a run prints to decide its
    undecided cells) reads back the cells probed before: the plan is not part of their key,
    what the cell probes is."""
    base = {"output_dir": str(tmp_path)}
    files = {}
    for rounds in (
        {"first": 3, "add": 3, "most": 9, "wall_s": 0, "spending": "obrien-fleming"},
        {"first": 3, "add": 3, "most": 9, "wall_s": 5400, "spending": "pocock"},
    ):
        loaded, _ = params.load("04_when_concat_helps", "ci", overrides=base | {"rounds": rounds})
        files[rounds["spending"]] = [
            sweep._cell_file(loaded, c) for c in sweep_settings.cells(loaded)
        ]
    assert files["obrien-fleming"] == files["pocock"]
    loaded, _ = params.load("04_when_concat_helps", "ci", overrides=base | {"world_seeds": [7]})
    assert not set(files["pocock"]) & {
        sweep._cell_file(loaded, c) for c in sweep_settings.cells(loaded)
    }


def test_cells_are_notebook_03s_settings_and_its_own_cell_shares_its_runs() -> None:
    loaded, _ = params.load("04_when_concat_helps", "ci", overrides={"world_seeds": [0, 1]})
    cells = sweep_settings.cells(loaded)
    notebook = sweep_settings.swept_notebook(loaded)
    assert [(c.world_seed, c.budget) for c in cells] == [(0, 20), (0, 40), (1, 20), (1, 40)]
    assert [c.shared for c in cells] == [False, True, False, False]
    own = cells[1].settings
    assert own.run_root == notebook.run_root and own.train == notebook.train
    assert {v.name for v in own.variants} == {"cat1", "cat2", "wide1", "random2"}  # no direct
    other = cells[2].settings
    assert other.train.data.synthetic.seed == 1 and other.run_root == "sweep/world1/budget20"
    assert other.iterations_for(other.variant("cat2")) == 10
    assert other.variant("wide1").iterations is None  # ci: notebook 03's wide model
    full = params.load("04_when_concat_helps", "sweep")[0]
    assert full.wide_compute == "equal"
    at_480 = sweep_settings.cells(full)[3].settings
    assert (
        at_480.total_iterations == 480 and at_480.iterations_for(at_480.variant("wide1-eq")) == 120
    )  # twice the width: 480 iterations of cat1's compute
    # one feature cache for every cell: the untrained networks' features are extracted once
    assert {cell.settings.feature_cache for cell in sweep_settings.cells(full)} == {
        "sweep/features"
    }
    longer = params.load("04_when_concat_helps", "ci", overrides={"budgets": [80]})[0]
    pool = sweep_settings.cells(longer)[0].settings.train.data.synthetic.num_train
    assert pool == 80 * notebook.train.batch_size  # no image drawn twice at any budget


@pytest.mark.parametrize(
    "override, message",
    [
        ({"budgets": [40, 20]}, "budgets: give distinct positive budgets in ascending order"),
        ({"variants": ["cat1", "cat9"]}, "variants: cat9 not among notebook 03's variants"),
        (
            {"budgets": [41]},
            (
                "budgets: the cell world 0, budget 41 is not a valid notebook 03 "
                "experiment: total_iterations: 41 does not split"
            ),
        ),
    ],
)
def test_bad_sweep_parameters_are_refused_by_key(override: dict, message: str) -> None:
    with pytest.raises(params.ParameterError, match=message):
        params.load("04_when_concat_helps", "ci", overrides=override)


@pytest.mark.parametrize("profile", ["gpu-1x", "paper-8xh100", "paper-checkpoints"])
def test_profiles_on_real_data_sweep_nothing(profile: str) -> None:
    values, _ = params.resolve_layers("04_when_concat_helps", profile)
    assert not values.get("budgets")


def test_the_paper_and_the_kit_side_by_side_with_their_regime() -> None:
    results = sweep_results({240: 8}, worlds=2, replicates=2)
    table = regime.paper_beside_kit(results, "heldout", {0: 240, 1: 480}, "kit, profile test")
    paper = table.filter(pl.col("source").str.starts_with("paper"))
    assert sorted(paper["variant"]) == ["cat1", "cat2", "cat4", "cat5"]
    cat5 = paper.filter(pl.col("variant") == "cat5").row(0, named=True)
    assert cat5["regime"] == pytest.approx(80_000 / 450_000)
    assert cat5["in-distribution top-1 %"] == pytest.approx(77.8)
    kit = table.filter(pl.col("source") == "kit, profile test")
    row = kit.filter(
        (pl.col("world_seed") == 1) & (pl.col("budget") == 960) & (pl.col("variant") == "cat4")
    ).row(0, named=True)
    assert row["regime"] == pytest.approx(240 / 480)
    assert row["transfer tasks"] == "position, shape, texture"
    one_budget = regime.paper_beside_kit(
        results.drop("world_seed", "budget").filter(
            pl.col("iterations_per_model").is_in([240, 60])
        ),
        "heldout",
        None,
        "kit",
    )
    mine = one_budget.filter(pl.col("source") == "kit")
    assert mine.height and mine["regime"].null_count() == mine.height


def test_notebook_04_ci_results_are_the_pinned_ones(notebook_outputs) -> None:
    shared = notebook_outputs("03_time_concat", TIME_CONCAT.results)
    folder = notebook_outputs("04_when_concat_helps", SWEEP.summary)
    results = pl.read_parquet(folder / SWEEP.results).filter(pl.col("rule") == "heldout")
    measured = {
        f"04 {row['budget']} {row['variant']} {row['task']}": 100 * row["top1"]
        for row in results.group_by("budget", "variant", "task")
        .agg(pl.col("top1").mean())
        .iter_rows(named=True)
    }
    expect = pins.expected()
    assert measured.keys() == {k for k in expect.values if k.startswith("04 ")}
    summary = outputs.read_json(folder / SWEEP.summary)
    statuses = {f"04 budget {cell['budget']}": cell["status"] for cell in summary["cells"]}
    statuses["04 claim"] = summary["claim"]["status"]
    assert not pins.problems(measured, statuses, expect)
    assert summary["claim"]["line"].startswith(
        "Over the budget sweep, cat2 transfers better than cat1 beyond the controls (paper "
        f"Section 5.1): {summary['claim']['status']}"
    )
    assert summary["claim"]["ran"].startswith("What ran: profile ci; the kit's synthetic world")
    # notebook 03's own cell has one set of numbers: the same verdict rows in both notebooks
    mine = pl.read_parquet(folder / SWEEP.verdicts).filter(pl.col("budget") == 40)
    theirs = pl.read_parquet(shared / TIME_CONCAT.verdicts).filter(pl.col("claim") == "time-concat")
    assert mine["condition"].to_list() == theirs["condition"].to_list()
    for column in ("mean", "low", "high", "detectable"):
        assert mine[column].to_list() == pytest.approx(theirs[column].to_list(), abs=1e-4)
    assert mine["judgement"].to_list() == theirs["judgement"].to_list()
    # notebook 03's own cell: its runs and its probe results (the same probes of the same
    # features, whether read back from notebook 03 or probed again)
    own = results.filter(pl.col("budget") == 40)
    theirs = pl.read_parquet(shared / TIME_CONCAT.results).filter(pl.col("rule") == "heldout")
    joined = own.join(theirs, on=["variant", "replicate", "task"], suffix="_03")
    assert set(joined["variant"]) == {"cat1", "cat2", "wide1", "random2"}
    assert joined.height == own.height
    assert (joined["top1"] - joined["top1_03"]).abs().max() <= 1e-6
    assert summary["flagged_cells"] == 0  # the ci profile's held-out choices hold
    learned = pl.DataFrame(summary["learned"])
    assert set(learned["variant"]) == {"cat1", "cat2", "wide1"}
    assert learned.filter(pl.col("variant") == "cat1")["learned_at"].to_list() == [40]


@pytest.mark.parametrize("replicates", [1, 3])
def test_the_gain_chart_draws_tested_and_untested_cells(replicates: int) -> None:
    results = sweep_results({240: 8}, worlds=1, replicates=replicates)
    judged = sweep_outcome.judge_cells(results, "heldout", "cat1", 15.0, 2.9)
    learned = pl.DataFrame(
        {"world_seed": [0, 0], "variant": ["cat1", "cat4"], "n": [1, 4], "learned_at": [120, None]}
    )
    spec = sweep_figures.gain_chart(judged.verdicts, learned, 2.9).to_dict()
    assert spec["facet"]["row"]["field"] == "world_seed"
    assert set(judged.verdicts["against"]) == {"cat1", "wide1", "random4"}
    assert judged.verdicts.height == 3 * len(BUDGETS)
    # the default job's one budget, notebook 03's own cell: a sentence for the chart and for
    # the table beside the paper, which would repeat notebook 03's
    one = sweep_outcome.judge_cells(
        results.filter(pl.col("budget") == 240), "heldout", "cat1", 15.0, 2.9
    )
    swept = sweep_outcome.Swept(
        None,  # type: ignore[arg-type]
        [SimpleNamespace(budget=240, shared=True)],  # type: ignore[list-item]
        0,
        0,
        results,
        learned,
        one,
        pl.DataFrame(),
    )
    assert swept.one_budget() == 240
    assert sweep_figures.gains(swept).startswith("This run swept one total budget (240 ")
    assert "notebook 03's table" in swept.paper_table()


def test_the_gain_chart_colours_catn_as_notebook_03_and_names_each_comparison() -> None:
    """catN's gains take catN's colour (as in notebook 03's charts), the legend lists only the
    variants drawn, and the gain over the baseline and over each control differ in shape."""
    results = sweep_results({240: 8}, worlds=1, replicates=2)
    judged = sweep_outcome.judge_cells(results, "heldout", "cat1", 15.0, 2.9)
    learned = pl.DataFrame(
        {"world_seed": [0, 0], "variant": ["cat1", "wide1"], "n": [1, 1], "learned_at": [None, 120]}
    )
    spec = sweep_figures.gain_chart(judged.verdicts, learned, 2.9).to_dict()
    layers = spec["spec"]["layer"]
    colour = layers[0]["encoding"]["color"]
    assert colour["field"] == "variant"
    assert dict(zip(colour["scale"]["domain"], colour["scale"]["range"], strict=True)) == {
        "cat4": palette.color("cat4"),
        "wide1": palette.color("wide1"),  # its rule is drawn; cat1 learns out of range: no rule
    }
    shape = next(layer["encoding"]["shape"] for layer in layers if "shape" in layer["encoding"])
    assert shape["scale"]["domain"] == [
        "cat1 (the baseline)",
        "wide1 (a control)",
        "random4 (a control)",
    ]
    assert len(set(shape["scale"]["range"])) == 3


def test_cells_of_one_world_share_their_untrained_networks_features(tmp_path: Path) -> None:
    """Every copy of one untrained network is the same file, byte for byte, whatever cell wrote
    it, so the sweep's one feature cache (keyed by contents) extracts it once per world."""
    loaded = params.load(
        "04_when_concat_helps",
        "ci",
        output_dir=str(tmp_path),
        overrides={"overrides": {"feature_cache": "sweep/features"}},
    )[0]
    small, large = (cell.settings for cell in sweep_settings.cells(loaded))
    assert (
        planning.features_dir(small)
        == planning.features_dir(large)
        == tmp_path / "sweep" / "features"
    )
    untrained = [planning.plan(cell).initial for cell in (small, large)]
    assert [len(found) for found in untrained] == [4, 4]  # random2, 2 replicates, each cell
    assert planning.initialise(untrained[0] + untrained[1]) == 8
    assert {c.output_dir for c in untrained[0]}.isdisjoint(c.output_dir for c in untrained[1])
    for one, other in zip(*untrained, strict=True):
        mine, theirs = (RunFolder.of(c).initial for c in (one, other))
        assert mine.read_bytes() == theirs.read_bytes()
    dataset = TensorDataset(torch.rand(6, 3, 16, 16), torch.arange(6) % 2)
    first, second = ([RunFolder.of(c).initial] for c in (untrained[0][0], untrained[1][0]))
    cache = planning.features_dir(small)
    found = features.extract_many(
        [first, second], dataset, "six images", "eval", "none", cache, progress=False
    )
    assert len({entry.path for entry in found}) == 1 and len(list(cache.iterdir())) == 1


def test_the_paper_rows_come_in_the_papers_order_and_the_kits_with_their_spread() -> None:
    results = sweep_results({240: 8}, worlds=1, replicates=3)
    for _ in range(20):  # the order once depended on a hash: shuffled from one call to the next
        table = regime.paper_beside_kit(results, "heldout", None, "kit")
        paper = table.filter(pl.col("source").str.starts_with("paper"))
        assert paper["variant"].to_list() == ["cat1", "cat2", "cat4", "cat5"]
    kit = table.filter((pl.col("source") == "kit") & (pl.col("budget") == 240))
    row = kit.filter(pl.col("variant") == "cat4").row(0, named=True)
    chosen = results.filter(
        (pl.col("budget") == 240)
        & (pl.col("variant") == "cat4")
        & (pl.col("role") != "in-distribution")
    )
    per_replicate = chosen.group_by("replicate").agg((100 * pl.col("top1").mean()).alias("top1"))[
        "top1"
    ]
    assert row["replicates"] == 3
    assert row["transfer top-1 %"] == pytest.approx(per_replicate.mean())
    assert row["transfer top-1 % std"] == pytest.approx(per_replicate.std())


def test_one_table_sets_the_paper_and_the_kit_row_for_row_subtracting_only_like_with_like() -> None:
    results = sweep_results({240: 8}, worlds=1, replicates=3).filter(pl.col("budget") == 240)
    for _ in range(5):
        table = paper.paper_vs_kit(results.drop("world_seed", "budget"), "heldout")
        assert table["variant"].unique(maintain_order=True).to_list() == [
            "cat1", "cat2", "cat4", "cat5"
        ]  # fmt: skip
    cat4 = {
        row["measure"]: row
        for row in table.filter(pl.col("variant") == "cat4").iter_rows(named=True)
    }
    assert list(cat4) == [paper.IN_DISTRIBUTION, paper.TRANSFER, paper.GAIN]
    transfer = cat4[paper.TRANSFER]
    assert transfer[paper.PAPER_NUMBER] == pytest.approx((42.9 + 76.8 + 92.7) / 3)
    assert (
        "CIFAR-100 read by eye from the authors' figure" in transfer[paper.PAPER_SOURCE]
    )  # cat4's CIFAR-100
    assert transfer["kit's task (stands for it)"] == "position, shape, texture"

    def per_replicate(variant: str) -> pl.Series:
        rows = results.filter(
            (pl.col("variant") == variant) & (pl.col("role") != "in-distribution")
        )
        return (
            rows.group_by("replicate")
            .agg((100 * pl.col("top1").mean()).alias("top1"))
            .sort("replicate")["top1"]
        )

    assert transfer["kit mean"] == pytest.approx(per_replicate("cat4").mean())
    assert transfer["kit std"] == pytest.approx(per_replicate("cat4").std())
    # an accuracy on a synthetic task minus one on the paper's datasets is no difference
    assert transfer["kit − paper"] is None
    assert transfer[paper.COMPARABLE] == paper.NOT_COMPARABLE
    gain = cat4[paper.GAIN]
    paired = per_replicate("cat4") - per_replicate("cat1")
    assert gain[paper.PAPER_NUMBER] == pytest.approx(70.8 - 65.0, abs=0.05)
    assert (gain["kit mean"], gain["kit std"]) == pytest.approx((paired.mean(), paired.std()))
    # nor is a gain over cat1 on synthetic tasks one on iNat18 and CIFAR: side by side only
    assert gain["kit − paper"] is None
    assert gain[paper.COMPARABLE] == paper.NOT_COMPARABLE
    assert table.filter(pl.col(paper.COMPARABLE) != paper.NOT_COMPARABLE).is_empty()
    assert table["kit − paper"].is_null().all()
    # a variant the kit did not run keeps the paper's row with empty kit cells
    cat5 = table.filter(pl.col("variant") == "cat5")
    assert cat5[paper.PAPER_NUMBER].is_not_null().all() and cat5["kit mean"].is_null().all()
    # a task mapped to a paper dataset gets the dataset's own row; a sweep repeats per cell
    mapped = paper.paper_vs_kit(
        results.drop("world_seed", "budget"), "heldout", {"shape": "iNat18"}
    )
    inat = mapped.filter((pl.col("variant") == "cat1") & (pl.col("paper's dataset") == "iNat18"))
    assert inat[paper.PAPER_NUMBER].to_list() == [33.7] and inat[
        "kit's task (stands for it)"
    ].to_list() == ["shape"]
    assert inat[paper.COMPARABLE].to_list() == [paper.NOT_COMPARABLE]
    # where the kit's tasks are the paper's datasets (the paper profiles), an accuracy is
    # subtracted too, a mean over tasks only where they are the paper's three
    named = {"position": "iNat18", "shape": "CIFAR-100", "texture": "CIFAR-10"}
    real = results.drop("world_seed", "budget").with_columns(pl.col("task").replace(named))
    same = paper.paper_vs_kit(real, "heldout", {name: name for name in named.values()})
    rows = {
        (row["variant"], row["measure"]): row
        for row in same.iter_rows(named=True)
        if row["kit mean"] is not None
    }
    for key in [("cat4", paper.TRANSFER), ("cat4", paper.GAIN), ("cat1", "iNat18, top-1 %")]:
        assert rows[key][paper.COMPARABLE] == paper.SAME_DATASET, key
        difference = rows[key]["kit mean"] - rows[key][paper.PAPER_NUMBER]
        assert rows[key]["kit − paper"] == pytest.approx(difference), key
    assert rows[("cat4", paper.IN_DISTRIBUTION)][paper.COMPARABLE] == paper.NOT_COMPARABLE
    swept = paper.paper_vs_kit(
        sweep_results({240: 8}, worlds=2, replicates=2), "heldout", by=["world_seed", "budget"]
    )
    assert swept.select("world_seed", "budget").unique().height == 2 * len(BUDGETS)


def test_the_cells_read_as_a_table_in_words(tmp_path: Path) -> None:
    loaded, _ = params.load("04_when_concat_helps", "ci", overrides={"output_dir": str(tmp_path)})
    table = sweep_outcome.cells_table(sweep_settings.cells(loaded))
    assert table.columns[:2] == ["world seed", "total budget (iterations)"]
    first = table.row(0, named=True)
    assert (
        first["iterations per model"].startswith("cat1 ")
        and "{" not in first["iterations per model"]
    )
    assert set(table["notebook 03's runs"]) <= {"reused", "its own"}
    assert sweep_outcome.cells_table([]) == "This profile sweeps no budget: no cell to run."


# ---------------------------------------------------------------------------------------------
# The sweep from snapshots (catn_models: snapshots)
# ---------------------------------------------------------------------------------------------


def test_the_sweep_trains_each_seeded_folder_once_to_the_top_step_with_every_snapshot(
    tmp_path: Path,
) -> None:
    loaded = params.load(
        "04_when_concat_helps", "sweep", output_dir=str(tmp_path), overrides={"world_seeds": [1]}
    )[0]
    cells = sweep_settings.cells(loaded)
    assert {c.settings.run_root for c in cells} == {"sweep/world1"}
    pools = {c.settings.train.data.synthetic.num_train for c in cells}
    assert pools == {1920 * 32}  # one pool, sized for the top budget
    merged = sweep.plan_cells(cells)
    folders = [t.output_dir for t in merged.trainings]
    assert isinstance(loaded, sweep_settings.SweepSettings) and loaded.rounds is not None
    first = loaded.rounds.first  # the first round's replicates
    assert len(folders) == len(set(folders)) == first * 5  # per replicate: 4 seeds and wide1-eq
    assert {t.step_hint for t in merged.trainings} == {1920}
    runs = {
        str(Path(t.output_dir).relative_to(tmp_path / "sweep" / "world1")): t
        for t in merged.trainings
    }
    every = [15, 30, 60, 120, 240, 480, 960, 1920]
    assert (runs["rep0/seeded/seed0"].iterations, runs["rep0/seeded/seed0"].snapshot_steps) == (
        1920,
        every,
    )
    for seed in (1, 2, 3):
        run = runs[f"rep0/seeded/seed{seed}"]
        assert (run.iterations, run.snapshot_steps) == (480, every[:6])
    wide = runs["rep0/wide1-eq/seed0"]  # budget / 4 at each budget: its own snapshot run
    assert (wide.iterations, wide.width, wide.snapshot_steps) == (480, 0.5, every[:5])

    def read(budget: int, variant: str) -> list[str]:
        rep = next(
            r
            for r in merged.representations[1, budget]
            if r.variant == variant and r.replicate == 0
        )
        return [str(p.relative_to(tmp_path / "sweep" / "world1" / "rep0")) for p in rep.checkpoints]

    assert read(960, "cat1") == ["seeded/seed0/snapshot-960.pt"]
    assert read(960, "cat4") == [f"seeded/seed{s}/snapshot-240.pt" for s in range(4)]
    assert read(960, "wide1-eq") == ["wide1-eq/seed0/snapshot-240.pt"]
    assert read(1920, "wide1-eq") == ["wide1-eq/seed0/checkpoint.pt"]  # its last step
    assert read(60, "random4") == read(1920, "random4")  # untrained: no training at all
    assert len(merged.initial) == first * 4
    # per replicate 1,920 + 3 x 480 + 480 at four times cat1's compute; 36 files (seed 0's 8
    # snapshots, 6 of each other seed, 6 of wide1-eq, 4 untrained) once per task; 12 probes a cell
    # and replicate (4 representations on 3 tasks), the untrained networks' 3 once for the six
    # cells of the world, each probe reading its networks' features (cat1 one, cat4 four, wide1-eq
    # two of cat1's, random4 four)
    assert sweep_cost.cost(cells) == sweep_cost.SweepCost(
        first * 5280,
        first * 36 * 3,
        first * (6 * 12 - 5 * 3),
        first * (6 * 3 * (1 + 4 + 2 + 4) - 5 * 3 * 4),
    )


def test_runs_sharing_a_folder_with_their_own_horizons_are_refused_naming_the_key(
    tmp_path: Path,
) -> None:
    loaded = params.load(
        "04_when_concat_helps",
        "ci",
        output_dir=str(tmp_path),
        overrides={"overrides": {"catn_models": "snapshots"}},
    )[0]
    runs = [t for c in sweep_settings.cells(loaded) for t in planning.plan(c.settings).trainings]
    unhinted = [t.model_copy(update={"step_hint": None}) for t in runs]
    with pytest.raises(params.ParameterError, match=r"seed0: runs planned .* differ in iterations"):
        planning.merge_runs(unhinted)


def test_a_snapshot_sweep_trains_once_and_reads_each_cell_s_own_step(tmp_path: Path) -> None:
    """Notebook 04's ci experiment from snapshots, end to end: each seeded folder trains once,
    every model a cell reads has its own accuracy logged at its step, and each snapshot's
    features are extracted once for every cell that reads it."""
    loaded = params.load(
        "04_when_concat_helps",
        "ci",
        output_dir=str(tmp_path),
        overrides={"overrides": {"catn_models": "snapshots", "lbfgs_check": False}},
    )[0]
    cells = sweep_settings.cells(loaded)
    assert {c.settings.run_root for c in cells} == {"sweep/world0"} and not any(
        c.shared for c in cells
    )
    assert sweep.train_all(loaded, cells) == (0, 2 * 3)  # per replicate: 2 seeds and wide1
    assert sweep.train_all(loaded, cells) == (6, 0)
    seed0 = tmp_path / "sweep" / "world0" / "rep0" / "seeded" / "seed0"
    assert sorted(p.name for p in seed0.glob("snapshot-*.pt")) == [
        "snapshot-10.pt",
        "snapshot-20.pt",
        "snapshot-40.pt",
    ]
    own = sweep.own_accuracy(cells)
    # cat1, cat2's two models and wide1, two replicates, two cells: each read at its own step
    assert own.height == 2 * 2 * 4 and own["own_accuracy"].is_not_null().all()
    at = (
        own.filter(pl.col("variant") == "cat2")
        .group_by("budget")
        .agg(pl.col("iterations_per_model").first())
    )
    assert dict(at.iter_rows()) == {20: 10, 40: 20}
    results = sweep.probe_cells(loaded, cells)
    assert results.select("world_seed", "budget").unique().height == 2
    cache = planning.features_dir(cells[0].settings)  # one cache for every cell, notebook 03's
    assert {planning.features_dir(c.settings) for c in cells} == {
        tmp_path / "time_concat" / "features"
    }
    entries = [p for p in cache.iterdir() if p.is_dir()]
    merged = sweep.plan_cells(cells)
    groups = {rep.checkpoints for reps in merged.representations.values() for rep in reps}
    singles = {c for group in groups for c in group}
    # per task and split (train, eval): one entry per distinct checkpoint and per
    # representation of several; the untrained networks' files are one per replicate and seed,
    # and snapshot-20 of seed 0 (cat1 at 20, cat2's first model at 40) is extracted once
    several = {group for group in groups if len(group) > 1}
    tasks = len(cells[0].settings.tasks)
    assert len(entries) == tasks * 2 * (len(singles) + len(several))


# ---------------------------------------------------------------------------------------------
# Notebook 04's cells, the same for a profile that sweeps and one that does not
# ---------------------------------------------------------------------------------------------

NOTEBOOK_04 = Path(__file__).parents[1] / "notebooks" / "04_when_concat_helps.ipynb"


def run_notebook_04_cells(
    monkeypatch: pytest.MonkeyPatch, values: dict[str, object]
) -> tuple[dict[str, object], list[object]]:
    """Notebook 04's code cells executed in this process, in order, with `values` over its
    parameters cell's names; returns the namespace and everything the cells displayed."""
    shown: list[object] = []
    monkeypatch.setattr("IPython.display.display", lambda *objs: shown.extend(objs))
    namespace: dict[str, object] = {}
    code = [
        c.source for c in nbformat.read(NOTEBOOK_04, as_version=4).cells if c.cell_type == "code"
    ]
    exec(code[0], namespace)  # the parameters cell
    namespace.update(values)
    for source in code[1:]:
        exec(source, namespace)
    return namespace, shown


def test_notebook_04_reads_the_same_for_a_profile_that_sweeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cell branches on emptiness: with no budget every view says so in one sentence, the
    claim is untested, and nothing but the summary is written."""
    namespace, shown = run_notebook_04_cells(
        monkeypatch, {"profile": "ci", "output_dir": str(tmp_path), "budgets": []}
    )
    sentences = [s.data for s in shown if isinstance(s, Markdown)]
    assert len(sentences) == 7 and all(
        s.startswith("This profile sweeps no budget: ") for s in sentences
    )
    assert [p.name for p in tmp_path.iterdir()] == [SWEEP.summary]
    summary = outputs.read_json(tmp_path / SWEEP.summary)
    assert summary["claim"]["status"] == "untested" and summary["cells"] == []
    assert namespace["swept"].runs_line() == "skipped 0 finished runs, trained 0"


def test_notebook_04_on_a_sweep_writes_its_tables_and_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same cells on a profile that sweeps, with its training and probes planted (they are
    tested above): every view is a table or the chart, and the results, own accuracies,
    verdicts, the paper's table and the summary are written."""
    planted = sweep_results({240: 8, 480: 8, 960: 8}, worlds=1, replicates=3)
    own = planted.filter(pl.col("task") == "mixture").select(
        "world_seed",
        "budget",
        "variant",
        "kind",
        "n",
        "replicate",
        "iterations_per_model",
        (80 * pl.min_horizontal(pl.col("iterations_per_model"), 240) / 240).alias("own_accuracy"),
    )
    monkeypatch.setattr(sweep, "train_all", lambda params, cells: (1, 2))
    monkeypatch.setattr(sweep, "probe_cells", lambda params, cells: planted)
    monkeypatch.setattr(sweep, "own_accuracy", lambda cells: own)
    namespace, shown = run_notebook_04_cells(
        monkeypatch,
        {
            "profile": "ci",
            "output_dir": str(tmp_path),
            "budgets": BUDGETS,
            "chart_formats": ["svg"],
        },
    )
    assert not [s for s in shown if isinstance(s, Markdown)]
    assert sum(isinstance(s, tables.Table) for s in shown) == 6  # cells table to verdicts
    assert sum(isinstance(s, alt.FacetChart) for s in shown) == 1  # the gain chart
    assert {p.name for p in tmp_path.glob("sweep_*")} == {
        SWEEP.results,
        SWEEP.own_accuracy,
        SWEEP.verdicts,
        SWEEP.vs_paper,
        SWEEP.summary,
        "sweep_gains.svg",
    }
    swept = namespace["swept"]
    assert swept.runs_line() == "skipped 1 finished run, trained 2"
    cat1 = swept.learned.filter(pl.col("variant") == "cat1")
    assert cat1["learned_at"].to_list() == [240] and cat1["located"].all()
    summary = outputs.read_json(tmp_path / SWEEP.summary)
    assert [cell["budget"] for cell in summary["cells"]] == BUDGETS
    assert summary["claim"]["ran"].startswith("What ran: profile ci;")
    assert pl.read_parquet(tmp_path / SWEEP.verdicts).height == 3 * len(BUDGETS)


def test_lbfgs_top1_does_not_depend_on_whether_notebook_03_probed_the_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notebook 04's own cell read notebook 03's results with their L-BFGS reference (ci's
    notebook 03 fits it, its notebook 04 does not), so `lbfgs_top1` was filled or null depending
    on the schedule. Rows read from notebook 03 take the cell's own: null when it fits none; a
    cell that fits it where notebook 03 did not is probed again."""
    import yaml

    loaded, _ = params.load("04_when_concat_helps", "ci", overrides={"output_dir": str(tmp_path)})
    notebook = sweep_settings.swept_notebook(loaded)
    (tmp_path / "03_time_concat.parameters.yaml").write_text(yaml.safe_dump(notebook.model_dump()))
    rows = [
        {"variant": v, "replicate": r, "task": "shape", "rule": "heldout", "top1": 0.5}
        | {"lbfgs_top1": 0.6 if r == 0 else None}
        for v in ("cat1", "cat2")
        for r in range(2)
    ]
    pl.DataFrame(rows).write_parquet(tmp_path / TIME_CONCAT.results)
    (cell,) = [cell for cell in sweep_settings.cells(loaded) if cell.shared]
    assert notebook.lbfgs_check and not cell.settings.lbfgs_check
    reused = sweep.notebook03_results(loaded, cell)
    assert reused is not None and reused.height == 4
    assert reused["lbfgs_top1"].null_count() == 4 and reused["top1"].to_list() == [0.5] * 4
    checking = cell.settings.model_copy(update={"lbfgs_check": True})
    recorded = notebook.model_copy(update={"lbfgs_check": False})
    (tmp_path / "03_time_concat.parameters.yaml").write_text(yaml.safe_dump(recorded.model_dump()))
    monkeypatch.setattr(sweep, "swept_notebook", lambda _params: recorded)
    fitting = sweep_settings.Cell(cell.world_seed, cell.budget, checking, cell.shared)
    assert sweep.notebook03_results(loaded, fitting) is None


@pytest.mark.parametrize("length", [2, 3, 4])
def test_a_regime_sentence_claims_no_more_than_its_decided_cells(length: int) -> None:
    """Every planted world of 2 to 4 budgets: a crossover is named only between a contradicted
    cell and a reproduced one at a higher budget, as exactly that interval; a sentence never says
    "from B on" past the budgets run, names only the largest budget as the largest run, and names
    every undecided budget as undecided."""
    budgets = BUDGETS[:length]
    for statuses in itertools.product((Y, N, U), repeat=length):
        rows = [
            {"world_seed": 0, "budget": b, "status": s}
            for b, s in zip(budgets, statuses, strict=True)
        ]
        found = crossover.budget_claim(pl.DataFrame(rows))
        fails = [b for b, s in zip(budgets, statuses, strict=True) if s == N]
        helps = [b for b, s in zip(budgets, statuses, strict=True) if s == Y]
        bracketed = bool(fails and helps) and max(fails) < min(helps)
        assert ("crossover between" in found.line) == bracketed, found.line
        if bracketed:
            assert f"crossover between {max(fails):,} and {min(helps):,} iterations" in found.line
            assert found.crossovers[0] == (max(fails), min(helps))
        else:
            assert found.crossovers[0] is None
        assert " on," not in found.line and " on)" not in found.line, found.line
        for named in re.findall(r"([\d,]+), the largest budget run", found.line):
            assert named == f"{budgets[-1]:,}", found.line
        undecided = [b for b, s in zip(budgets, statuses, strict=True) if s == U]
        if undecided and len(set(statuses)) > 1:
            assert "undecided at" in found.line or "no budget decided" in found.line, found.line
        if not fails and helps and undecided:
            assert "no crossover was seen" in found.line, found.line
