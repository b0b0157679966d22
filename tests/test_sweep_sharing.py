"""What notebook 04's cells share instead of computing it again: notebook 03's runs where a cell
plans the same ones (cat1 at 60 is notebook 03's first model of cat4, its width-matched model and
untrained networks are notebook 03's), notebook 03's probe results for those, and a
representation's probes among cells (the untrained networks of a world); and what the default
job's two cells cost and say."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from kit.experiments.timecat import (
    measure,
    planning,
    sharing,
    sweep,
    sweep_cost,
    sweep_outcome,
    sweep_settings,
)
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.params import params


def cpu_cells(tmp_path: Path, budgets: list[int], **more: object) -> tuple[object, list]:
    loaded, _ = params.load(
        "04_when_concat_helps",
        "cpu",
        overrides={"budgets": budgets, "output_dir": str(tmp_path)} | more,
    )
    return loaded, sweep_settings.cells(loaded)


def relative(path: Path, tmp_path: Path) -> str:
    return str(path.relative_to(tmp_path))


@pytest.mark.parametrize("budgets", [[60, 240], [60]])
def test_a_cell_of_another_budget_reads_notebook_03s_runs_of_the_same_settings(
    tmp_path: Path, budgets: list[int]
) -> None:
    """At 60 iterations, cat1 (seed s, 60 iterations) is notebook 03's first model of cat4 at
    240, and its width-matched model (60 iterations, as in notebook 03) and untrained networks
    are notebook 03's: only cat4's runs of 15 iterations are the cell's own, whether or not
    notebook 03's own cell is swept too."""
    _, cells = cpu_cells(tmp_path, budgets)
    merged = sweep.plan_cells(cells)
    folders = sorted(relative(Path(t.output_dir), tmp_path) for t in merged.trainings)
    own = [f for f in folders if f.startswith("sweep/")]
    assert own == sorted(
        f"sweep/world0/budget60/rep{r}/cat4/seed{1000 * r + s}" for r in range(6) for s in range(4)
    )
    assert {t.iterations for t in merged.trainings if "sweep/" in t.output_dir} == {15}
    notebook = [f for f in folders if f.startswith("time_concat/")]
    # per replicate: seed 0's run of cat4 (cat1 at 60) and wide1, and at 240 cat1 and cat4's four
    assert len(notebook) == 6 * (2 if budgets == [60] else 6)
    assert all(
        relative(Path(t.output_dir), tmp_path).startswith("time_concat/") for t in merged.initial
    )
    at_60 = {(r.variant, r.replicate): r for r in merged.representations[0, 60]}
    cat1 = at_60["cat1", 2]
    assert [relative(p, tmp_path) for p in cat1.checkpoints] == [
        "time_concat/rep2/cat4/seed2000/checkpoint.pt"
    ]
    # the identity expected of the file is the kept run's (kit.train.backbones.identity_problem)
    assert (
        cat1.identities[0] | {"run": None}
        == {
            "model": "resnet10",
            "width": 0.25,
            "seed": 2000,
            "run": None,
            "step": 60,
        }
        and cat1.identities[0]["run"] == "rep2/cat4/seed2000"
    )
    assert [relative(p, tmp_path) for p in at_60["wide1", 0].checkpoints] == [
        "time_concat/rep0/wide1/seed0/checkpoint.pt"
    ]
    assert {relative(p.parent.parent, tmp_path) for p in at_60["random4", 0].checkpoints} == {
        "time_concat/rep0/random4"
    }
    if budgets == [60, 240]:  # the same representations as notebook 03's own cell
        at_240 = {(r.variant, r.replicate): r for r in merged.representations[0, 240]}
        assert at_60["wide1", 3] == at_240["wide1", 3]
        assert at_60["random4", 3] == at_240["random4", 3]


def test_runs_of_other_settings_are_not_shared(tmp_path: Path) -> None:
    """Another world's runs and a trained run against an untrained network of the same
    settings stay apart."""
    _, cells = cpu_cells(tmp_path, [60, 240], world_seeds=[1])
    merged = sweep.plan_cells(cells)
    assert all("/sweep/world1/" in t.output_dir for t in merged.trainings + merged.initial)
    trained = merged.trainings[0].model_copy(update={"iterations": 1})
    assert sharing._run_key(trained, True) != sharing._run_key(trained, False)


