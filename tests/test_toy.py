"""The toy construction of notebook 01: exact properties, and what sparse training does."""

from __future__ import annotations

import html
import re

import nbformat
import numpy as np
import polars as pl
import pytest
import torch

from kit.cli import runner
from kit.experiments import toy, toy_charts, toy_construction, toy_summary
from kit.experiments.toy_settings import TOY, ToySettings
from kit.report import charts, tables

FAST = toy.SparseTrainingSettings(steps=1500, probe_samples=1024, probe_steps=200)


def test_mixture_support_is_not_linearly_separable() -> None:
    assert not toy_construction.mixture_is_linearly_separable()


def test_separability_check_accepts_a_separable_set() -> None:
    points = np.array([[0.0, 0.0], [1.0, 0.2], [3.0, 3.0], [4.0, 2.5]])
    assert toy_construction.linearly_separable(points, np.array([1, 1, 0, 0]))
    xor = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    assert not toy_construction.linearly_separable(xor, np.array([1, 1, 0, 0]))


def test_each_component_is_solved_by_its_named_feature_only() -> None:
    table = toy_construction.component_table()
    for row, feature in zip(
        table.iter_rows(named=True), toy_construction.COMPONENT_FEATURE, strict=True
    ):
        assert row["solved_by_phi1_alone"] == (feature == 0), row
        assert row["solved_by_phi2_alone"] == (feature == 1), row


def test_each_component_has_a_third_of_its_mass_on_three_points() -> None:
    assert torch.allclose(toy_construction.COMPONENT_MASSES.sum(1), torch.ones(4))
    assert ((toy_construction.COMPONENT_MASSES > 0).sum(1) == 3).all()


@pytest.mark.parametrize("dominant", range(4))
def test_optimal_classifier_drops_lightest_point_and_uses_dominant_feature(dominant: int) -> None:
    weights = toy_construction.dominated_weights(dominant, 0.6)
    masses = toy_construction.mixture_masses(weights[None])[0]
    optimum = toy_construction.optimal_mixture_classifier(weights)
    assert optimum["dropped"] == toy_construction.POINT_NAMES[int(masses.argmin())]
    assert optimum["error"] == pytest.approx(float(masses.min()), abs=1e-4)
    assert (
        optimum["features"]
        == toy_construction.FEATURES[toy_construction.COMPONENT_FEATURE[dominant]]
    )


def test_the_optimum_table_gives_each_mixtures_masses_and_lightest_drop() -> None:
    table = toy_construction.optimum_table([0.4, 0.7])
    assert table["dominant"].to_list() == list(toy_construction.COMPONENT_NAMES) * 2
    assert table["share"].to_list() == [0.4] * 4 + [0.7] * 4
    for row in table.iter_rows(named=True):
        masses = {p: row[f"mass {p}"] for p in toy_construction.POINT_NAMES}
        assert sum(masses.values()) == pytest.approx(1.0)
        assert row["dropped"] == min(masses, key=masses.get), row
        assert row["error"] == pytest.approx(min(masses.values()), abs=1e-4)
        assert (
            row["features"]
            == toy_construction.FEATURES[
                toy_construction.COMPONENT_FEATURE[
                    toy_construction.COMPONENT_NAMES.index(row["dominant"])
                ]
            ]
        )


def test_tied_mixture_reports_every_optimal_classifier() -> None:
    optimum = toy_construction.optimal_mixture_classifier(torch.full((4,), 0.25))
    assert optimum["dropped"] == "A | B | C | D"
    assert optimum["features"] == "phi1 | phi2"


def test_direct_training_solves_every_component_with_its_feature() -> None:
    direct = toy.direct_training(3, FAST, seed=3)
    for row in direct.iter_rows(named=True):
        expected = toy_construction.FEATURES[
            toy_construction.COMPONENT_FEATURE[
                toy_construction.COMPONENT_NAMES.index(row["component"])
            ]
        ]
        assert row["kept"] == expected, row
        assert row["accuracy"] >= 0.95, row


