"""Trackers (kit.train.trackers): rank 0 logs metrics.jsonl's numbers live to TensorBoard and
MLflow, read back here with each tool's own reader; logging changes nothing the run computes;
`kit run` and the trainer say the command that follows a run."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest
import torch
from pydantic import ValidationError
from test_train import final_state, one_thread, settings, write_config  # noqa: F401

from kit.cli import runner
from kit.params.params import ParameterError
from kit.train import trainer as train
from kit.train.metrics import read_metrics
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings, load_train_settings
from kit.train.trackers import TRACKERS, mlflow_runs

#: the numbers every CPU run logs (a logging step's, and an evaluation's)
LOGGED = ("epoch", "loss", "lr", "images_per_s", "data_wait_s", "eval_accuracy", "eval_loss")
#: measured, so never the same twice
TIMINGS = ("images_per_s", "data_wait_s")


def _computes_the_same(values: dict, tracked: Path, folder: Path) -> None:
    """The run in `tracked` computed what the same settings without trackers compute in
    `folder`: its rows but the timings, and its final weights, bit for bit."""
    plain = train.train(TrainSettings(**values | {"trackers": [], "output_dir": str(folder)}))
    assert not list(plain.glob("events.out.tfevents.*"))
    assert not (plain / mlflow_runs.STORE).exists()
    left, right = (read_metrics(run).drop(TIMINGS) for run in (tracked, plain))
    assert left.equals(right)
    models = [final_state(run)["model"] for run in (tracked, plain)]
    assert all(torch.equal(models[0][key], models[1][key]) for key in models[0])


def test_tensorboard_scalars_are_the_metrics_and_do_not_change_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from tensorboard.backend.event_processing import event_accumulator

    values = settings(tmp_path / "run", iterations=12, eval_every=6, trackers=["tensorboard"])
    out = train.train(TrainSettings(**values))
    assert f"follow run live: tensorboard --logdir {out}\n" in capsys.readouterr().out
    events = event_accumulator.EventAccumulator(str(out))
    events.Reload()
    metrics = read_metrics(out)
    for column in LOGGED:
        logged = metrics.drop_nulls(column)
        scalars = events.Scalars(column)
        assert [s.step for s in scalars] == logged["step"].to_list() != [], column
        assert [s.value for s in scalars] == pytest.approx(logged[column].to_list()), column
    # off CUDA there is no GPU memory: a null column, and no scalar
    assert metrics["gpu_memory_gib"].null_count() == metrics.height
    assert "gpu_memory_gib" not in events.Tags()["scalars"]
    assert (metrics["data_wait_s"] >= 0).all()
    _computes_the_same(values, out, tmp_path / "untracked")
    # an operational setting: the same run, finished, whatever it logs to
    cfg = TrainSettings(**values)
    assert cfg.differing_settings(cfg.model_copy(update={"trackers": []}).model_dump()) == []
    assert train.train(cfg.model_copy(update={"trackers": []})) == out


def _history(uri: str, folder: Path) -> tuple[object, dict[str, list[tuple[int, float]]]]:
    """The MLflow run logged for `folder` in the store at `uri`, and its metrics by key as
    (step, value), read through MLflow's own client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(mlflow_runs.EXPERIMENT)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags[mlflow_runs.FOLDER_TAG] == str(folder)
    return run, {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
    }


def test_mlflow_metrics_are_the_metrics_and_do_not_change_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(mlflow_runs.TRACKING_URI_ENV, raising=False)
    values = settings(tmp_path / "run", iterations=12, eval_every=6, trackers=["mlflow"])
    out = train.train(TrainSettings(**values))
    uri = f"sqlite:///{out / 'mlflow.db'}"  # in the run folder by default
    assert f"follow run live: mlflow ui --backend-store-uri {uri}\n" in capsys.readouterr().out
    run, history = _history(uri, out)
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    metrics = read_metrics(out)
    assert sorted(history) == sorted(LOGGED)  # no GPU memory off CUDA
    for column in LOGGED:
        logged = metrics.drop_nulls(column)
        assert [step for step, _ in history[column]] == logged["step"].to_list() != [], column
        assert [v for _, v in history[column]] == pytest.approx(logged[column].to_list()), column
    _computes_the_same(values, out, tmp_path / "untracked")


