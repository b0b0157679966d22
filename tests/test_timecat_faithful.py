"""The paper-checkpoints profile's settings of the authors' probe, on fixture data in the layouts
it reads and fixture checkpoints at the paths it names: its default, and bad settings refused.
The profile run end to end (every task, every setup of the authors' probe) is the dress
rehearsal's, tests/test_rehearsal.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_timecat import write_released_files

from kit.data.fixtures import write_cifar, write_image_folder, write_inat18
from kit.experiments.timecat import measure, planning
from kit.experiments.timecat.settings import TimecatSettings
from kit.params import params
from kit.probes.settings import PAPER_WEIGHT_DECAYS

NOTEBOOK = "03_time_concat"
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


def test_paper_checkpoints_probes_with_the_authors_probe_and_trains_nothing(
    settings: Path, tmp_path: Path
) -> None:
    loaded = resolved(settings, tmp_path / "out")
    assert loaded.probe_kind == "faithful"  # the profile's default, not the test's
    assert "the authors' probe" in measure.probe_description(loaded)
    assert not planning.plan(loaded).trainings


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