def test_sparse_models_on_dominated_mixtures_keep_one_feature_and_fail_half() -> None:
    runs, _ = toy.mixture_sweep([0.7], 6, FAST, seed=5)
    single = runs.filter(pl.col("kept").is_in(["phi1", "phi2"]))
    assert single.height >= 0.75 * runs.height, runs["kept"].value_counts()
    assert (single["kept"] == single["predicted_by_optimum"]).mean() >= 0.9
    for row in single.iter_rows(named=True):
        feature = toy_construction.FEATURES.index(row["kept"])
        for c, name in enumerate(toy_construction.COMPONENT_NAMES):
            if toy_construction.COMPONENT_FEATURE[c] == feature:
                assert row[f"acc_{name}"] >= 0.95, row
            else:
                assert row[f"acc_{name}"] <= 0.8, row  # 2/3 expected


def test_where_both_features_carry_signal_weight_decay_drops_one() -> None:
    """The sparsity bias is the cause: on a mixture where both features help, small weight decay
    keeps both and a larger one keeps a single feature."""
    sweep = toy.sparsity_sweep([0.003, 0.03], [0.45, 0.10, 0.30, 0.15], 12, FAST, seed=7)
    both = dict(sweep.group_by("weight_decay").agg((pl.col("kept") == "both").mean()).iter_rows())
    one = dict(
        sweep.group_by("weight_decay")
        .agg(pl.col("kept").is_in(["phi1", "phi2"]).mean())
        .iter_rows()
    )
    assert both[0.003] >= 0.5 and one[0.03] >= one[0.003] + 0.25, (both, one)


def test_a_shared_sample_differs_only_by_initialisation_and_order() -> None:
    weights = toy_construction.dominated_weights(0, 0.4).repeat(3, 1)
    shared = toy.train_sparse(weights, FAST.model_copy(update={"steps": 5}), seed=3, sample_seed=9)
    fresh = toy.train_sparse(weights, FAST.model_copy(update={"steps": 5}), seed=3)
    generator = torch.Generator().manual_seed(9)
    x, _ = toy.sample(weights[:1], FAST.n_train, FAST.noise, generator)
    assert not torch.equal(shared.u[0], shared.u[1])  # different batch orders
    assert not torch.equal(shared.u, fresh.u)
    assert x.shape == (1, FAST.n_train, 2)


def test_concatenating_a_phi1_and_a_phi2_model_recovers_all_four_components() -> None:
    direct_weights = torch.eye(4)[[0, 2]]  # a P1 model (phi1) and a P3 model (phi2)
    models = toy.train_sparse(direct_weights, FAST, seed=11)
    assert toy.kept_label(models.kept) == ["phi1", "phi2"]
    maps = models.representation_maps()
    alone = toy.probe_components(maps, FAST, seed=12)
    together = toy.probe_components(toy.concatenate(maps, [[0, 1]]), FAST, seed=12)
    assert (alone.max(0).values >= 0.95).all()  # between them they solve everything ...
    assert (alone.min(1).values <= 0.8).all()  # ... but each alone fails two components
    assert (together >= 0.95).all(), together


#: the fewest steps and probe rows that still leave the study every kind of run to concatenate
#: (features kept: both, one, none): its shapes do not depend on how well the models learned.
#: 3.6 s alone (`-n 0`, first torch work of the process included) on 2 cores of an AMD EPYC
#: family 25 model 17 at a load average of 2.8, where FAST took 32.7 s at 2.5
SHAPES = toy.SparseTrainingSettings(steps=300, probe_samples=128, probe_steps=25)


def test_concatenation_study_shapes() -> None:
    runs, models = toy.mixture_sweep([0.4], 4, SHAPES, seed=13)
    assert {"both", "none"} <= set(runs["kept"]) and runs["kept"].str.starts_with("phi").any()
    concat = toy.concatenation_study(runs, models, [1, 2, 4], SHAPES, seed=14)
    counts = dict(concat.group_by("k").len().iter_rows())
    assert counts == {1: 16, 2: 8, 4: 4}
    accuracies = concat.select(pl.col("^acc_.*$")).to_numpy()
    assert ((accuracies >= 0) & (accuracies <= 1)).all()


