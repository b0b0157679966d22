"""A GPU node's worker runs training in the cluster's own PyTorch with only the kit's small
dependencies beside it: `python -m kit.train` and benchmarks/gpu_input.py import neither polars
(reading results) nor TorchCodec (whose library is built for one torch release: where it does
not load, torchvision's decoders of the same libraries decode, said once). Checked in
subprocesses where both packages are hidden: importing either fails, in every child process too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from kit.files.paths import REPO_ROOT

HIDDEN = ("polars", "torchcodec")


@pytest.fixture()
def lean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a process (and its children: loader workers, the fork server) in which
    importing polars or TorchCodec raises ImportError, as where they are not installed."""
    shadow = tmp_path / "hidden"
    for name in HIDDEN:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not installed here (hidden by the test)')\n"
        )
    path = os.pathsep.join([str(shadow), str(REPO_ROOT)])
    return os.environ | {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *command], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_the_hidden_packages_cannot_be_imported(lean_env: dict[str, str], tmp_path: Path) -> None:
    for name in HIDDEN:
        done = _run(["-c", f"import {name}"], lean_env, tmp_path)
        assert done.returncode == 1 and "hidden by the test" in done.stderr


def test_the_training_command_and_the_gpu_input_benchmark_start(
    lean_env: dict[str, str], tmp_path: Path
) -> None:
    for command in (
        ["-m", "kit.train", "--help"],
        [str(REPO_ROOT / "benchmarks/gpu_input.py"), "--help"],
    ):
        done = _run(command, lean_env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "usage:" in done.stdout


def _folder(root: Path) -> Path:
    """Two classes of 64-96 px JPEGs, a progressive one among the training files."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("val", 2)):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (64 + 4 * i, 96, 3), dtype=np.uint8)
                options = {"progressive": True} if (split, label, i) == ("train", "a", 3) else {}
                Image.fromarray(pixels).save(folder / f"{i}.JPEG", quality=90, **options)
    return root


def test_a_tiny_gpu_decode_run_trains_without_polars_or_torchcodec(
    lean_env: dict[str, str], tmp_path: Path
) -> None:
    """`data.decode: gpu` (the CUDA decoder's path, on the CPU here) with a loader worker: the run
    finishes, says once that torchvision's decoders stand in for TorchCodec's, and its metrics
    rows count the fallback images (the progressive JPEG, decoded by the worker, in some
    batches)."""
    out = tmp_path / "run"
    config = {
        "model": "resnet10",
        "width": 0.125,
        "num_classes": 2,
        "seed": 0,
        "data": {
            "kind": "imagefolder",
            "root": str(_folder(tmp_path / "data")),
            "image_size": 64,
            "decode": "gpu",
            "hardware_jpeg": False,  # the CUDA decoder's path: TorchCodec's, or torchvision's
        },
        "batch_size": 4,
        "iterations": 8,
        "log_every": 2,
        "eval_every": 8,
        "checkpoint_every": 8,
        "bn_recalibration_batches": 1,
        "num_workers": 1,
        "output_dir": str(out),
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    done = _run(["-m", "kit.train", "--config", str(tmp_path / "run.yaml")], lean_env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("TorchCodec's image decoders do not load") == 1
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [2, 4, 6, 8]
    fallbacks = [row["decode_fallbacks"] for row in rows]
    assert all(isinstance(count, int) and count >= 0 for count in fallbacks)
    assert sum(fallbacks) >= 1  # the progressive file, in the first of 2 epochs at least
    assert (out / "DONE").exists()
