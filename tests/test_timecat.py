"""Notebook 03 and kit.timecat: plans, profile pre-flight checks, resumption, the results table."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import polars as pl
import pytest
import torch

from kit import config, models, runner, timecat, train
from kit.config import TimecatParams, TrainConfig

NOTEBOOK = "03_time_concat"


def planned_params(profile: str, **overrides) -> TimecatParams:
    (planned,) = runner.plan([NOTEBOOK], profile, overrides or None)
    return TimecatParams(**planned.parameters)


def test_plan_splits_the_budget_and_names_folders_by_n_and_seed() -> None:
    params = planned_params("ci")
    trainings, representations = timecat.plan_training(params)
    for rep in representations:
        if rep.method.startswith("cat"):
            assert len(rep.checkpoints) == rep.n
            assert rep.n * rep.iterations_per_model == params.total_iterations
            assert all(f"cat{rep.n}" in str(p) and f"rep{rep.replicate}" in str(p)
                       for p in rep.checkpoints)
    direct = [r for r in representations if r.method == "direct"]
    assert {r.task for r in direct} == {t.name for t in params.tasks if t.direct}
    seeds = {(t.config.output_dir, t.config.seed) for t in trainings}
    assert len(seeds) == len(trainings)  # one folder per run
    assert {t.config.seed for t in trainings} == {0, 1, 1000, 1001}


def test_paper_budgets_and_seeds(monkeypatch, fake_data: Path) -> None:
    params = planned_params("paper-8xh100")
    trainings, representations = timecat.plan_training(params)
    budgets = {r.method: (r.iterations_per_model, len(r.checkpoints)) for r in representations}
    assert budgets == {"cat1": (450_000, 1), "cat2": (200_000, 2), "cat4": (100_000, 4),
                       "cat5": (80_000, 5)}
    assert sorted({t.config.seed for t in trainings}) == [2, 23, 477, 550, 8529]


@pytest.fixture()
def fake_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The on-disk layout each kind expects (empty files: pre-flight opens no image)."""
    for folder in ("imagenet/train/n01440764", "imagenet/val/n01440764", "inat18",
                   "cifar100/cifar-100-python", "cifar10/cifar-10-batches-py"):
        (tmp_path / folder).mkdir(parents=True)
    for file in ("imagenet/train/n01440764/a.JPEG", "imagenet/val/n01440764/b.JPEG",
                 "inat18/train2018.json", "inat18/val2018.json",
                 "cifar100/cifar-100-python/train", "cifar100/cifar-100-python/test",
                 "cifar10/cifar-10-batches-py/test_batch",
                 *[f"cifar10/cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)]):
        (tmp_path / file).write_text("")
    # the meta files are read (their class names), in either key form
    (tmp_path / "cifar100/cifar-100-python/meta").write_bytes(
        pickle.dumps({"fine_label_names": ["apple"] * 100}))
    (tmp_path / "cifar10/cifar-10-batches-py/batches.meta").write_bytes(
        pickle.dumps({b"label_names": [b"airplane"] * 10}))
    monkeypatch.setenv("TIMECAT_DATA", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("profile", ["gpu-1x", "paper-8xh100"])
def test_gpu_profiles_pass_preflight_on_a_fake_layout(fake_data: Path, profile: str) -> None:
    params = planned_params(profile)
    assert params.mode == "train" and params.device == "cuda"


def test_paper_checkpoints_profile_passes_preflight_with_the_files(fake_data: Path,
                                                                  tmp_path: Path,
                                                                  monkeypatch) -> None:
    monkeypatch.setenv("TIMECAT_CHECKPOINTS", str(tmp_path / "released"))
    with pytest.raises(config.ParameterError, match=r"checkpoints: 12 file\(s\) not found"):
        planned_params("paper-checkpoints")
    for n, seeds in ((1, [2]), (2, [2, 550]), (4, [2, 550, 23, 477]),
                     (5, [2, 550, 23, 477, 8529])):
        (tmp_path / "released" / f"cat{n}").mkdir(parents=True)
        for seed in seeds:
            tiny_checkpoint(tmp_path / "released" / f"cat{n}" / f"seed{seed}.pt")
    params = planned_params("paper-checkpoints")
    assert [len(r.checkpoints) for r in timecat.checkpoint_representations(params)] == [1, 2, 4, 5]
    # a bad last file is found before any feature of the first is extracted
    bad = tmp_path / "released" / "cat5" / "seed8529.pt"
    bad.write_bytes(bad.read_bytes()[:1000])
    with pytest.raises(config.ParameterError, match=f"checkpoints: {bad}: not a readable"):
        planned_params("paper-checkpoints")
    tiny_checkpoint(bad, state_width=0.25)
    with pytest.raises(config.ParameterError, match=f"checkpoints: {bad}: does not fit"):
        planned_params("paper-checkpoints")


def tiny_checkpoint(path: Path, state_width: float = 0.125) -> None:
    """A kit checkpoint of a tiny network (its config says width 0.125)."""
    cfg = TrainConfig(model="resnet10", width=0.125, num_classes=3, seed=0, batch_size=8,
                      iterations=1, output_dir="-", data={
                          "kind": "synthetic", "image_size": 16, "synthetic": {
                              "num_train": 8, "num_eval": 8,
                              "components": [{"weight": 1.0, "cues": ["colour"]}]}})
    model = models.build(cfg.model, cfg.num_classes, state_width, image_size=16)
    torch.save({"model": model.state_dict(), "config": cfg.model_dump()}, path)


@pytest.mark.parametrize("profile", ["gpu-1x", "paper-8xh100"])
def test_missing_data_is_refused_naming_the_file_and_path(tmp_path: Path, monkeypatch,
                                                          profile: str) -> None:
    monkeypatch.setenv("TIMECAT_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(config.ParameterError) as error:
        planned_params(profile)
    message = str(error.value)
    assert f"{profile}/{NOTEBOOK}.yaml" in message and "nowhere" in message


@pytest.mark.parametrize("overrides, message", [
    ({"total_iterations": 41}, "total_iterations: 41 does not split into 2 equal runs"),
    ({"replicats": 3}, "unknown parameter 'replicats'"),
    ({"ns": [2, 1]}, "ns"),
    ({"iterations": [10]}, "one positive count per n"),
    ({"tasks": [{"name": "x", "role": "unseen"}]}, "exactly one of data or components"),
    ({"train": {"model": "resnet10"}}, "train"),
])
def test_bad_profiles_are_refused_before_anything_trains(overrides, message: str) -> None:
    with pytest.raises(config.ParameterError, match=message):
        planned_params("ci", **overrides)


def test_notebook_03_table_and_rerun_skips_finished_runs(notebook_outputs, capsys) -> None:
    folder = notebook_outputs(NOTEBOOK, "time_concat_summary.json")
    params = planned_params("ci", output_dir=str(folder))
    table = pl.read_parquet(folder / "time_concat_table3.parquet")
    tasks = [task.name for task in params.tasks]
    assert table["method"].to_list() == [f"cat{n}" for n in params.ns] + ["direct"]
    assert table.columns == ["method", "iterations_per_model", "total_iterations", "replicates",
                             *tasks]
    assert (table.filter(pl.col("method") != "direct")["replicates"] == params.replicates).all()
    results = pl.read_parquet(folder / "time_concat_results.parquet")
    assert results["top1"].is_between(0, 1).all()
    assert set(results["rule"]) == {"paper", "heldout"}
    spread = results.group_by("method", "task", "rule").agg(pl.col("top1").std())
    assert spread.filter(pl.col("method") != "direct")["top1"].null_count() == 0  # >1 replicate
    summary = json.loads((folder / "time_concat_summary.json").read_text())
    assert summary["rule"] == params.probe_rule and summary["lines"]

    trainings, _ = timecat.plan_training(params)
    assert all(timecat.is_finished(t.config) for t in trainings)
    stamps = {t.config.output_dir: os.stat(Path(t.config.output_dir) / train.CHECKPOINT).st_mtime_ns
              for t in trainings}
    skipped = timecat.launch(trainings, params)
    assert len(skipped) == len(trainings)
    assert stamps == {t.config.output_dir:
                      os.stat(Path(t.config.output_dir) / train.CHECKPOINT).st_mtime_ns
                      for t in trainings}