def test_notebook_03s_probe_results_serve_the_representations_a_cell_shares_with_it(
    tmp_path: Path,
) -> None:
    """The cell of 60 reads notebook 03's rows of its width-matched model and untrained
    networks (the same representations), and probes cat1 (notebook 03's model 0 of cat4
    alone: no representation of notebook 03) and cat4 itself."""
    loaded, cells = cpu_cells(tmp_path, [60, 240])
    notebook = sweep_settings.swept_notebook(loaded)
    (tmp_path / "03_time_concat.parameters.yaml").write_text(yaml.safe_dump(notebook.model_dump()))
    rows = [
        {"variant": v, "replicate": r, "task": "shape", "rule": "heldout", "top1": 0.5}
        for v in ("cat1", "cat4", "wide1", "random4", "direct")
        for r in range(6)
    ]
    pl.DataFrame(rows).write_parquet(tmp_path / TIME_CONCAT.results)
    merged = sweep.plan_cells(cells)
    at_60, at_240 = cells
    reused = sweep.notebook03_results(loaded, at_60, merged.representations[at_60.key])
    assert sorted(set(reused["variant"])) == ["random4", "wide1"] and reused.height == 12
    whole = sweep.notebook03_results(loaded, at_240, merged.representations[at_240.key])
    assert sorted(set(whole["variant"])) == ["cat1", "cat4", "random4", "wide1"]


def test_a_representation_an_earlier_cell_probed_is_not_probed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From snapshots every cell of a world reads the same untrained networks: each cell after
    the first takes their probe results from it instead of fitting them again."""
    loaded, _ = params.load(
        "04_when_concat_helps",
        "sweep",
        output_dir=str(tmp_path),
        overrides={"budgets": [60, 120, 240], "world_seeds": [0]},
    )
    cells = sweep_settings.cells(loaded)
    probed: list[tuple[int, str, int]] = []

    def probe_all(reps, settings, diagnose=True):
        probed.extend((settings.total_iterations, rep.variant, rep.replicate) for rep in reps)
        frame = pl.DataFrame(
            [
                {"variant": rep.variant, "replicate": rep.replicate, "task": "shape"}
                | {"top1": 0.01 * settings.total_iterations}
                for rep in reps
            ]
        )
        return measure.Measurements(frame, pl.DataFrame())

    monkeypatch.setattr(measure, "probe_all", probe_all)  # sweep imports it to probe
    results = sweep.probe_cells(loaded, cells)
    first = cells[0].settings.replicates  # the first round's, every cell's
    assert sorted(r for b, v, r in probed if v == "random4") == list(range(first))  # by 60 once
    assert {b for b, v, _ in probed if v == "random4"} == {60}
    assert len([p for p in probed if p[1] == "cat4"]) == 3 * first
    random4 = results.filter(pl.col("variant") == "random4")
    assert sorted(random4["budget"].to_list()) == [60] * first + [120] * first + [240] * first
    assert set(random4["top1"]) == {0.6}  # budget 60's fits, in every cell


def test_the_default_jobs_cost_counts_only_what_notebook_04_adds(tmp_path: Path) -> None:
    _, cells = cpu_cells(tmp_path, [60, 240])
    added = sweep_cost.cost(cells, beyond_notebook_03=True)
    # six replicates of cat4's four runs of 15 iterations; their features on the four tasks; the
    # probes of cat1 (notebook 03's model 0 of cat4 alone) and cat4 at 60, reading one and four
    # networks' features
    assert added == sweep_cost.SweepCost(6 * 4 * 15, 6 * 4 * 4, 6 * 2 * 4, 6 * 4 * (1 + 4))
    # notebook 03's replicate: cat1, cat4, wide1 (two networks' worth), random4 on four tasks,
    # direct on its own task each
    work = sweep_cost.notebook_03_work(cells[0].notebook, 1)
    assert (work.probes, work.features) == (4 * 4 + 2, 4 * (1 + 4 + 2 + 4) + 2)
    lines = sweep_cost.cost_lines(cells)
    assert lines[1].startswith("After notebook 03 in the same output folder (its runs, features")
    _, alone = cpu_cells(tmp_path, [240])
    assert sweep_cost.cost_lines(alone)[1] == (
        "After notebook 03 in the same output folder: nothing more (every run, feature and probe "
        "is notebook 03's, reused)."
    )
    recorded = sweep_cost.recorded_rates()
    whole = sweep_cost.cost(alone)
    expected = sum(whole.seconds(recorded.per).values()) + recorded.fixed
    assert expected > 120  # said in minutes
    assert f"in all {expected / 60:.0f} min" in sweep_cost.cost_lines(alone)[0]


def _stage(handle, name: str, total: int, start: float, seconds: float) -> None:
    for at, final in ((start, False), (start + seconds, True)):
        record = {"stage": name, "done": 0, "total": total, "unit": "u", "note": ""}
        handle.write(json.dumps(record | {"final": final, "time": at, "paused_s": 0.0}) + "\n")


def test_notebook_04s_estimate_reads_the_rates_notebook_03_measured_in_its_folder(
    tmp_path: Path,
) -> None:
    """Notebook 03's planted stage records (a fresh run: every run of its first round trained)
    give the rates notebook 04's estimate uses in the same folder, and the notebook's fixed cost
    (its wall time outside the stages); a notebook 03 that trained nothing (read back) or did not
    run under `kit run` gives none, and the recorded main job's rates and fixed cost apply."""
    loaded, cells = cpu_cells(tmp_path, [60, 240])
    notebook = cells[0].notebook
    replicates = notebook.design.first
    work = sweep_cost.notebook_03_work(notebook, replicates)
    runs = len(planning.plan(notebook.look(replicates)).trainings)
    assert sweep_cost.measured_rates(tmp_path, notebook) is None  # nothing ran here
    records = tmp_path / ".03_time_concat.stages.jsonl"
    with records.open("w") as handle:
        _stage(handle, "training", runs, 0.0, 120.0)
        _stage(handle, "probes", work.probes, 130.0, 100.0)
        _stage(handle, "features train (2048 rows)", 10, 131.0, 30.0)
    (tmp_path / "03_time_concat.provenance.json").write_text(json.dumps({"wall_s": 250.0}))
    found = sweep_cost.measured_rates(tmp_path, notebook)
    assert found is not None
    assert found.per == {
        "iteration": pytest.approx(120.0 / work.iterations),
        "extraction": pytest.approx(30.0 / work.extractions),
        "probe": pytest.approx(70.0 / work.features),
    }
    assert found.fixed == pytest.approx(30.0)  # 250 s less training and probes (with extraction)
    added = sweep_cost.cost(cells, beyond_notebook_03=True)
    expected = sum(added.seconds(found.per).values()) + found.fixed
    line = sweep_cost.cost_lines(cells, tmp_path)[1]
    assert "measured on this machine by notebook 03 in this folder" in line
    assert f"in all {expected:.0f} s" in line or f"in all {expected / 60:.0f} min" in line
    with records.open("w") as handle:  # read back: nothing trained
        _stage(handle, "training", 0, 0.0, 1.0)
        _stage(handle, "probes", work.probes, 2.0, 1.0)
    assert sweep_cost.measured_rates(tmp_path, notebook) is None
    recorded = sweep_cost.recorded_rates()
    assert recorded.measured_on in sweep_cost.cost_lines(cells, tmp_path)[1]
    fixed = f"the notebook's fixed cost {recorded.fixed:.0f} s"
    assert fixed in sweep_cost.cost_lines(cells, tmp_path)[1]


