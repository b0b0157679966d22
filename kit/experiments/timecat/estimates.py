"""What a time-concat plan costs before it is submitted: the images each step processes, its
expected wall time on the launch's GPUs, and the disk its checkpoints and feature cache take.

Expected training rates per GPU come from kit.train.rates (with their sources).

- Inference (feature extraction, the faithful probe's frozen backbones): three times the
  training rate, a forward pass being about a third of a training step's arithmetic.

Other widths and image sizes scale the GPU's work by width² x (size / 224)². Images read from
files are decoded and cropped on CPU cores by the loader workers, at LOADER_RATE images per
second per worker (an estimate: libjpeg-turbo decodes a typical ImageNet JPEG in 2 to 3 ms on
one core): a step runs at the slower of its GPUs and its loaders.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kit import models
from kit.core import machine
from kit.data import kinds
from kit.data.settings import DataSettings
from kit.experiments.timecat.planning import plan, runs_dir
from kit.experiments.timecat.settings import TimecatSettings
from kit.train.rates import EXPECTED_TRAIN_RATES
from kit.train.settings import replica_problem

#: ResNet-50 training images per second per GPU at 224 px, bf16 (kit.train.rates), by --gpu name
TRAIN_RATES = {name.lower(): rate for name, (rate, _) in EXPECTED_TRAIN_RATES.items()}
#: inference runs this many times faster than training
INFERENCE_SPEEDUP = 3.0
#: images decoded and cropped per second by one loader worker (one CPU core)
LOADER_RATE = 350.0
#: copies of the weights a checkpoint holds: the model and the optimizer's two states
CHECKPOINT_COPIES = 3
FEATURE_BYTES = {"float16": 2, "float32": 4}


@dataclass(frozen=True)
class StepEstimate:
    """One step of the plan: images it processes, its wall time and the disk it writes."""

    step: str
    images: int
    hours: float | None  # None on CPU: not estimated
    disk_bytes: int


@functools.cache
def _network(arch: str, num_classes: int, width: float) -> tuple[int, int]:
    """The feature width and the bytes of the weights (and buffers) of a network."""
    with torch.device("meta"):
        network = models.build(arch, num_classes, width)
    weights = sum(t.numel() * t.element_size() for t in network.state_dict().values())
    return network.feature_dim, weights


def _rate(
    gpu: str | None, ranks: int, cost: float, workers: int, data: DataSettings, train: bool
) -> float | None:
    """Images per second of `ranks` GPUs fed by `workers` loader workers each."""
    if gpu is None:
        return None
    rate = ranks * TRAIN_RATES[gpu] * (1.0 if train else INFERENCE_SPEEDUP) / cost
    if kinds.get(data.kind).reads_disk:
        rate = min(rate, ranks * max(workers, 1) * LOADER_RATE)
    return rate


def _cost(width: float, image_size: int) -> float:
    return width**2 * (image_size / 224) ** 2


def _hours(images: float, rate: float | None) -> float | None:
    return None if rate is None else images / rate / 3600


def _training(params: TimecatSettings, gpu: str | None) -> StepEstimate:
    runs = plan(params).trainings
    settings = params.launch
    concurrent = (
        settings.max_concurrent or len(runs) if settings.backend == "slurm" else settings.workers
    )
    ranks = settings.nproc_per_node * settings.nodes
    images = hours = disk = 0
    for run in runs:
        images += run.iterations * run.batch_size
        rate = _rate(
            gpu, ranks, _cost(run.width, run.data.image_size), run.num_workers, run.data, True
        )
        hours = None if rate is None else hours + _hours(run.iterations * run.batch_size, rate)
        disk += CHECKPOINT_COPIES * _network(run.model, run.num_classes, run.width)[1]
    return StepEstimate(
        "train", images, None if hours is None else hours / max(concurrent, 1), disk
    )


def task_rows(params: TimecatSettings) -> dict[str, tuple[int, int]]:
    """Each task's training rows (probe_train_rows at most) and evaluation rows, as expected."""
    rows = {}
    for task in params.tasks:
        data = params.task_data(task)[0]
        sizes = kinds.get(data.kind).expected_sizes(data) or (0, 0)
        train = min(sizes[0], params.probe_train_rows or sizes[0])
        rows[task.name] = (train, sizes[1])
    return rows


def _representations(params: TimecatSettings) -> tuple[str, float, list[tuple[int, int]]]:
    """The backbones' architecture and cost, and each representation's (models, feature
    width); given checkpoints are read as the train section's architecture (ResNet-50)."""
    arch = params.train.model if params.train else "resnet50"
    base = params.train.width if params.train else 1.0
    size = params.train.data.image_size if params.train else 224
    found = [
        (rep.n, rep.n * _network(arch, 1000, base * rep.width)[0])
        for rep in plan(params).representations
    ]
    return arch, _cost(base, size), found


