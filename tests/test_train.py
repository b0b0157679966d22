"""The trainer: configuration errors, schedule-free handling, exact resume, DDP, bad runs, plans.

Everything runs a resnet10 with 8 or 16 base channels on 16 px synthetic images, one thread per
process (two cores, shared with the rest of the suite).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from kit import models
from kit.cli.main import main as kit_main
from kit.data import pipeline as data
from kit.data import prefetch
from kit.experiments.timecat import budget
from kit.experiments.timecat import budget as plan
from kit.files.paths import REPO_ROOT
from kit.params.params import ParameterError
from kit.runtime import distributed, provenance
from kit.train import run_folder
from kit.train import trainer as train
from kit.train.checkpoint import NonFiniteLossError
from kit.train.metrics import read_metrics
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings, load_train_settings
from kit.train.step import Replica, warmup_steps
from kit.train.watchdog import Watchdog

SUBPROCESS_ENV = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def settings(out: Path, **changes) -> dict:
    values = {
        "model": "resnet10",
        "width": 0.125,
        "num_classes": 4,
        "seed": 3,
        "data": {
            "kind": "synthetic",
            "image_size": 16,
            "synthetic": {
                "num_train": 256,
                "num_eval": 128,
                "noise": 0.1,
                "components": [
                    {"weight": 1.0, "cues": ["colour"]},
                    {"weight": 1.0, "cues": ["position"]},
                ],
            },
        },
        "batch_size": 32,
        "iterations": 24,
        "lr": 0.01,
        "bn_recalibration_batches": 2,
        "eval_every": 12,
        "checkpoint_every": 6,
        "log_every": 3,
        "num_workers": 0,
        "output_dir": str(out),
    }
    return values | changes


def write_config(path: Path, values: dict) -> Path:
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def final_state(run_dir: Path) -> dict:
    return torch.load(run_dir / RunFolder.CHECKPOINT, weights_only=True)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


def test_config_defaults_are_the_algoperf_schedule_free_recipe(tmp_path: Path) -> None:
    cfg = load_train_settings(write_config(tmp_path / "run.yaml", settings(tmp_path / "out")))
    assert (cfg.lr, cfg.betas, cfg.weight_decay, cfg.label_smoothing) == (
        0.01,
        [0.9, 0.99552],
        0.08122,
        0.2,
    )
    assert (cfg.weight_lr_power, cfg.r, cfg.warmup_fraction) == (2.0, 0.75, 0.02)
    hinted = cfg.model_copy(update={"step_hint": 195_999})
    assert warmup_steps(hinted) == round(0.02 * 0.75 * 195_999) == 2940


def test_config_string_number_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(settings(tmp_path)).replace("lr: 0.01", "lr: 1e-3"))
    with pytest.raises(ParameterError) as error:
        load_train_settings(path)
    message = str(error.value)
    assert f"{path}: parameter 'lr'" in message and "'1e-3'" in message and "1.0e-3" in message


def test_config_nested_unknown_key_and_override_are_named(tmp_path: Path) -> None:
    values = settings(tmp_path)
    values["data"] = values["data"] | {"imagesize": 16}
    path = write_config(tmp_path / "run.yaml", values)
    with pytest.raises(ParameterError) as error:
        load_train_settings(path)
    assert "unknown parameter 'data.imagesize'; did you mean 'data.image_size'" in str(error.value)
    path = write_config(tmp_path / "run.yaml", settings(tmp_path))
    with pytest.raises(ParameterError, match="the command line: parameter 'data.image_size'"):
        load_train_settings(path, ["data.image_size=4"])
    with pytest.raises(ParameterError, match=r"synthetic.components.0.*smell not among the cues"):
        load_train_settings(path, ["data.synthetic.components=[{weight: 1.0, cues: [smell]}]"])
    assert load_train_settings(path, ["data.image_size=24", "seed=9"]).data.image_size == 24


# ---------------------------------------------------------------------------------------------
# Schedule-free AdamW: optimizer state round trip and BatchNorm at the evaluation point
# ---------------------------------------------------------------------------------------------


def test_optimizer_state_round_trip_continues_identically(tmp_path: Path) -> None:
    """schedule_free issue #32: state_dict round trips failed; the trainer saves in eval mode
    (weights at x) and returns to y after loading. A frozen layer (no state) is included."""
    cfg = TrainSettings(**settings(tmp_path))
    process = distributed.Process(0, 1, torch.device("cpu"))
    batches = [(torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8,))) for _ in range(6)]

    def trainer() -> Replica:
        made = Replica(settings=cfg, process=process)
        made.module.layer1[0].conv1.weight.requires_grad_(False)
        return made

    original = trainer()
    for images, labels in batches[:3]:
        original.step(images, labels)
    original.optimizer.eval()
    buffer = io.BytesIO()
    torch.save(original.state(), buffer)
    original.optimizer.train()
    for images, labels in batches[3:]:
        original.step(images, labels)

    torch.manual_seed(123)  # a different initialisation, overwritten by the load
    resumed = trainer()
    resumed.load(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    for images, labels in batches[3:]:
        resumed.step(images, labels)
    for (name, a), b in zip(
        original.module.state_dict().items(), resumed.module.state_dict().values(), strict=False
    ):
        assert torch.equal(a, b), name
    assert resumed.optimizer.param_groups[0]["k"] == 6


def test_batchnorm_recalibration_at_x_is_needed_and_sufficient(tmp_path: Path) -> None:
    """Two runs identical but for recalibration reach the same weights; only the recalibrated
    one evaluates as well as the weights deserve (BN with the eval data's own statistics)."""
    runs = {}
    for batches in (0, 4):
        values = settings(
            tmp_path / f"recal{batches}",
            lr=1.0,
            width=0.25,
            iterations=60,
            eval_every=0,
            checkpoint_every=0,
            log_every=60,
            label_smoothing=0.0,
            bn_recalibration_batches=batches,
        )
        runs[batches] = train.train(TrainSettings(**values))
    stale, fresh = (final_state(runs[b]) for b in (0, 4))
    for name, tensor in stale["model"].items():
        if "running" not in name and "num_batches" not in name:
            assert torch.equal(tensor, fresh["model"][name]), name
    # needed: the running statistics training left behind are not the weights' own, and
    # evaluating with them costs loss. How much depends on the trajectory, which moves with the
    # CPU's numerics: stale / fresh eval loss was 1.06 to 2.10 over the reproducible mode and
    # five fast-mode configurations (instruction sets, threads; docs/reproducibility.md), and
    # accuracy -3 to +15 points, so the direction of the loss and the drift of the statistics
    # (34 to 210 times the recalibrated variance at the worst layer) are asserted, not a ratio
    stale_eval, fresh_eval = (read_metrics(runs[b]).row(-1, named=True) for b in (0, 4))
    assert stale_eval["eval_loss"] > fresh_eval["eval_loss"]
    variances = [
        (stale["model"][name], fresh["model"][name])
        for name in stale["model"]
        if name.endswith("running_var")
    ]
    drift = max(((s - f).abs() / f).max().item() for s, f in variances)
    assert drift > 0.1

    cfg = TrainSettings(**settings(tmp_path, width=0.25))
    model = models.build(cfg.model, cfg.num_classes, cfg.width, image_size=16)
    model.load_state_dict(fresh["model"])
    run_data = data.build(cfg.data, cfg.num_classes, cfg.seed, 128, 0, 1, 0, 0, False)
    correct, loss = 0, 0.0
    with torch.no_grad():
        for x, y in prefetch.DeviceBatches(run_data.eval, torch.device("cpu")):
            logits = model.train()(x)
            correct += (logits.argmax(1) == y).sum().item()
            loss += F.cross_entropy(logits, y, reduction="sum").item()
    # sufficient: the recalibrated statistics evaluate as the eval batches' own do. Over the
    # five numerics configurations above the losses differed by 0.4 to 5 % and the accuracies
    # by 0 to 3.9 points (256 images: 0.4 points each); the bounds are twice those
    assert fresh_eval["eval_loss"] == pytest.approx(loss / run_data.num_eval, rel=0.1)
    assert fresh_eval["eval_accuracy"] == pytest.approx(correct / run_data.num_eval, abs=0.08)


# ---------------------------------------------------------------------------------------------
# Checkpoints: exact resume, finished runs, non-finite loss
# ---------------------------------------------------------------------------------------------


def test_resume_after_sigkill_ends_with_the_uninterrupted_weights(tmp_path: Path) -> None:
    values = settings(
        tmp_path / "killed", iterations=80, checkpoint_every=10, eval_every=40, log_every=5
    )
    config = write_config(tmp_path / "killed.yaml", values)
    checkpoint = tmp_path / "killed" / RunFolder.CHECKPOINT
    process = subprocess.Popen(
        [sys.executable, "-m", "kit.train", "--config", str(config)],
        env=SUBPROCESS_ENV,
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not checkpoint.exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "no checkpoint within two minutes"
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed_at = torch.load(checkpoint, weights_only=True)["step"]
    assert 10 <= killed_at < 80 and not (tmp_path / "killed" / RunFolder.DONE).exists()

    resumed = train.train(TrainSettings(**values))
    uninterrupted = train.train(
        TrainSettings(
            **settings(
                tmp_path / "straight",
                iterations=80,
                checkpoint_every=10,
                eval_every=40,
                log_every=5,
            )
        )
    )
    a, b = final_state(resumed), final_state(uninterrupted)
    assert a["step"] == b["step"] == 80 and a["epoch"] == b["epoch"]
    assert len(provenance.read(tmp_path / "killed" / RunFolder.PROVENANCE)) == 2  # start + resume
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    metrics_a, metrics_b = read_metrics(resumed), read_metrics(uninterrupted)
    assert metrics_a["step"].to_list() == list(range(5, 81, 5))  # no rows twice
    assert metrics_a["loss"].to_list() == metrics_b["loss"].to_list()


def test_a_stop_between_logging_steps_checkpoints_within_the_check_interval(
    tmp_path: Path, monkeypatch
) -> None:
    """With a logging interval as long as the run (500 ImageNet steps take longer than torchrun
    and Slurm wait after their notice), a stop used to be read only at the next logging step.
    Now it is agreed every STOP_CHECK_EVERY steps: the run checkpoints there, with the unlogged
    part of its window, and the resumed run ends with the weights and the metrics rows of an
    uninterrupted one."""
    values = settings(
        tmp_path / "stopped", iterations=60, log_every=50, checkpoint_every=60, eval_every=60
    )
    real_step, taken = Replica.step, []

    def step_then_signal(self, images, labels):
        real_step(self, images, labels)
        taken.append(1)
        if len(taken) == 27:  # between logging steps 0 and 50
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Replica, "step", step_then_signal)
    with pytest.raises(train.Preempted, match="stopped by a preemption signal at step 40"):
        train.train(TrainSettings(**values))
    monkeypatch.setattr(Replica, "step", real_step)
    assert torch.load(tmp_path / "stopped" / RunFolder.CHECKPOINT, weights_only=True)["step"] == 40
    resumed = train.train(TrainSettings(**values))
    straight = train.train(TrainSettings(**values | {"output_dir": str(tmp_path / "straight")}))
    a, b = final_state(resumed), final_state(straight)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    rows_a, rows_b = read_metrics(resumed), read_metrics(straight)
    assert rows_a["step"].to_list() == rows_b["step"].to_list() == [50, 60]
    assert rows_a["loss"].to_list() == rows_b["loss"].to_list()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _two_rank_stop(rank: int, values: dict, port: int, stops: dict) -> None:
    """One rank of a two-rank gloo group; rank 1 alone is signalled after its 27th step."""
    os.environ.update(
        {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
        | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    )
    torch.set_num_threads(1)
    real_step, taken = Replica.step, []

    def step_then_signal(self, images, labels):
        real_step(self, images, labels)
        taken.append(1)
        if rank == 1 and len(taken) == 27:
            os.kill(os.getpid(), signal.SIGTERM)

    Replica.step = step_then_signal
    try:
        train.train(TrainSettings(**values))
    except train.Preempted as stopped:
        stops[rank] = str(stopped)


def test_a_stop_on_one_gloo_rank_stops_every_rank_between_logging_steps(tmp_path: Path) -> None:
    """The ranks agree on a stop every STOP_CHECK_EVERY steps: a signal that reached only rank 1
    stops rank 0 at the same step, after rank 0 has written the checkpoint."""
    values = settings(
        tmp_path / "run", iterations=60, log_every=50, checkpoint_every=60, eval_every=60
    )
    stops = torch.multiprocessing.Manager().dict()
    torch.multiprocessing.spawn(_two_rank_stop, args=(values, _free_port(), stops), nprocs=2)
    assert sorted(stops) == [0, 1], dict(stops)
    assert all("at step 40" in message for message in stops.values()), dict(stops)
    assert torch.load(tmp_path / "run" / RunFolder.CHECKPOINT, weights_only=True)["step"] == 40


def test_finished_run_is_not_trained_again(tmp_path: Path, capsys) -> None:
    cfg = TrainSettings(**settings(tmp_path / "run", iterations=6))
    out = train.train(cfg)
    stamp = (out / RunFolder.CHECKPOINT).stat().st_mtime_ns
    metrics = (out / RunFolder.METRICS).read_text()
    assert train.train(cfg) == out
    assert "not training again" in capsys.readouterr().out
    assert (out / RunFolder.CHECKPOINT).stat().st_mtime_ns == stamp
    assert (out / RunFolder.METRICS).read_text() == metrics
    with pytest.raises(ParameterError, match="different settings \\(iterations\\)"):
        train.train(cfg.model_copy(update={"iterations": 12}))


def test_non_finite_loss_stops_names_the_step_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Images of the second epoch are NaN: 256 images / 32 per batch = 8 steps per epoch."""
    read = data.Samples.__getitem__

    def poisoned(self, key):
        image, label = read(self, key)
        return (image * float("nan") if key[0] == 1 else image), label

    monkeypatch.setattr(data.Samples, "__getitem__", poisoned)
    cfg = TrainSettings(
        **settings(tmp_path / "run", iterations=30, checkpoint_every=4, log_every=5, eval_every=0)
    )
    with pytest.raises(NonFiniteLossError) as error:
        train.train(cfg)
    message = str(error.value)
    assert "non-finite at step 9" in message and "last good checkpoint (step 8)" in message
    kept = final_state(tmp_path / "run")
    assert kept["step"] == 8
    assert all(torch.isfinite(t).all() for t in kept["model"].values() if t.is_floating_point())
    assert not (tmp_path / "run" / RunFolder.DONE).exists()


def test_non_finite_batchnorm_statistics_are_never_saved_as_good(tmp_path: Path) -> None:
    """At lr 1e3 the loss is still finite at step 6 but the recalibrated BN variances are not."""
    cfg = TrainSettings(
        **settings(
            tmp_path / "run", lr=1e3, iterations=30, checkpoint_every=2, log_every=2, eval_every=0
        )
    )
    with pytest.raises(NonFiniteLossError, match="non-finite") as error:
        train.train(cfg)
    kept = final_state(tmp_path / "run")
    assert f"last good checkpoint (step {kept['step']})" in str(error.value)
    assert not models.non_finite(kept["model"])  # running_var included


def test_an_update_overflowing_the_optimizer_is_said_as_a_non_finite_loss(
    tmp_path: Path,
) -> None:
    """At lr 1e300 schedule-free AdamW's weighting (lr ** 2, in Python floats) overflows: the
    run stops as on a non-finite loss, naming the step and what it kept, not an OverflowError."""
    cfg = TrainSettings(
        **settings(
            tmp_path / "run", lr=1e300, iterations=12, checkpoint_every=2, log_every=2, eval_every=0
        )
    )
    with pytest.raises(NonFiniteLossError) as error:
        train.train(cfg)
    assert str(error.value) == (
        f"{tmp_path / 'run'}: the training loss (or the optimizer's update) became non-finite "
        "at step 1; training stopped and no checkpoint had been written yet"
    )


def damaged_run(tmp_path: Path) -> tuple[TrainSettings, Path]:
    """An unfinished run with a checkpoint at step 6 of 12."""
    cfg = TrainSettings(**settings(tmp_path / "run", iterations=6, eval_every=0))
    out = train.train(cfg)
    (out / RunFolder.DONE).unlink()
    return cfg.model_copy(update={"iterations": 12}), out


def test_a_changed_checkpoint_is_refused_on_resume_naming_it(tmp_path: Path) -> None:
    cfg, out = damaged_run(tmp_path)
    checkpoint = out / RunFolder.CHECKPOINT
    content = bytearray(checkpoint.read_bytes())
    content[len(content) // 2 : len(content) // 2 + 4096] = os.urandom(4096)  # same size
    checkpoint.write_bytes(bytes(content))
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump()))
    with pytest.raises(models.CheckpointError) as error:
        train.train(cfg)
    assert str(error.value).startswith(f"{checkpoint}: content differs from the hash")
    assert "to train this run again from the start" in str(error.value)


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, "half"])
def test_an_unreadable_checkpoint_is_refused_naming_it(tmp_path: Path, content) -> None:
    cfg, out = damaged_run(tmp_path)
    checkpoint = out / RunFolder.CHECKPOINT
    whole = checkpoint.read_bytes()
    checkpoint.write_bytes(whole[: len(whole) // 2] if content == "half" else content)
    checkpoint.with_name(checkpoint.name + ".sha256").unlink(missing_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump()))
    with pytest.raises(models.CheckpointError, match=f"^{checkpoint}: not a readable PyTorch"):
        train.train(cfg)


def test_resume_drops_a_torn_metrics_line_and_stale_temporary_files(tmp_path: Path) -> None:
    cfg, out = damaged_run(tmp_path)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump()))
    with (out / RunFolder.METRICS).open("a") as handle:
        handle.write('{"step": 9, "epoch": 1, "lo')  # killed mid-write
    stale = out / ".checkpoint.pt.4194305.tmp"  # above Linux's largest pid: never alive
    live = out / f".checkpoint.pt.{os.getppid()}.tmp"  # a live process writing
    stale.write_bytes(b"x" * 100)
    live.write_bytes(b"x")
    train.train(cfg)
    assert read_metrics(out)["step"].to_list() == [3, 6, 9, 12]
    assert not stale.exists() and live.exists()


def test_an_unwritable_output_dir_is_refused_before_training(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ParameterError, match=f"{tmp_path / 'a_file'}: not a folder.*output_dir"):
        train.train(TrainSettings(**settings(tmp_path / "a_file" / "run")))


def test_command_line_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    values = settings(
        tmp_path / "run",
        data={"kind": "imagefolder", "root": str(tmp_path / "no"), "image_size": 16},
    )
    config = write_config(tmp_path / "run.yaml", values)
    result = subprocess.run(
        [sys.executable, "-m", "kit.train", "--config", str(config)],
        env=SUBPROCESS_ENV,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert f"error: {tmp_path / 'no'}: data folder does not exist" in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------
# Distributed data parallel, two processes on CPU
# ---------------------------------------------------------------------------------------------


def train_on_two_ranks(config: Path) -> None:
    """`python -m kit.train --config config` under torchrun with two processes (gloo)."""
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
        + ["-m", "kit.train", "--config", str(config)],
        env=SUBPROCESS_ENV,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_two_process_ddp_matches_one_process_with_the_same_global_batch(tmp_path: Path) -> None:
    values = settings(tmp_path / "ddp", iterations=24, log_every=3, trackers=["tensorboard"])
    config = write_config(tmp_path / "ddp.yaml", values)
    train_on_two_ranks(config)
    # the trainer broadcasts rank 0's final state and raises if any rank differs bit for bit
    assert yaml.safe_load((tmp_path / "ddp" / RunFolder.DONE).read_text()) == {
        "step": 24,
        "ranks": 2,
    }
    assert len(list((tmp_path / "ddp").glob("events.out.tfevents.*"))) == 1  # rank 0 only
    single = train.train(TrainSettings(**settings(tmp_path / "single", iterations=24, log_every=3)))
    ddp_loss = read_metrics(tmp_path / "ddp")["loss"].to_list()
    single_loss = read_metrics(single)["loss"].to_list()
    assert len(ddp_loss) == len(single_loss) == 8
    # same images per step; only BatchNorm sees 16 instead of 32 images per batch
    assert ddp_loss == pytest.approx(single_loss, rel=0.05)
    assert ddp_loss[-1] < ddp_loss[0] - 0.1


def test_micro_batches_make_one_process_match_two_processes(tmp_path: Path) -> None:
    """1 process x 2 micro-batches of 16 and 2 processes x 1 micro-batch of 16: the same BN
    groups of the same images, the same averaged gradients, so the same losses."""
    short = dict(
        iterations=12, log_every=2, eval_every=0, checkpoint_every=0, bn_recalibration_batches=1
    )
    config = write_config(tmp_path / "ddp.yaml", settings(tmp_path / "ddp", **short))
    train_on_two_ranks(config)
    micro = train.train(TrainSettings(**settings(tmp_path / "micro", micro_batch=16, **short)))
    whole = train.train(TrainSettings(**settings(tmp_path / "whole", **short)))
    ddp_loss = read_metrics(tmp_path / "ddp")["loss"].to_list()
    micro_loss = read_metrics(micro)["loss"].to_list()
    assert len(ddp_loss) == 6
    assert micro_loss == pytest.approx(ddp_loss, rel=1e-6, abs=1e-6)
    # BN over 16 images is not BN over 32: the whole-batch run differs at this precision
    assert read_metrics(whole)["loss"].to_list() != pytest.approx(ddp_loss, rel=1e-4)


def _train_on_ranks(settings: TrainSettings, ranks: int, monkeypatch) -> Path:
    """One run as rank 0 of `ranks` without a process group: the run folder's lock, whose
    refusal the ranks share through the group, is taken for granted."""
    monkeypatch.setattr(
        run_folder, "holding_run_folder", lambda out, process: contextlib.nullcontext()
    )
    return train.train_run(
        settings=settings,
        process=distributed.Process(0, ranks, torch.device("cpu")),
        stop=train.StopFlag(),
        watchdog=Watchdog(enabled=False),
    )


def test_micro_batch_must_divide_the_per_rank_batch(tmp_path: Path, monkeypatch) -> None:
    path = write_config(tmp_path / "run.yaml", settings(tmp_path / "run", micro_batch=12))
    with pytest.raises(
        ParameterError, match=f"{path}: .*micro_batch.*12 does not divide batch_size 32"
    ):
        load_train_settings(path)
    cfg = TrainSettings(**settings(tmp_path / "run", micro_batch=16))
    with pytest.raises(
        ParameterError,
        match="micro_batch: batch_size 32 is not divisible by 4 ranks x micro_batch 16",
    ):
        _train_on_ranks(cfg, 4, monkeypatch)


# ---------------------------------------------------------------------------------------------
# Time-concat plans
# ---------------------------------------------------------------------------------------------


def test_time_concat_plan_splits_the_budget_and_names_folders(tmp_path: Path) -> None:
    runs = budget.split(4, [2, 550, 23, 477, 8529], tmp_path, total=400_000)
    assert [r.iterations for r in runs] == [100_000] * 4
    assert [r.output_dir for r in runs] == [
        tmp_path / "cat4" / f"seed{s}" for s in (2, 550, 23, 477)
    ]
    paper = budget.split(5, [2, 550, 23, 477, 8529], tmp_path, total=400_000, iterations=80_000)
    assert {r.iterations for r in paper} == {80_000}
    with pytest.raises(ParameterError, match="do not split into 3 equal runs"):
        budget.split(3, [1, 2, 3], tmp_path, total=400_000)
    with pytest.raises(ParameterError, match="exceed the total"):
        budget.split(2, [1, 2], tmp_path, total=400_000, iterations=250_000)
    with pytest.raises(ParameterError, match="distinct seeds"):
        budget.split(2, [1, 1], tmp_path, total=10)
    base = TrainSettings(**settings(tmp_path))
    cfg = plan.configure(runs[1], base)
    assert (cfg.seed, cfg.iterations, cfg.output_dir) == (550, 100_000, str(runs[1].output_dir))


def test_launch_run_inline_trains_each_run_once(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "base.yaml", settings(tmp_path / "plan", checkpoint_every=0, eval_every=0)
    )
    arguments = [
        "launch",
        "run",
        "--config",
        str(config),
        "--runs",
        "2",
        "--total",
        "8",
        "--out",
        str(tmp_path / "work"),
        "--launch",
        "backend=inline",
        "--seeds",
        "5",
        "6",
    ]
    assert kit_main(arguments) == 0
    first = {s: final_state(tmp_path / "plan" / "cat2" / f"seed{s}") for s in (5, 6)}
    assert {s: state["step"] for s, state in first.items()} == {5: 4, 6: 4}
    assert not torch.equal(first[5]["model"]["fc.weight"], first[6]["model"]["fc.weight"])
    assert kit_main(arguments) == 0  # both finished: nothing trains
    assert kit_main(arguments[:-3] + ["--seeds", "5"]) == 2


def test_the_trainer_refuses_no_bn_recalibration_on_several_ranks(
    tmp_path: Path, monkeypatch
) -> None:
    cfg = TrainSettings(**settings(tmp_path / "out", bn_recalibration_batches=0))
    with pytest.raises(ParameterError, match="^bn_recalibration_batches: 0 with 2 ranks"):
        _train_on_ranks(cfg, 2, monkeypatch)


# ---------------------------------------------------------------------------------------------
# The watchdog
# ---------------------------------------------------------------------------------------------


def test_the_watchdog_ends_a_rank_without_progress_naming_the_run_and_what_it_waited_in(
    tmp_path: Path, capsys
) -> None:
    """A rank waiting for a hung peer sat out the 30-minute group timeout; the watchdog ends it
    after stall_timeout_s, except before the first beat of a compiling run and when disabled."""
    from kit.train import watchdog as watch

    def run(enabled: bool, arm_first: bool) -> list[int]:
        exits: list[int] = []
        dog = watch.Watchdog(
            enabled=enabled, exit_process=exits.append, end_children=lambda: None
        )  # this process's children are pytest's
        with dog.watching(tmp_path / "run", 1, 0.3, armed=arm_first):
            dog.beat("at step 1 (its batch, forward and backward)", arm=arm_first)
            time.sleep(1.0)
            if not arm_first:  # the compiling step is over: watched from the next beat
                assert not exits
                dog.beat("exchanging the loss at step 1")
                dog.fired.wait(5)
        return exits

    assert run(enabled=False, arm_first=True) == []
    assert run(enabled=True, arm_first=True) == [watch.STALLED_EXIT]
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {tmp_path / 'run'}: rank 1 made no progress for 0 s while at "
        "step 1 (its batch, forward and backward) (stall_timeout_s)"
    )
    assert run(enabled=True, arm_first=False) == [watch.STALLED_EXIT]
    assert "while exchanging the loss at step 1" in capsys.readouterr().err


def test_a_chain_of_compiled_runs_stays_within_dynamo_s_recompile_limit() -> None:
    """A process trains a chain of runs, each a new model through the same code: were dynamo to
    guard on the module object, every run would count as a recompilation and, past its cache
    limit (8), run uncompiled. It does not: models of one shape share one graph, their weights
    being the graph's inputs."""
    compiled: list[int] = []

    def counting(graph: torch.fx.GraphModule, inputs: list) -> object:
        compiled.append(1)
        return graph.forward

    torch._dynamo.reset()
    images = torch.randn(2, 3, 16, 16)
    for _ in range(torch._dynamo.config.recompile_limit + 3):
        torch.compile(models.build("resnet10", 4, 0.125), backend=counting)(images)
    assert len(compiled) == 1