def test_a_recorded_main_jobs_rates_are_kept_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `kit figures --record cpu` keeps of notebook 03's stage records is what an estimate
    reads before notebook 03 has run on a machine; a run that trained nothing has none to keep."""
    _, cells = cpu_cells(tmp_path, [60, 240])
    notebook = cells[0].notebook
    work = sweep_cost.notebook_03_work(notebook, notebook.design.first)
    runs = len(planning.plan(notebook.look(notebook.design.first)).trainings)
    monkeypatch.setattr(sweep_cost, "RECORDED_RATES", tmp_path / "rates.json")
    with pytest.raises(ValueError, match="no rates to record"):
        sweep_cost.record_rates(tmp_path, notebook, "a planted CPU", tmp_path / "rates.json")
    with (tmp_path / ".03_time_concat.stages.jsonl").open("w") as handle:
        _stage(handle, "training", runs, 0.0, 120.0)
        _stage(handle, "probes", work.probes, 130.0, 100.0)
    (tmp_path / "03_time_concat.provenance.json").write_text(json.dumps({"wall_s": 250.0}))
    sweep_cost.record_rates(tmp_path, notebook, "a planted CPU", tmp_path / "rates.json")
    kept = sweep_cost.recorded_rates()
    assert kept == sweep_cost.measured_rates(tmp_path, notebook).__class__(
        sweep_cost.measured_rates(tmp_path, notebook).per, 30.0, "a planted CPU, by the main job"
    )


def test_what_ran_names_one_seed_and_each_budget_in_words(tmp_path: Path) -> None:
    loaded, cells = cpu_cells(tmp_path, [60, 240])
    ran = sweep_outcome.what_ran(loaded, cells, 60.0, "2 cores")
    assert "the kit's synthetic world, seed 0; " in ran
    assert "; budgets 60 and 240 iterations (2 cells); " in ran
    loaded, cells = cpu_cells(tmp_path, [240], world_seeds=[0, 1, 2])
    ran = sweep_outcome.what_ran(loaded, cells, 60.0, "2 cores")
    assert "seeds 0, 1 and 2; " in ran and "; budget 240 iterations (3 cells); " in ran
