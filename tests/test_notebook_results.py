"""Results that notebooks record, read back and checked (recommenders-style notebook tests)."""

from __future__ import annotations

import pins
import polars as pl
import pytest

from kit.cli import runner
from kit.experiments import toy_summary
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.experiments.toy_settings import TOY
from kit.report import labels, outputs, page


def test_notebook_01_summary_is_what_its_tables_say(notebook_outputs) -> None:
    folder = notebook_outputs("01_toy_counterexample", TOY.summary)
    recorded = outputs.read_json(folder / TOY.summary)
    tables = [
        pl.read_parquet(folder / name)
        for name in (TOY.runs, TOY.direct, TOY.concat, TOY.concat_shared_sample)
    ]
    recomputed = toy_summary.summarize(*tables)
    assert recorded.keys() == recomputed.keys()
    for key, value in recomputed.items():
        if isinstance(value, float | dict):
            assert recorded[key] == pytest.approx(value), key
        else:
            assert recorded[key] == value, key


#: notebook 01's ci-profile results as measured when this experiment was last changed (seeded
#: CPU training: they reproduce up to floating-point noise); a change to the toy or its
#: parameters that moves them must update them here, on purpose
PINNED_01 = {
    "one_feature_fraction": 0.677,
    "one_feature_fraction_by_share": {"0.25": 0.4375, "0.4": 0.6875, "0.7": 0.906},
    "concat_all_solved_fraction": {"1": 0.104, "2": 0.25, "4": 0.5},
    "concat_all_solved_fraction_shared_sample": {"1": 0.271, "2": 0.333, "4": 0.333},
    "kept_matches_optimum_fraction": 0.980,
    "single_feature_accuracy_other_components": 0.671,
    "unpruned_solves_all_fraction": 1.0,
}
PINNED_01_COUNTS = {"both": 10, "none": 21, "phi1": 34, "phi2": 31}


def test_notebook_01_ci_results_are_the_pinned_ones(notebook_outputs) -> None:
    folder = notebook_outputs("01_toy_counterexample", TOY.summary)
    summary = outputs.read_json(folder / TOY.summary)
    for key, value in PINNED_01.items():
        assert summary[key] == pytest.approx(value, abs=0.02), key
    for kept, count in PINNED_01_COUNTS.items():
        assert abs(summary["kept_counts"][kept] - count) <= 2, kept


def test_notebook_01_key_results(notebook_outputs) -> None:
    folder = notebook_outputs("01_toy_counterexample", TOY.summary)
    summary = outputs.read_json(folder / TOY.summary)
    runs = pl.read_parquet(folder / TOY.runs)
    assert all(accuracy >= 0.95 for accuracy in summary["direct_accuracy"].values())
    # dominated mixtures: most models keep only the dominant component's feature
    assert summary["one_feature_fraction_by_share"]["0.7"] >= 0.75
    assert summary["single_feature_accuracy_own_components"] >= 0.95
    assert summary["single_feature_accuracy_other_components"] == pytest.approx(2 / 3, abs=0.05)
    fractions = summary["concat_all_solved_fraction"]
    assert fractions[max(fractions, key=int)] >= fractions["1"]
    accuracy = runs.select(pl.col("^acc_.*$")).to_numpy()
    assert ((accuracy >= 0) & (accuracy <= 1)).all()
    (planned,) = runner.plan(["01"], "ci")
    for name in (
        "construction",
        "kept_features",
        "component_accuracy",
        "concatenation",
        "sparsity",
    ):
        for fmt in planned.parameters["chart_formats"]:
            assert (folder / f"toy_{name}.{fmt}").stat().st_size > 0


def test_notebook_03_ci_results_are_the_pinned_ones(notebook_outputs) -> None:
    folder = notebook_outputs("03_time_concat", TIME_CONCAT.table3)
    table = pl.read_parquet(folder / TIME_CONCAT.table3)
    measured = {
        f"03 {row['variant']} {task}": row[f"{task} mean"]
        for row in table.iter_rows(named=True)
        for task in ("mixture", "shape", "position")
        if row[f"{task} mean"] is not None
    }
    expect = pins.expected()
    assert measured.keys() == {k for k in expect.values if k.startswith("03 ")}
    # the first replicate's fast probes were refitted by L-BFGS (lbfgs_check), the others not
    results = pl.read_parquet(folder / TIME_CONCAT.results)
    checked = results.filter(pl.col("lbfgs_top1").is_not_null())
    assert set(checked["replicate"]) == {0}
    assert checked.height == results.filter(pl.col("replicate") == 0).height
    # the fast probe run to convergence (select_from: converged) gives L-BFGS's fits
    assert (checked["top1"] - checked["lbfgs_top1"]).abs().max() <= 0.005
    summary = outputs.read_json(folder / TIME_CONCAT.summary)
    controls = {(row["variant"], row["baseline"]) for row in summary["controls"]}
    assert controls == {("cat2", "wide1"), ("cat2", "random2")}
    # each claim in one of three outcomes, with the effect the run could have detected, and
    # intervals within the range of an accuracy difference
    verdicts = pl.read_parquet(folder / TIME_CONCAT.verdicts)
    assert verdicts["claim"].unique(maintain_order=True).to_list() == ["time-concat", "bottleneck"]
    assert verdicts["low"].min() >= -100 and verdicts["high"].max() <= 100
    statuses = {f"03 {c['claim']}": c["status"] for c in summary["claims"]}
    assert statuses.keys() == {"03 time-concat", "03 bottleneck"}
    assert not pins.problems(measured, statuses, expect)
    # one rule for the probe cells: the gains table every output shows is the summary's
    gains = pl.read_parquet(folder / TIME_CONCAT.gains)
    assert gains.to_dicts() == summary["gains"]
    assert all("detectable at 80% power" in c["line"] for c in summary["claims"])
    assert summary["ran"].startswith("What ran: profile ci;") and "2 replicates" in summary["ran"]


#: each notebook and a result file it writes (what `notebook_outputs` waits for)
WRITES = {
    "01_toy_counterexample": "toy_summary.json",
    "02_surveyed_evidence": "evidence_summary.json",
    "03_time_concat": "time_concat_table3.parquet",
    "04_when_concat_helps": "sweep_summary.json",
}


@pytest.mark.parametrize("stem", list(WRITES))
def test_no_chart_of_an_executed_notebook_titles_a_field_with_its_code_name(
    notebook_outputs, stem: str
) -> None:
    """Every axis, legend, facet and tooltip title goes through the one label map
    (kit.report.labels): none shows a key of the map."""
    folder = notebook_outputs(stem, WRITES[stem])
    shown = {
        caption: found
        for caption, spec in page.chart_specs(folder / f"{stem}.ipynb")
        if (found := labels.raw_names(spec))
    }
    assert not shown, shown
