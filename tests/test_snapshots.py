"""Snapshots of seeded runs (`catn_models: snapshots`): a snapshot is the model a run trained to
its step would end with, taking one changes nothing the run computes, a finished run is extended
exactly when its horizon is the same (and refused naming the key when not), a kill while a
snapshot is written resumes exactly, and notebook 03's plan reads the snapshots.

The runs are test_train's resnet10 at width 1/8 on 16 px synthetic images, one thread.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_timecat import fake_data, paper_data, planned_params  # noqa: F401
from test_train import SUBPROCESS_ENV, one_thread, settings, write_config  # noqa: F401

from kit.cli.main import main as kit_main
from kit.experiments.timecat import planning
from kit.files import files
from kit.files.paths import REPO_ROOT
from kit.params.params import ParameterError
from kit.train import trainer as train
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings

#: checkpoints every 6 steps and evaluations every 12: steps 8 and 16 are snapshots alone, where
#: an uninterrupted run does not otherwise pass through x
HORIZON = 24


def run(out: Path, **changes) -> TrainSettings:
    return TrainSettings(**settings(out, **({"step_hint": HORIZON} | changes)))


def model(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of 24 steps with snapshots at 8, 16 and 24."""
    out = tmp_path_factory.mktemp("seeded") / "run"
    return train.train(run(out, snapshot_steps=[8, 16, 24]))


def test_a_snapshot_is_the_model_of_a_run_trained_to_its_step(seeded: Path, tmp_path: Path) -> None:
    for step in (8, 16):
        short = train.train(run(tmp_path / f"to{step}", iterations=step))
        assert_same(model(RunFolder(seeded).snapshot(step)), model(short / RunFolder.CHECKPOINT))
        saved = torch.load(RunFolder(seeded).snapshot(step), weights_only=True)
        assert saved["step"] == step and saved["config"]["seed"] == 3
        assert saved["config"]["step_hint"] == HORIZON
        assert files.verify(RunFolder(seeded).snapshot(step), "")  # hashed beside it
    assert_same(model(RunFolder(seeded).snapshot(24)), model(seeded / RunFolder.CHECKPOINT))


def test_snapshots_change_nothing_the_run_computes(seeded: Path, tmp_path: Path) -> None:
    plain = train.train(run(tmp_path / "plain"))
    assert_same(model(seeded / RunFolder.CHECKPOINT), model(plain / RunFolder.CHECKPOINT))
    assert not list(plain.glob("snapshot-*"))


def test_a_finished_run_is_extended_exactly_with_the_same_horizon(
    seeded: Path, tmp_path: Path
) -> None:
    out = tmp_path / "extended"
    train.train(run(out, iterations=8, snapshot_steps=[8]))
    assert train.train(run(out, snapshot_steps=[8, 16, 24])) == out
    for name in [*(RunFolder(out).snapshot(step).name for step in (16, 24)), RunFolder.CHECKPOINT]:
        assert_same(model(out / name), model(seeded / name))
    assert (out / RunFolder.DONE).read_text() == (seeded / RunFolder.DONE).read_text()


def test_a_changed_horizon_or_none_is_refused_naming_the_key(tmp_path: Path) -> None:
    out = tmp_path / "run"
    train.train(run(out, iterations=8))
    with pytest.raises(ParameterError, match=r"different settings \(step_hint\)"):
        train.train(run(out, step_hint=30))
    unhinted = tmp_path / "unhinted"
    train.train(TrainSettings(**settings(unhinted, iterations=8)))
    with pytest.raises(ParameterError, match=r"different settings \(iterations\)"):
        train.train(TrainSettings(**settings(unhinted)))  # warmup would follow iterations


def test_a_snapshot_asked_for_after_its_step_passed_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    train.train(run(out, iterations=16))
    with pytest.raises(ParameterError, match=r"past the snapshot steps 8 without saving them"):
        train.train(run(out, snapshot_steps=[8, 24]))


#: a trainer whose snapshot of step 16 is killed (SIGKILL) half written
DYING = """
import os, signal, sys
from kit.files import files
from kit.train import checkpoint, command

written = checkpoint.write_checkpoint

def dying(path, state):
    if path.name == "snapshot-16.pt":
        with files.hashed_write(path) as handle:
            handle.write(b"half a snapshot")
            os.kill(os.getpid(), signal.SIGKILL)
    written(path, state)

checkpoint.write_checkpoint = dying
sys.exit(command.main(["--config", sys.argv[1]]))
"""