def _extraction(params: TimecatSettings, gpu: str | None) -> StepEstimate:
    """Every checkpoint's features on every task (images decoded once per pass), and the
    concatenated entries of representations of several models."""
    _, cost, representations = _representations(params)
    checkpoints = sum(n for n, _ in representations)
    entry_width = sum(width for _, width in representations) + sum(
        width for n, width in representations if n > 1
    )
    ranks = params.launch.nproc_per_node * params.launch.nodes
    images = hours = disk = 0
    for task in params.tasks:
        data, rows = params.task_data(task)[0], sum(task_rows(params)[task.name])
        images += rows * checkpoints
        rate = _rate(gpu, ranks, cost * checkpoints, params.feature_workers, data, False)
        hours = None if rate is None else hours + _hours(rows, rate)
        disk += rows * entry_width * FEATURE_BYTES[params.feature_dtype]
    return StepEstimate("extract", images, hours, disk)


def _probing(params: TimecatSettings, gpu: str | None) -> StepEstimate:
    """The faithful probe reads images every epoch through the frozen backbones, each probe on
    its target's processes (`faithful.setups`); the fast probe reads cached features (minutes,
    not estimated)."""
    if params.probe_kind != "faithful" or params.faithful is None:
        return StepEstimate("probe", 0, None if gpu is None else 0.0, 0)
    _, cost, representations = _representations(params)
    faithful = params.faithful
    images = hours = 0
    for task in params.tasks:
        data, (rows, _) = params.task_data(task)[0], task_rows(params)[task.name]
        for n, _width in representations:
            own = faithful.for_probe(kinds.get(data.kind).probe_grid, n > 1)
            images += faithful.epochs * rows * n
            rate = _rate(gpu, own.processes, cost * n, faithful.workers, data, False)
            hours = None if rate is None else hours + _hours(faithful.epochs * rows, rate)
    return StepEstimate("probe", images, hours, 0)


def estimate(params: TimecatSettings, gpu: str | None) -> list[StepEstimate]:
    """The plan's steps, estimated for `gpu` (a key of TRAIN_RATES; None: no wall times)."""
    return [_training(params, gpu), _extraction(params, gpu), _probing(params, gpu)]


def describe(estimates: list[StepEstimate], gpu: str | None) -> str:
    """The estimates as a table, with the total, for the plan's output."""
    where = f"on {gpu.upper()} GPUs" if gpu else "(on CPU: wall times not estimated)"
    lines = [
        f"expected cost {where}, from the rates in kit/experiments/timecat/estimates.py:",
        f"  {'step':<8}{'images':>16}{'wall time':>12}{'disk':>12}",
    ]
    for row in [
        *estimates,
        StepEstimate(
            "total",
            sum(e.images for e in estimates),
            None
            if any(e.hours is None for e in estimates)
            else sum(e.hours or 0.0 for e in estimates),
            sum(e.disk_bytes for e in estimates),
        ),
    ]:
        hours = "-" if row.hours is None else f"{row.hours:.1f} h"
        lines.append(f"  {row.step:<8}{row.images:>16,}{hours:>12}{row.disk_bytes / 1e9:>9.1f} GB")
    return "\n".join(lines)


def replica_problems(params: TimecatSettings) -> list[str]:
    """Settings the plan's trainings cannot finish with on the launch's ranks (`kit check`):
    `train.bn_recalibration_batches: 0` on more than one process."""
    train, launch = params.train, params.launch
    if train is None or not plan(params).trainings:
        return []
    problem = replica_problem(train.bn_recalibration_batches, launch.nproc_per_node * launch.nodes)
    return [f"train.{problem}"] if problem else []


def machine_problems(params: TimecatSettings) -> list[str]:
    """This machine against the plan (`kit check`): free disk under run_root for its checkpoints
    and feature cache; and where the launch runs here (not slurm), CUDA and a GPU per process,
    the compiler for `compile`, and /dev/shm for the training loaders."""
    needed = sum(step.disk_bytes for step in estimate(params, None))
    problems = machine.disk_problems(
        runs_dir(params), needed, "the plan's checkpoints and feature cache"
    )
    launch, train = params.launch, params.train
    if launch.backend == "slurm":
        return problems  # the compute nodes check themselves when the processes start
    if "cuda" in (params.device, train.device if train else None):
        problems += machine.cuda_problems(launch.nproc_per_node * launch.workers)
    if train is not None and plan(params).trainings:
        if train.compile:
            problems += machine.compiler_problems("train.compile")
        batch = train.micro_batch or train.batch_size // launch.nproc_per_node
        problems += machine.shm_problems(
            machine.loader_shared_memory(
                launch.nproc_per_node * launch.workers,
                train.num_workers,
                batch,
                train.data.image_size,
                kinds.get(train.data.kind).held_bytes(train.data),
            )
        )
    return problems
