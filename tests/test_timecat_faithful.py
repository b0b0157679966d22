"""Notebook 03's probing step with the authors' probe, end to end: the paper-checkpoints profile
on fixture data in the layouts it reads and fixture checkpoints at the paths it names."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import pytest
import yaml
from test_timecat import write_released_files

from kit.data.fixtures import write_cifar, write_image_folder, write_inat18
from kit.experiments.timecat import comparisons, measure, paper, planning
from kit.experiments.timecat.settings import TimecatSettings
from kit.params import params
from kit.probes.selection import RULES
from kit.probes.settings import PAPER_WEIGHT_DECAYS

NOTEBOOK = "03_time_concat"
#: the variants of the paper's Table 3, which the paper-vs-kit table lists
PAPER_VARIANTS = ["cat1", "cat2", "cat4", "cat5"]
PROFILE = "paper-checkpoints"
#: the profile's tasks, with as many classes as the fixtures hold and 16 px images
TASKS = [
    {
        "name": "ImageNet-1k",
        "role": "in-distribution",
        "num_classes": 3,
        "data": {"kind": "imagefolder", "root": "${TIMECAT_DATA}/imagenet", "image_size": 16},
    },
    {
        "name": "iNat18",
        "role": "unseen",
        "num_classes": 3,
        "data": {"kind": "inat18", "root": "${TIMECAT_DATA}/inat18", "image_size": 16},
    },
    {
        "name": "CIFAR-100",
        "role": "unseen",
        "num_classes": 100,
        "data": {"kind": "cifar100", "root": "${TIMECAT_DATA}/cifar100", "image_size": 16},
    },
    {
        "name": "CIFAR-10",
        "role": "unseen",
        "num_classes": 10,
        "data": {"kind": "cifar10", "root": "${TIMECAT_DATA}/cifar10", "image_size": 16},
    },
]
#: the scale of this machine, and one epoch: every target's setup in one process
SMALL = {
    "device": "cpu",
    "feature_workers": 0,
    "feature_batch_size": 64,
    "probes": {
        "faithful": {
            "epochs": 1,
            "processes": 1,
            "workers": 0,
            "batch_size": 8,
            "bn_batch": 4,
            "setups": {
                f"{grid}-{representation}": {"processes": 1, "batch_size": 8}
                for grid in PAPER_WEIGHT_DECAYS
                for representation in ("cat1", "catN")
            },
        },
    },
}


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$TIMECAT_DATA in the layouts the profile reads, $TIMECAT_CHECKPOINTS in the authors' layout
    (kit checkpoints of tiny networks: an AlgoPerf file is a full ResNet-50, minutes on this
    CPU; the AlgoPerf format itself is tested in test_models), and a parameter file with the
    fixtures' tasks and this machine's scale."""
    data = tmp_path / "data"
    write_image_folder(data / "imagenet", ("ant", "bee", "cat"), {"train": 4, "val": 2})
    write_inat18(data / "inat18", [10, 11, 12], {"train": 12, "val": 6})
    write_cifar(data / "cifar100", "cifar100", 12)
    write_cifar(data / "cifar10", "cifar10", 2)
    write_released_files(tmp_path / "released")
    monkeypatch.setenv("TIMECAT_DATA", str(data))
    monkeypatch.setenv("TIMECAT_CHECKPOINTS", str(tmp_path / "released"))
    settings = tmp_path / "fixtures.yaml"
    settings.write_text(yaml.safe_dump({"tasks": TASKS, **SMALL}))
    return settings


def resolved(settings: Path, output: Path, **overrides) -> TimecatSettings:
    loaded, _ = params.load(
        NOTEBOOK, PROFILE, files=[settings], overrides=overrides or None, output_dir=str(output)
    )
    assert isinstance(loaded, TimecatSettings)
    return loaded


