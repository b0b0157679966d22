"""Faults a careful user runs into, each kept from coming back: stale or corrupt artefacts,
files the kit cannot verify, names that would become paths outside the output folder, absurd
budgets. Every case is refused or repaired before any compute, naming the file or key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kit import models
from kit.experiments.timecat import planning
from kit.experiments.timecat.settings import TimecatSettings
from kit.files import files
from kit.files.paths import REPO_ROOT, importable_environment
from kit.params import params
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings

NOTEBOOK = "03_time_concat"


def ci_settings(tmp_path: Path, **overrides) -> TimecatSettings:
    loaded, _ = params.load(NOTEBOOK, "ci", overrides={"output_dir": str(tmp_path), **overrides})
    assert isinstance(loaded, TimecatSettings)
    return loaded


def kit_check(*sets: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kit", "check", "03", "--profile", "ci"]
    for value in sets:
        command += ["--set", value]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        env=importable_environment(),
    )


def initial_weights(config: TrainSettings) -> torch.Tensor:
    return models.read_checkpoint(RunFolder.of(config).initial)["model"]["conv1.weight"]


def test_untrained_networks_made_with_other_settings_are_written_again(tmp_path: Path) -> None:
    """A second run in the same folder with another width must not probe the first run's
    untrained networks (they used to be kept because the file existed)."""
    narrow = planning.plan(ci_settings(tmp_path)).initial
    assert planning.initialise(narrow) == len(narrow) > 0
    assert planning.initialise(narrow) == 0  # same settings: kept
    narrow_channels = initial_weights(narrow[0]).shape[0]
    wide = planning.plan(ci_settings(tmp_path, train={"width": 2.0})).initial
    assert [c.output_dir for c in wide] == [c.output_dir for c in narrow]
    assert planning.initialise(wide) == len(wide)
    saved = models.read_checkpoint(RunFolder.of(wide[0]).initial)
    assert saved["config"]["width"] == wide[0].width != narrow[0].width
    assert initial_weights(wide[0]).shape[0] > narrow_channels
    assert planning.initialise(wide) == 0


def test_an_untrained_network_corrupted_on_disk_is_written_again(tmp_path: Path) -> None:
    configs = planning.plan(ci_settings(tmp_path)).initial
    planning.initialise(configs)
    path = RunFolder.of(configs[0]).initial
    assert files.verify(path, "rebuild")  # its hash is recorded
    good = path.read_bytes()
    corrupt = bytearray(good)
    corrupt[len(corrupt) // 2] ^= 0xFF  # same size, one byte changed
    path.write_bytes(bytes(corrupt))
    assert planning.initialise(configs) == 1
    assert path.read_bytes() == good  # the same seed and architecture give the same network


def test_a_checkpoint_without_a_recorded_hash_loads_with_a_notice_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = planning.plan(ci_settings(tmp_path)).initial
    planning.initialise(configs)
    path = RunFolder.of(configs[0]).initial
    models.read_checkpoint(path)
    assert capsys.readouterr().err == ""
    files.sidecar(path).unlink()
    models.read_checkpoint(path)
    notice = capsys.readouterr().err
    assert str(path) in notice and "unverified" in notice and notice.count("\n") == 1


@pytest.mark.parametrize(
    "value, key",
    [
        (
            "tasks=[{name: ../../../../tmp/escape_task, role: unseen, pretraining: true}]",
            "tasks.0.name",
        ),
        (
            "variants=[{name: cat1, kind: time-concat}, {name: ../x, kind: time-concat, n: 2}]",
            "variants.1.name",
        ),
        ("run_root=../../elsewhere", "run_root"),
        ("total_iterations=1000000000000", "total_iterations"),
    ],
)
def test_paths_outside_the_output_folder_and_absurd_budgets_are_refused_at_check(
    value: str, key: str
) -> None:
    result = kit_check(value)
    assert result.returncode == 2, result.stdout
    lines = [line for line in result.stderr.splitlines() if key in line]
    assert len(lines) == 1, result.stderr


def test_an_absurd_budget_says_what_it_would_cost() -> None:
    result = kit_check("total_iterations=10000000000")  # below its bound, 1e11
    assert "images" in result.stderr and "days" in result.stderr
    with pytest.raises(ValueError, match="days at 40,000 images/s"):
        TrainSettings(
            **{
                **ci_settings(Path("/tmp")).train.model_dump(),
                "seed": 0,
                "iterations": 10**10,
                "output_dir": "x",
            }
        )
