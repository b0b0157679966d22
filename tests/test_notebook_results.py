"""Results that notebooks record, read back and checked (recommenders-style notebook tests)."""

from __future__ import annotations

import polars as pl
import pytest

from kit import report, runner, toy


def test_notebook_01_summary_is_what_its_tables_say(notebook_outputs) -> None:
    folder = notebook_outputs("01_toy_counterexample", "toy_summary.json")
    recorded = report.read_json(folder / "toy_summary.json")
    tables = [pl.read_parquet(folder / f"toy_{name}.parquet")
              for name in ("runs", "direct", "concat", "concat_shared_sample")]
    recomputed = toy.summarize(*tables)
    assert recorded.keys() == recomputed.keys()
    for key, value in recomputed.items():
        if isinstance(value, float):
            assert recorded[key] == pytest.approx(value), key
        elif isinstance(value, dict):
            assert recorded[key] == pytest.approx(value), key
        else:
            assert recorded[key] == value, key


def test_notebook_01_key_results(notebook_outputs) -> None:
    folder = notebook_outputs("01_toy_counterexample", "toy_summary.json")
    summary = report.read_json(folder / "toy_summary.json")
    runs = pl.read_parquet(folder / "toy_runs.parquet")
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
    for name in ("construction", "kept_features", "component_accuracy", "concatenation",
                 "sparsity"):
        for fmt in planned.parameters["chart_formats"]:
            assert (folder / f"toy_{name}.{fmt}").stat().st_size > 0