def test_an_extended_run_logs_on_in_its_mlflow_run_in_the_store_mlflow_tracking_uri_names(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    monkeypatch.setenv(mlflow_runs.TRACKING_URI_ENV, uri)
    values = settings(tmp_path / "run", iterations=6, step_hint=12, trackers=["mlflow"])
    out = train.train(TrainSettings(**values))
    train.train(TrainSettings(**values | {"iterations": 12}))  # extended from step 6
    assert f"follow run live: mlflow ui --backend-store-uri {uri}\n" in capsys.readouterr().out
    assert not (out / mlflow_runs.STORE).exists()
    run, history = _history(uri, out)  # one MLflow run, finished
    assert run.info.status == "FINISHED"
    assert [step for step, _ in history["loss"]] == read_metrics(out)["step"].to_list()
    assert [step for step, _ in history["loss"]] == [3, 6, 9, 12]


@pytest.mark.parametrize("name", ["tensorboard", "mlflow"])
def test_a_tracker_without_its_package_says_how_to_install_it(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules = TRACKERS.get(name).modules
    for module in modules:  # what an environment without them finds
        monkeypatch.setitem(sys.modules, module, None)
    path = write_config(tmp_path / "run.yaml", settings(tmp_path / "out", trackers=[name]))
    with pytest.raises(
        ParameterError,
        match=rf"trackers: {name}: the {', '.join(modules)} packages? (is|are) not "
        rf"installed; install with `pip install -e '\.\[{name}\]'`",
    ):
        load_train_settings(path)
    assert load_train_settings(path, ["trackers=[]"]).trackers == []
    # validation checks values only: the package is the loader's question, as it is kit check's
    assert TrainSettings(**settings(tmp_path / "out", trackers=[name])).trackers == [name]


def test_trackers_are_named_once_from_the_registry(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"unknown tracker 'wandb'.*known: mlflow, tens"):
        TrainSettings(**settings(tmp_path / "out", trackers=["wandb"]))
    with pytest.raises(ValidationError, match="names a tracker twice"):
        TrainSettings(**settings(tmp_path / "out", trackers=["mlflow", "mlflow"]))


def test_kit_run_says_how_to_follow_notebook_03s_training_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv(mlflow_runs.TRACKING_URI_ENV, raising=False)
    overrides = {"train": {"trackers": ["tensorboard", "mlflow"]}}
    (planned,) = runner.plan(["03"], "ci", overrides=overrides, output_root=tmp_path)
    runs = tmp_path / "ci" / "time_concat"
    assert planned.live[0] == f"tensorboard --logdir {runs}"
    assert planned.live[1].startswith(f"mlflow ui --backend-store-uri sqlite:///{runs}/<run>/")
    assert "MLFLOW_TRACKING_URI" in planned.live[1]
    monkeypatch.setenv(mlflow_runs.TRACKING_URI_ENV, "sqlite:////data/mlflow.db")
    (planned,) = runner.plan(["03"], "ci", overrides=overrides, output_root=tmp_path)
    assert planned.live[1] == "mlflow ui --backend-store-uri sqlite:////data/mlflow.db"
    (untracked,) = runner.plan(["03"], "ci", output_root=tmp_path)
    assert untracked.live == ()
    # the runner prints them as the notebook starts (here one that trains nothing)
    monkeypatch.setattr(runner, "execute", lambda run, notebooks_dir: None)
    monkeypatch.setattr(runner.page, "write_report", lambda profile, folder: folder / "r.html")
    runner._run_all([planned], "ci", runner.NOTEBOOKS_DIR)
    shown = capsys.readouterr().out.splitlines()
    label = "[1/1] 03_time_concat.ipynb (profile ci)"
    assert shown[1:3] == [f"{label} follow training live: {line}" for line in planned.live]


def test_gpu_memory_is_the_peak_since_the_last_row_and_none_off_cuda(tmp_path: Path) -> None:
    from kit.runtime.distributed import Process
    from kit.train.step import Replica

    cfg = TrainSettings(**settings(tmp_path / "out"))
    assert (
        Replica(settings=cfg, process=Process(0, 1, torch.device("cpu"))).peak_memory_gib() is None
    )
    if not torch.cuda.is_available():
        return
    replica = Replica(settings=cfg, process=Process(0, 1, torch.device("cuda")))
    held = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # 0.25 GiB
    assert replica.peak_memory_gib() >= 0.25
    del held
    assert replica.peak_memory_gib() >= 0.25  # held until now
    assert replica.peak_memory_gib() < 0.25


def test_old_metrics_files_read_with_the_new_columns_empty(tmp_path: Path) -> None:
    (tmp_path / RunFolder.METRICS).write_text('{"step": 3, "epoch": 0, "loss": 1.0, "lr": 0.1}\n')
    table = read_metrics(tmp_path)
    assert table["data_wait_s"].to_list() == [None] and table.schema["gpu_memory_gib"] == pl.Float64


def test_a_fallback_count_left_in_the_process_is_not_the_next_runs(tmp_path: Path) -> None:
    """Images an earlier batch of this process counted as decoded by a fallback (another run,
    another test) do not reach the next run's metrics rows."""
    from kit.data import hardware

    hardware.FALLBACKS.add(5)
    out = train.train(TrainSettings(**settings(tmp_path / "run", iterations=6, eval_every=6)))
    assert read_metrics(out)["decode_fallbacks"].null_count() == read_metrics(out).height