def test_paper_checkpoints_runs_the_authors_probe_end_to_end(
    settings: Path, tmp_path: Path
) -> None:
    loaded = resolved(settings, tmp_path / "out")
    assert loaded.probe_kind == "faithful"  # the profile's default, not the test's
    assert "the authors' probe" in measure.probe_description(loaded)
    experiment = planning.plan(loaded)
    assert not experiment.trainings
    assert planning.initialise(experiment.initial) == 5  # the random-init control's networks
    measured = measure.probe_all(experiment.representations, loaded)
    results = measured.results
    # the released variants and the random-init control (untrained networks the run wrote)
    variants, tasks = ["cat1", "cat2", "cat4", "cat5", "random5"], [t["name"] for t in TASKS]
    assert results.height == len(variants) * len(tasks) * len(RULES)
    assert (results.group_by("variant", "task", "rule").len()["len"] == 1).all()
    assert set(results["rule"]) == set(RULES)
    assert set(results["variant"]) == set(variants) and set(results["task"]) == set(tasks)
    assert results["top1"].is_between(0, 1).all() and results["train_top1"].is_between(0, 1).all()
    assert results.filter(pl.col("task") == "CIFAR-100")["top5"].is_not_null().all()
    assert results.filter(pl.col("task") == "CIFAR-10")["top5"].is_null().all()
    # each task was probed with the authors' grid of its dataset
    root = planning.runs_dir(loaded) / "faithful"
    for task, grid in (("ImageNet-1k", "imagenet"), ("iNat18", "inat18"), ("CIFAR-100", "cifar")):
        history = pl.read_csv(root / task / "rep0" / "cat2" / "history.csv")
        assert history["weight_decay"].to_list() == list(PAPER_WEIGHT_DECAYS[grid])
    for rule in RULES:
        table = comparisons.table3(results, rule)
        assert table["variant"].to_list() == variants
        for task in tasks:
            assert table[f"{task} mean"].is_between(0, 100).all()
        assert comparisons.gains(results, rule, loaded.baseline).height == 4 * len(tasks)
        side = paper.paper_vs_kit(results, rule, loaded.paper_columns)
        per_dataset = side.filter(
            pl.col("kit's task (stands for it)").is_in(tasks)
            & ~pl.col("measure").is_in([paper.IN_DISTRIBUTION, paper.TRANSFER, paper.GAIN])
        )
        assert per_dataset["kit mean"].is_not_null().sum() == len(PAPER_VARIANTS) * len(tasks)
    assert measured.diagnostics.height == len(variants) * len(tasks)
    assert measured.diagnostics.filter(pl.col("variant") == "cat5")[
        "features"
    ].unique().to_list() == [
        5 * measured.diagnostics.filter(pl.col("variant") == "cat1")["features"][0]
    ]

    # a finished probe is read back, not run again: a mark left in one result comes back
    marked = root / "CIFAR-10" / "rep0" / "cat4" / "selected.csv"
    selected = pl.read_csv(marked).with_columns(pl.lit(0.123456).alias("top1"))
    selected.write_csv(marked)
    start = time.perf_counter()
    again = measure.probe_all(experiment.representations, loaded).results
    rerun_s = time.perf_counter() - start
    mark = again.filter((pl.col("variant") == "cat4") & (pl.col("task") == "CIFAR-10"))
    assert mark["top1"].to_list() == [0.123456] * len(RULES)
    rest = pl.col("variant") != "cat4"
    assert again.filter(rest).equals(results.filter(rest))
    print(f"re-run with every probe finished: {rerun_s:.1f} s")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"probe_train_rows": 64}, "probe_train_rows: the faithful probe trains on every"),
        (
            {"probes": {"faithful": {"weight_decays": {"ImageNet": [0.1]}}}},
            "probes.faithful.weight_decays: names ImageNet",
        ),
        ({"probes": {"faithful": {"batch_size": 10}}}, "batch_size: the global batch 10 over 1"),
        (
            {"probes": {"faithful": {"milestone": [3]}}},
            "unknown parameter 'probes.faithful.milestone'.*milestones",
        ),
    ],
)
def test_bad_faithful_settings_are_refused_naming_the_key(
    settings: Path, tmp_path: Path, change: dict, message: str
) -> None:
    with pytest.raises(params.ParameterError, match=message):
        resolved(settings, tmp_path / "out", **change)


def test_the_fast_probe_stays_the_default_elsewhere(settings: Path, tmp_path: Path) -> None:
    loaded = resolved(settings, tmp_path / "out", probe_kind="fast")
    assert measure.probe_description(loaded).startswith("the kit's fast probe")
    ci, _ = params.load(NOTEBOOK, "ci")
    assert ci.probe_kind == "fast" and "faithful" not in ci.probes