def test_one_feature_proportion_matches_what_notebook_01_reports(notebook_outputs) -> None:
    folder = notebook_outputs("01_toy_counterexample", TOY.summary)
    reported = toy_summary.summarize(
        *(
            pl.read_parquet(folder / name)
            for name in (TOY.runs, TOY.direct, TOY.concat, TOY.concat_shared_sample)
        )
    )
    (planned,) = runner.plan(["01"], "ci")
    params = ToySettings(**planned.parameters)
    runs, _ = toy.mixture_sweep(params.shares, params.replicates, params, params.seed)
    measured = runs["kept"].is_in(["phi1", "phi2"]).mean()
    assert measured == pytest.approx(reported["one_feature_fraction"], abs=0.1)


def test_accuracy_chart_names_every_representation_and_the_chance_level(
    tmp_path, chart_texts
) -> None:
    trainings = ["direct on the component", "mixture, kept both", "mixture, kept phi1"]
    table = pl.DataFrame(
        [
            {"training": t, "component": c, "n": 3, "mean": 0.9, "std": 0.05}
            for t in trainings
            for c in toy_construction.COMPONENT_NAMES
        ]
    )
    (svg,) = charts.save_chart(toy_charts.accuracy_chart(table), tmp_path, "accuracy", ["svg"])
    texts = chart_texts(svg)
    shown = [t.replace("phi1", "φ1") for t in trainings]  # the feature by its symbol
    assert set(shown) <= set(texts)  # in full, not shortened with '…'
    assert texts.count("chance 66.7") == 1  # a third positive in every component, in %
    assert "100" in texts and "1.0" not in texts  # the axis in %, as every accuracy reads


def test_what_the_runs_show_reads_as_sentences_not_python_dicts() -> None:
    summary = {
        "runs": 4,
        "kept_counts": {"both": 1, "phi1": 3},
        "one_feature_fraction_by_share": {"0.25": 0.5, "0.7": 1.0},
        "kept_matches_optimum_fraction": 0.75,
        "single_feature_accuracy_own_components": 1.0,
        "single_feature_accuracy_other_components": 0.667,
        "direct_accuracy": {"P1": 1.0, "P2": 0.98},
        "concat_all_solved_fraction": {"1": 0.1, "2": 0.5},
        "concat_all_solved_fraction_shared_sample": {"1": 0.2, "2": 0.25},
        "unpruned_solves_all_fraction": 1.0,
    }
    text = toy_summary.summary_markdown(summary)
    assert "{" not in text and "'" not in text.replace("component's", "").replace(
        "classifier's", ""
    )
    assert "1 kept both, 3 kept φ1" in text and "weight 0.25: 50%" in text
    assert "k = 2: 50%" in text and "P2: 98.0%" in text  # an accuracy in %, one decimal
    assert "solves: 100.0%; on the other two: 66.7%" in text and "66.7% expected" in text
    accuracies = [line for line in text.splitlines() if "accuracy" in line]
    assert len(accuracies) == 2 and not any(FRACTION_TEXT.search(line) for line in accuracies)
    assert all(line.startswith("- ") for line in text.splitlines())


#: a number to two decimals or more below 10: how an accuracy reads as a fraction (0.667, 1.000)
FRACTION_TEXT = re.compile(r"(?<![\d.])\d\.\d{2,}(?!\d)")
#: an accuracy or an error rate in % to one decimal (kit.readout.numbers.POINTS)
PERCENT_TEXT = re.compile(r"\d{1,3}\.\d")
#: what a table's header says of an accuracy or an error rate
RATE_WORDS = re.compile(r"accuracy|error")