def test_a_kill_while_a_snapshot_is_written_resumes_exactly(seeded: Path, tmp_path: Path) -> None:
    values = settings(tmp_path / "killed", step_hint=HORIZON, snapshot_steps=[8, 16, 24])
    config = write_config(tmp_path / "killed.yaml", values)
    done = subprocess.run(
        [sys.executable, "-c", DYING, str(config)],
        env=SUBPROCESS_ENV,
        cwd=REPO_ROOT,
        capture_output=True,
        check=False,
        timeout=300,
    )
    out = tmp_path / "killed"
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert not RunFolder(out).snapshot(16).exists() and list(out.glob(".snapshot-16.pt*"))
    assert torch.load(out / RunFolder.CHECKPOINT, weights_only=True)["step"] == 12

    train.train(TrainSettings(**values))
    assert not list(out.glob(".snapshot-*"))  # the dead writer's temporary is gone
    for name in [
        *(RunFolder(out).snapshot(step).name for step in (8, 16, 24)),
        RunFolder.CHECKPOINT,
    ]:
        assert_same(model(out / name), model(seeded / name))


# ---------------------------------------------------------------------------------------------
# Notebook 03's plan
# ---------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("fake_data")
def test_the_paper_plan_trains_one_run_per_seed_and_reads_its_snapshots() -> None:
    snapshots = planned_params("paper-8xh100")
    assert snapshots.catn_models == "snapshots"
    experiment = planning.plan(snapshots)
    runs = {t.seed: t for t in experiment.trainings}
    assert {seed: t.iterations for seed, t in runs.items()} == {
        2: 450_000,
        550: 200_000,
        23: 100_000,
        477: 100_000,
        8529: 80_000,
    }
    assert sum(t.iterations for t in experiment.trainings) == 930_000
    assert {t.step_hint for t in experiment.trainings} == {450_000}
    assert runs[2].snapshot_steps == [80_000, 100_000, 200_000, 450_000]
    assert runs[8529].snapshot_steps == [80_000]
    cat4 = next(r for r in experiment.representations if r.variant == "cat4")
    assert [p.name for p in cat4.checkpoints] == ["snapshot-100000.pt"] * 4
    assert [p.parent.name for p in cat4.checkpoints] == ["seed2", "seed550", "seed23", "seed477"]
    table = planning.run_table(experiment)
    assert table.filter(table["seed"] == 550)["serves"].to_list() == [
        "cat2 at 200000, cat4 at 100000, cat5 at 80000"
    ]

    independent = planning.plan(planned_params("paper-8xh100", catn_models="independent"))
    assert len(independent.trainings) == 12
    assert sum(t.iterations for t in independent.trainings) == 1_650_000
    assert {t.step_hint for t in independent.trainings} == {None}  # warmup: its own length


@pytest.mark.usefixtures("fake_data")
def test_adding_a_variant_changes_no_run_s_horizon() -> None:
    variants = [v.model_dump() for v in planned_params("paper-8xh100").variants]
    more = [*variants, {"name": "cat3", "kind": "time-concat", "n": 3, "iterations": 150_000}]
    before = planning.plan(planned_params("paper-8xh100"))
    after = planning.plan(planned_params("paper-8xh100", variants=more))
    hints = {t.seed: t.step_hint for t in before.trainings}
    assert {t.seed: t.step_hint for t in after.trainings} == hints
    seed23 = next(t for t in after.trainings if t.seed == 23)
    assert seed23.iterations == 150_000 and 150_000 in seed23.snapshot_steps


@pytest.mark.usefixtures("fake_data")
def test_launch_plan_prints_both_designs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    arguments = ["--profile", "paper-8xh100", "--set", f"output_dir={tmp_path / 'out'}"]
    assert kit_main(["launch", "plan", *arguments, "--out", str(tmp_path / "export")]) == 0
    printed = capsys.readouterr().out
    snapshots = next(line for line in printed.splitlines() if line.strip().startswith("snapshots"))
    independent = next(
        line for line in printed.splitlines() if line.strip().startswith("independent")
    )
    assert snapshots.split()[1:3] == ["5", "930,000"] and "(this profile)" in snapshots
    assert independent.split()[1:3] == ["12", "1,650,000"]
    assert "GPU-hours" in printed
    assert "#SBATCH --array=0-4" in (tmp_path / "export" / "train.sbatch").read_text()
