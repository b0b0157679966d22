"""The measurements of `python -m kit selfcheck` (kit.cli.selfcheck), one function per check.

Each returns rows of the report and raises CheckFailed, naming what went wrong, where a result
is wrong (not merely slow). Sizes come from `Sizes`: ResNet-50 at 224 px on a GPU node, a tiny
network on small images for the CPU subset.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import schedulefree
import torch
import yaml
from torch import nn

from kit import models
from kit.core.distributed import Process
from kit.core.processes import PREEMPTED_EXIT
from kit.data.kinds.images import open_image
from kit.data.pipeline import augmentation
from kit.probes.fast import fast_probe
from kit.probes.rows import Split
from kit.probes.settings import FastProbeSettings
from kit.train.checkpoint import CHECKPOINT
from kit.train.metrics import METRICS, read_metrics
from kit.train.settings import TrainSettings
from kit.train.step import Replica

#: bf16 features may differ from fp32 ones by this relative L2 error (a sound autocast errs far
#: less, as the check's measured column shows; a broken autocast or kernel errs by order one)
BF16_TOLERANCE = 0.05
#: the fast probe must reach this held-out top-1 on planted, linearly separable features
PROBE_FLOOR = 0.9
#: seconds the preempted run may take to start, checkpoint and exit
TRAIN_TIMEOUT = 600


class CheckFailed(RuntimeError):
    """A check whose result is wrong; the message says what and why."""


@dataclass(frozen=True)
class Sizes:
    """How large each measurement is."""

    model: str
    width: float
    image_size: int
    batch: int
    steps: int
    jpegs: int
    probe_rows: int
    probe_dim: int
    #: iterations of the preempted run (enough that it is still training when the signal comes)
    train_steps: int


GPU_SIZES = Sizes("resnet50", 1.0, 224, 256, 30, 200, 50_000, 2048, 3000)
CPU_SIZES = Sizes("resnet10", 0.25, 64, 16, 3, 24, 3000, 64, 30)


@dataclass
class Row:
    """One line of the report: what was checked, the figure measured, what it is compared with,
    and the verdict (ok, warn, FAIL, info, skip)."""

    check: str
    measured: str
    against: str
    status: str
    note: str = ""


def _timed(step: Callable[[], None], steps: int, device: torch.device) -> float:
    """Seconds per call of `step` after two warm-up calls (compilation, cuDNN autotuning)."""
    for _ in range(2):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / steps


def _batch(sizes: Sizes, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(sizes.batch, 3, sizes.image_size, sizes.image_size, generator=generator)
    labels = torch.randint(0, 1000, (sizes.batch,), generator=generator)
    return (images.to(device).contiguous(memory_format=torch.channels_last), labels.to(device))


def bare_rate(sizes: Sizes, device: torch.device) -> float:
    """Images/s of a bare loop: the same network and optimizer, channels-last, bf16 autocast on
    CUDA (float32 on the CPU, as the kit's `precision: auto`), none of the kit's machinery
    (micro-batches, loss window, schedule bookkeeping)."""
    model = models.build(sizes.model, 1000, sizes.width, image_size=sizes.image_size).to(
        device, memory_format=torch.channels_last
    )
    optimizer = schedulefree.AdamWScheduleFree(model.parameters(), lr=1e-3)
    optimizer.train()
    images, labels = _batch(sizes, device)
    loss_of = nn.CrossEntropyLoss()

    def step() -> None:
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            loss = loss_of(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return sizes.batch / _timed(step, sizes.steps, device)


def trainer_rate(sizes: Sizes, device: torch.device, compiled: bool, folder: Path) -> float:
    """Images/s of the kit's training step (`kit.train.step.Replica`), bf16 on CUDA."""
    settings = TrainSettings.model_validate(
        {
            "model": sizes.model,
            "width": sizes.width,
            "num_classes": 1000,
            "data": {"kind": "synthetic", "image_size": sizes.image_size, "synthetic": _world()},
            "batch_size": sizes.batch,
            "iterations": sizes.steps,
            "seed": 0,
            "output_dir": str(folder),
            "compile": compiled,
        }
    )
    trainer = Replica(settings=settings, process=Process(0, 1, device))
    images, labels = _batch(sizes, device)
    return sizes.batch / _timed(lambda: trainer.step(images, labels), sizes.steps, device)


def _world() -> dict:
    """A small synthetic world: the preempted run's data (no files to read)."""
    return {
        "num_train": 512,
        "num_eval": 64,
        "components": [{"weight": 1.0, "cues": ["colour"]}, {"weight": 1.0, "cues": ["position"]}],
    }


def _jpegs(folder: Path, count: int) -> list[str]:
    """`count` ImageNet-sized JPEGs (smooth random pictures, 500 x 375) written to `folder`."""
    from torchvision.io import encode_jpeg, write_file

    paths, generator = [], torch.Generator().manual_seed(0)
    for index in range(count):
        coarse = torch.rand(1, 3, 12, 16, generator=generator)
        picture = nn.functional.interpolate(coarse, size=(375, 500), mode="bicubic")
        noise = 0.05 * torch.randn(3, 375, 500, generator=generator)
        pixels = ((picture[0] + noise).clamp(0, 1) * 255).to(torch.uint8)
        path = folder / f"{index}.jpg"
        write_file(str(path), encode_jpeg(pixels, quality=90))
        paths.append(str(path))
    return paths


def decode_rate_per_core(sizes: Sizes, folder: Path) -> float:
    """Images/s one core decodes and augments (torchvision decode, RandomResizedCrop, flip):
    what one DataLoader worker delivers."""
    paths = _jpegs(folder, sizes.jpegs)
    transform = augmentation("algoperf", sizes.image_size, True, True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        for path in paths:
            transform(open_image(path))
        return len(paths) / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)


def feeding(per_core: float, cores: int, training: float) -> Row:
    """Whether `cores` cores decoding at `per_core` images/s each keep up with `training`
    images/s (all GPUs of the node)."""
    supply = per_core * cores
    enough = supply >= training
    note = (
        "the CPUs can feed training"
        if enough
        else f"the CPUs cannot feed the GPUs: about {training / per_core:.0f} free cores needed; "
        "set data.decode: gpu to decode JPEGs on the GPUs"
    )
    return Row(
        "input pipeline (CPU decode)",
        f"{per_core:,.0f} img/s/core x {cores} = {supply:,.0f} img/s",
        f"training {training:,.0f} img/s",
        "ok" if enough else "warn",
        note,
    )


def bf16_extraction(sizes: Sizes, device: torch.device) -> Row:
    """Features of one batch in bf16 autocast (as `kit.features` extracts) against float32."""
    torch.manual_seed(0)
    model = (
        models.build(sizes.model, 1000, sizes.width, image_size=sizes.image_size)
        .to(device, memory_format=torch.channels_last)
        .eval()
    )
    images, _ = _batch(sizes, device)
    with torch.no_grad():
        exact = model.features(images).float()
        with torch.autocast(device.type, torch.bfloat16):
            low = model.features(images).float()
    error = float((low - exact).norm() / exact.norm())
    if not error <= BF16_TOLERANCE:  # NaN fails too
        raise CheckFailed(
            f"bf16 features differ from float32 by {error:.3g} (relative L2), "
            f"more than {BF16_TOLERANCE}: bf16 extraction is broken on {device}"
        )
    return Row(
        "bf16 extraction vs fp32", f"relative error {error:.2e}", f"<= {BF16_TOLERANCE}", "ok"
    )


def probe_check(sizes: Sizes, device: str, devices: int) -> Row:
    """The fast probe on planted, linearly separable features, its heads over `devices`."""
    generator = torch.Generator().manual_seed(0)
    means = 0.5 * torch.randn(10, sizes.probe_dim, generator=generator)

    def split(rows: int, name: str) -> Split:
        labels = torch.randint(0, 10, (rows,), generator=generator)
        return Split(
            means[labels] + torch.randn(rows, sizes.probe_dim, generator=generator), labels, name
        )

    start = time.perf_counter()
    result = fast_probe(
        split(sizes.probe_rows, "train"),
        split(sizes.probe_rows // 5, "eval"),
        10,
        FastProbeSettings(epochs=2, device=device, devices=devices),
        progress=False,
    )
    seconds = time.perf_counter() - start
    top1 = result.top1("heldout")
    if not top1 >= PROBE_FLOOR:
        raise CheckFailed(
            f"the fast probe reached top-1 {top1:.3f} on separable features, "
            f"below {PROBE_FLOOR}: the probe is wrong on {device}"
        )
    return Row(
        "fast probe",
        f"top-1 {top1:.3f} in {seconds:.1f} s",
        f">= {PROBE_FLOOR}",
        "ok",
        f"{sizes.probe_rows:,} x {sizes.probe_dim} features on {devices} {device} device(s)",
    )


def preemption_resume(sizes: Sizes, device: str, folder: Path) -> Row:
    """`python -m kit.train` stopped by SIGUSR1 after its first logged step checkpoints and exits
    with PREEMPTED_EXIT; run again, it resumes there and finishes."""
    run, steps = folder / "run", sizes.train_steps
    config, log = folder / "run.yaml", folder / "run.log"
    config.write_text(
        yaml.safe_dump(
            {
                "model": "resnet10",
                "width": 0.125,
                "num_classes": 4,
                "seed": 0,
                "data": {"kind": "synthetic", "image_size": 16, "synthetic": _world()},
                "batch_size": 8,
                "iterations": steps,
                "log_every": 1,
                "eval_every": 0,
                "checkpoint_every": 0,
                "bn_recalibration_batches": 1,
                "num_workers": 0,
                "device": device,
                "output_dir": str(run),
            }
        )
    )
    command = [sys.executable, "-m", "kit.train", "--config", str(config)]
    with log.open("w") as output:  # a file, not a pipe: a full pipe would block the run
        first = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + TRAIN_TIMEOUT
        while not (run / METRICS).exists() or not (run / METRICS).read_text().strip():
            if first.poll() is not None or time.monotonic() > deadline:
                first.kill()
                first.wait()
                raise CheckFailed(f"the training run never logged a step: {log.read_text()[-500:]}")
            time.sleep(0.1)
        first.send_signal(signal.SIGUSR1)
        first.wait(timeout=TRAIN_TIMEOUT)
    if first.returncode != PREEMPTED_EXIT or not (run / CHECKPOINT).exists():
        raise CheckFailed(
            f"after SIGUSR1 the run exited {first.returncode} (expected "
            f"{PREEMPTED_EXIT} with {run / CHECKPOINT} written): "
            f"{log.read_text()[-500:]}"
        )
    stopped = cast(int, read_metrics(run)["step"].max())
    second = subprocess.run(
        command, capture_output=True, text=True, timeout=TRAIN_TIMEOUT, check=False
    )
    logged = read_metrics(run)["step"].to_list()
    if second.returncode != 0 or logged != list(range(1, steps + 1)):
        raise CheckFailed(
            f"the resumed run exited {second.returncode} with logged steps ending "
            f"{logged[-3:]} (expected one row per step up to {steps}): "
            f"{second.stderr[-500:]}"
        )
    return Row(
        "preemption and resume",
        f"stopped at step {stopped}, resumed to {steps}",
        f"exit {PREEMPTED_EXIT}, then 0",
        "ok",
        f"python -m kit.train on {device}",
    )


def scratch() -> tempfile.TemporaryDirectory:
    """A temporary folder for the checks' files, removed afterwards."""
    return tempfile.TemporaryDirectory(
        prefix="kit-selfcheck-", dir=os.environ.get("TMPDIR") or None
    )
