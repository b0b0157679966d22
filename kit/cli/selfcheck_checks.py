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
from torch.utils.data import default_collate

from kit import models
from kit.data.fixtures import jpegs
from kit.data.kinds.images import ImageList
from kit.data.pipeline import training_collate, training_samples
from kit.data.settings import DALI_INSTALL, DataSettings, dali_installed
from kit.probes.fast import fast_probe
from kit.probes.rows import Split
from kit.probes.settings import FastProbeSettings
from kit.readout.numbers import counted
from kit.runtime.distributed import Process
from kit.runtime.processes import PREEMPTED_EXIT
from kit.train.metrics import read_metrics
from kit.train.run_files import RunFolder
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


#: the input paths `data.decode` names, in the order they are reported
INPUT_PATHS = ("cpu", "gpu", "dali")
#: timed passes per input path, the fastest kept, the paths taking turns: a pass that ran while
#: something else had the cores says nothing of the path (timeit's advice)
RATE_REPEATS = 5


def input_rates(sizes: Sizes, folder: Path, device: torch.device) -> dict[str, float | str]:
    """Images/s per CPU core of each input path that works here (`data.decode`), or why one
    does not: cpu, torchvision's decoder and RandomResizedCrop in the loader workers; gpu,
    torchvision's decoder on the GPU (kit.data.batched); dali, NVIDIA DALI's decoder, on the GPU
    where there is one (kit.data.dali)."""
    paths = jpegs(folder, sizes.jpegs)
    images = ImageList([(path, 0) for path in paths], ["picture"])
    rates: dict[str, float | str] = {}
    passes: dict[str, Callable[[], None]] = {}
    for decode in INPUT_PATHS:
        if decode == "gpu" and device.type != "cuda":
            rates[decode] = "needs a GPU"
        elif decode == "dali" and not dali_installed():
            rates[decode] = f"not installed: {DALI_INSTALL}"
        else:
            passes[decode] = _loader_pass(images, folder, sizes, device, decode)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds: dict[str, list[float]] = {decode: [] for decode in passes}
        for repeat in range(RATE_REPEATS + 1):
            for decode, one_pass in passes.items():
                start = time.perf_counter()
                one_pass()
                if repeat:  # the first builds DALI's pipeline, warms decoders and page cache
                    seconds[decode].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return {
        decode: len(images) / min(seconds[decode]) if decode in seconds else rates[decode]
        for decode in INPUT_PATHS
    }


def fastest(rates: dict[str, float | str]) -> str:
    """The input path with the most images per core among those that work."""
    working = {path: rate for path, rate in rates.items() if isinstance(rate, float)}
    return max(working, key=working.__getitem__)


def _loader_pass(
    images: ImageList, folder: Path, sizes: Sizes, device: torch.device, decode: str
) -> Callable[[], None]:
    """One batch of `images` read, decoded, cropped and flipped as the training loader does
    with `data.decode: decode` and made ready on `device`, on the calling thread (the workers'
    share and the decoding's together; DALI is given one thread)."""
    settings = DataSettings.model_validate(
        {
            "kind": "imagefolder",
            "root": str(folder),
            "image_size": sizes.image_size,
            "decode": decode,
        }
    )
    samples = training_samples(settings, images, seed=0)
    collate = training_collate(settings, threads=1) or default_collate

    def one_pass() -> None:
        packed = collate([samples[(0, index)] for index in range(len(images))])[0]
        if decode != "cpu":
            packed.on(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return one_pass


def feeding(rates: dict[str, float | str], cores: int, training: float) -> Row:
    """The input path that would be used (the fastest that works), and whether `cores` cores
    at its rate per core keep up with `training` images/s (all GPUs of the node)."""
    path = fastest(rates)
    per_core = cast(float, rates[path])
    supply = per_core * cores
    enough = supply >= training
    others = ", ".join(
        f"{name} {rate:,.0f}" if isinstance(rate, float) else f"{name} {rate}"
        for name, rate in rates.items()
        if name != path
    )
    note = f"data.decode: {path}, the fastest path here (img/s/core: {others}); " + (
        "the CPUs can feed training"
        if enough
        else f"the CPUs cannot feed the GPUs: about {training / per_core:.0f} free cores needed"
    )
    return Row(
        f"input pipeline ({path})",
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
        f"{sizes.probe_rows:,} x {sizes.probe_dim} features on "
        f"{counted(devices, device + ' device')}",
    )


def preemption_resume(sizes: Sizes, device: str, folder: Path) -> Row:
    """`python -m kit.train` stopped by SIGUSR1 after its first logged step checkpoints and exits
    with PREEMPTED_EXIT; run again, it resumes there and finishes."""
    run, steps = folder / "run", sizes.train_steps
    metrics, checkpoint = RunFolder(run).metrics, RunFolder(run).checkpoint
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
        while not metrics.exists() or not metrics.read_text().strip():
            if first.poll() is not None or time.monotonic() > deadline:
                first.kill()
                first.wait()
                raise CheckFailed(f"the training run never logged a step: {log.read_text()[-500:]}")
            time.sleep(0.1)
        first.send_signal(signal.SIGUSR1)
        first.wait(timeout=TRAIN_TIMEOUT)
    if first.returncode != PREEMPTED_EXIT or not checkpoint.exists():
        raise CheckFailed(
            f"after SIGUSR1 the run exited {first.returncode} (expected "
            f"{PREEMPTED_EXIT} with {checkpoint} written): "
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