def test_notebook_01s_tables_read_accuracies_and_errors_in_percent() -> None:
    """The accuracy table as displayed: mean and std in %, headed '%' as notebook 03's top-1;
    the least-error classifier's error in %; the frames written to files keep fractions."""
    planted = pl.DataFrame(
        {
            "training": ["mixture, kept phi1"] * 2,
            "component": ["P1", "P3"],
            "n": [3, 3],
            "mean": [1.0, 0.6666667],
            "std": [0.0, 0.0478],
        }
    )
    shown = tables.table(toy_charts.accuracy_table(planted)).layout()
    assert shown.headers == ["component", "accuracy %", "accuracy % std"]
    assert shown.rows == [["P1", "100.0", "0.0"], ["P3", "66.7", "4.8"]]
    assert planted["mean"].to_list() == [1.0, 0.6666667]
    optimum = tables.table(toy_charts.optimum_table([0.25, 0.4])).layout()
    assert {row[optimum.headers.index("error %")] for row in optimum.rows} == {"25.0", "20.0"}
    assert set(toy_construction.optimum_table([0.25, 0.4])["error"]) == {0.25, 0.2}


def test_notebook_01s_shares_of_groups_and_models_read_in_percent() -> None:
    """The groups solving every component, by k, in % of the groups as the summary says them
    (the result file keeps fractions); the sparsity chart's share axis in % too."""
    groups = pl.DataFrame({"k": [1, 1, 1, 2, 2], "components_solved": [4, 2, 3, 4, 4]})
    shared = pl.DataFrame({"k": [1, 1, 2, 2], "components_solved": [1, 4, 4, 4]})
    shown = tables.table(toy_charts.all_solved_table(groups, shared)).layout()
    assert shown.headers[1:] == ["own samples %", "one shared sample %"]
    assert [row[1:] for row in shown.rows] == [["33.3", "50.0"], ["100.0", "100.0"]]
    assert toy.all_solved_by_k(groups, shared)["own samples"].to_list()[1] == 1.0
    sweep = pl.DataFrame({"weight_decay": [0.1, 0.1, 1.0], "kept": ["phi1", "both", "phi1"]})
    y = toy_charts.sparsity_chart(sweep).to_dict()["encoding"]["y"]
    assert y["stack"] == "normalize" and y["axis"]["format"] == "%"


def accuracies_not_in_percent(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """What an executed notebook shows of an accuracy or an error rate other than in % to one
    decimal: a table column saying either without '%', or with a cell not to one decimal; a
    column headed 'mean' or 'std' alone (a statistic without its unit); a sentence about
    accuracy (the outputs' markdown, the prose) with a number to two decimals or more."""
    wrong: list[tuple[str, str]] = []
    for cell in notebook.cells:
        pages, sentences = [], [cell.source] if cell.cell_type == "markdown" else []
        for output in cell.get("outputs", []):
            pages.append(output.get("data", {}).get("text/html", ""))
            sentences.append(output.get("data", {}).get("text/markdown", ""))
        for table in re.findall(r"<table.*?</table>", "".join(pages), re.S):
            if "kit-settings" in table:  # the parameters a run took
                continue
            headers = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
            rows = [
                re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>.*?</tr>", table)
            ]
            columns = [
                (h, [r[i] for r in rows if len(r) == len(headers)]) for i, h in enumerate(headers)
            ]
            notes = re.search(r"In every row: (.*?)\.</td>", table)
            for note in notes[1].split("; ") if notes else []:
                header, value = html.unescape(note).split(": ", 1)
                columns.append((header, [value]))
            for header, values in columns:
                if header in ("mean", "std"):
                    wrong.append((header, "a statistic without its unit"))
                elif RATE_WORDS.search(header):
                    wrong += [(header, "no %")] if "%" not in header else []
                    wrong += [(header, v) for v in values if not PERCENT_TEXT.fullmatch(v)]
        for line in "\n".join(sentences).splitlines():
            if "accuracy" in line and FRACTION_TEXT.search(line):
                wrong.append(("a sentence", line))
    return wrong


def test_notebook_01_shows_no_accuracy_as_a_fraction(notebook_outputs) -> None:
    """Notebook 01 as executed: every accuracy and error rate in its tables, its summary's
    sentences and its prose in % to one decimal, as notebooks 02-04 print them."""
    folder = notebook_outputs("01_toy_counterexample", TOY.summary)
    executed = nbformat.read(folder / "01_toy_counterexample.ipynb", as_version=4)
    assert any("accuracy %" in str(cell.get("outputs")) for cell in executed.cells)
    assert not accuracies_not_in_percent(executed)
