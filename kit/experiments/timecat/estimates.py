"""What a time-concat plan costs before it is submitted: the images each step processes, its
expected wall time on the launch's GPUs, and the disk its checkpoints and feature cache take.

Expected training rates per GPU come from kit.train.rates (with their sources).

- Inference (feature extraction, the faithful probe's frozen backbones): three times the
  training rate, a forward pass being about a third of a training step's arithmetic.
- `train.compile`: the rate times kit.train.rates.COMPILE_SPEEDUP (measured on one H200).

Beside each step's images, `overheads` itemises what a run spends outside its steps: compiling,
evaluations, checkpoint and snapshot saves (BatchNorm recalibration, writing, hashing), the
loaders' refill at each epoch boundary, listing the dataset, and writing and hashing the
feature cache; the figures each item assumes are named with it.

Other widths and image sizes scale the GPU's work by width² x (size / 224)². Images read from
files are decoded and cropped by the training loader at the rate measured for its
`data.decode` path (kit.train.rates.INPUT_RATES; evaluation and extraction decode on the CPU
workers at the CPU path's rate per worker): a step runs at the slower of its GPUs and its
input, and `sources` says which bounds each step. The fast probe of cached features takes the
time kit.train.rates.fast_probe_seconds gives for the features it reads, its fits shared over
the node's GPUs (kit.probes.parallel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kit.architectures import ARCHITECTURES
from kit.data import kinds
from kit.data.settings import DataSettings
from kit.experiments.timecat.planning import features_dir, plan
from kit.experiments.timecat.settings import TimecatSettings
from kit.launch.runs import is_finished
from kit.probes.base import shared_gpus
from kit.readout.numbers import counted
from kit.train import rates
from kit.train.rates import EXPECTED_TRAIN_RATES
from kit.train.settings import TrainSettings


def train_rate(gpu: str) -> float:
    """ResNet-50 training images/s of one `gpu` (by --gpu name) at 224 px, bf16, eager: the
    rates table's figure, or the one a measured rates file replaced it with."""
    return EXPECTED_TRAIN_RATES[gpu.upper()][0]


#: inference runs this many times faster than training
INFERENCE_SPEEDUP = 3.0
#: copies of the weights a checkpoint holds: the model and the optimizer's two states
CHECKPOINT_COPIES = 3
FEATURE_BYTES = {"float16": 2, "float32": 4}
#: seconds `torch.compile` takes before a run's first step (an estimate for ResNet-50), counted
#: for every run: an upper bound, as the runs of one shape in a chain's process share one graph
#: (tests/test_train.py checks dynamo does not recompile per model)
COMPILE_S = 120.0
#: bytes per second a checkpoint or feature-cache write reaches (an estimate for a node's local
#: NVMe or a shared file system under load)
WRITE_RATE = 0.5e9
#: bytes per second SHA-256 hashes on one core (benchmarks/file_hash.py: 1 GB in 1.06 s)
HASH_RATE = 0.95e9
#: seconds to list a split of ImageNet's size (1.28M files) once per process (an estimate; a
#: shared file system can take several times longer)
SCAN_S = 120.0


@dataclass(frozen=True)
class Overhead:
    """Time a step spends outside processing its images, with what it assumes."""

    step: str
    item: str
    hours: float
    basis: str


@dataclass(frozen=True)
class StepEstimate:
    """One step of the plan: images it processes, its wall time and the disk it writes."""

    step: str
    images: int
    hours: float | None  # None on CPU: not estimated
    disk_bytes: int


def _network(arch: str, num_classes: int, width: float) -> tuple[int, int]:
    """The feature width and the bytes of the weights (and buffers) of a network as
    kit.models.build makes it for ImageNet's images, counted by its architecture without
    building it (so that `kit check` and `kit run` need no torch to say a plan's cost)."""
    sizes = ARCHITECTURES.get(arch).sizes(num_classes, width)
    return sizes.feature_dim, sizes.state_bytes


def _rate(
    gpu: str | None, ranks: int, cost: float, workers: int, data: DataSettings, train: bool
) -> float | None:
    """Images per second of `ranks` GPUs fed by `workers` loader workers each: training
    batches through `data.decode`'s path, evaluation and extraction through CPU workers."""
    if gpu is None:
        return None
    rate = ranks * train_rate(gpu) * (1.0 if train else INFERENCE_SPEEDUP) / cost
    if kinds.get(data.kind).reads_disk:
        fed = rates.input_rate(data.decode if train else "cpu", workers)[0]
        rate = min(rate, ranks * fed) if fed is not None else rate
    return rate


def _train_rate(run: TrainSettings, gpu: str | None, ranks: int) -> float | None:
    """Training images/s of a run on `ranks` GPUs: compiled where it compiles, at most what
    its loaders decode."""
    speedup = rates.COMPILE_SPEEDUP if run.compile else 1.0
    cost = _cost(run.width, run.data.image_size) / speedup
    return _rate(gpu, ranks, cost, run.num_workers, run.data, True)


def _cost(width: float, image_size: int) -> float:
    return width**2 * (image_size / 224) ** 2


def _hours(total: float | None, images: float, rate: float | None) -> float | None:
    """`total` hours plus those `images` take at `rate` images/s; None when either is unknown."""
    return None if total is None or rate is None else total + images / rate / 3600


def _training(params: TimecatSettings, gpu: str | None) -> StepEstimate:
    return _training_runs(plan(params).trainings, params, gpu)[0]


def _training_runs(
    runs: list[TrainSettings], params: TimecatSettings, gpu: str | None
) -> tuple[StepEstimate, float | None]:
    """The training step of `runs` (wall time on the launch's GPUs, runs side by side as the
    launch allows) and its GPU-hours; a snapshot weighs what the model alone does."""
    settings = params.launch
    concurrent = (
        settings.max_concurrent or len(runs) if settings.backend == "slurm" else settings.workers
    )
    ranks = settings.nproc_per_node * settings.nodes
    images = disk = 0
    hours: float | None = 0.0
    for run in runs:
        images += run.iterations * run.batch_size
        rate = _train_rate(run, gpu, ranks)
        hours = _hours(hours, run.iterations * run.batch_size, rate)
        weights = _network(run.model, run.num_classes, run.width)[1]
        disk += (CHECKPOINT_COPIES + len(run.snapshot_steps)) * weights
    wall = None if hours is None else hours / max(concurrent, 1)
    return StepEstimate("train", images, wall, disk), None if hours is None else hours * ranks


def designs(params: TimecatSettings, gpu: str | None) -> str:
    """The training of both designs of catN's models (`catn_models`), this profile's marked:
    runs, iterations, GPU-hours and wall time on the launch's GPUs."""
    where = f"{gpu.upper()} GPUs" if gpu else "CPU: times not estimated"
    lines = [
        f"catN's models, both designs (catn_models; {where}):",
        f"  {'design':<14}{'runs':>6}{'iterations':>14}{'GPU-hours':>12}{'wall time':>12}",
    ]
    for design in ("snapshots", "independent"):
        runs = plan(params.model_copy(update={"catn_models": design})).trainings
        step, gpu_hours = _training_runs(runs, params, gpu)
        mark = " (this profile)" if design == params.catn_models else ""
        lines.append(
            f"  {design:<14}{len(runs):>6}{sum(r.iterations for r in runs):>14,}"
            f"{'-' if gpu_hours is None else f'{gpu_hours:,.0f}':>12}"
            f"{'-' if step.hours is None else f'{step.hours:.1f} h':>12}{mark}"
        )
    return "\n".join(lines)


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
    images = disk = 0
    hours: float | None = 0.0
    for task in params.tasks:
        data, rows = params.task_data(task)[0], sum(task_rows(params)[task.name])
        images += rows * checkpoints
        rate = _rate(gpu, ranks, cost * checkpoints, params.feature_workers, data, False)
        hours = _hours(hours, rows, rate)
        disk += rows * entry_width * FEATURE_BYTES[params.feature_dtype]
    return StepEstimate("extract", images, hours, disk)


def _probing(params: TimecatSettings, gpu: str | None) -> StepEstimate:
    """A probe that reads images passes them through the frozen backbones (its
    `image_passes`: epochs, on each target's processes); a probe of cached features reads
    every representation's features (its `feature_passes`: epochs and heads) at the fast
    probe's measured rate on one GPU, its (task, representation) fits shared over the GPUs the
    step is given (`_probe_gpus`): the longer of their sum over the GPUs and the longest fit.
    `images` counts the images (or feature rows) read."""
    _, cost, representations = _representations(params)
    images, hours = 0, None if gpu is None else 0.0
    cached = params.probe.feature_passes()
    fits: list[float] = []
    for task in params.tasks:
        data, (rows, _) = params.task_data(task)[0], task_rows(params)[task.name]
        for n, width in representations:
            passes = params.probe.image_passes(data, n)
            if passes is not None:
                images += passes.epochs * rows * n
                rate = _rate(gpu, passes.processes, cost * n, passes.workers, data, False)
                hours = _hours(hours, passes.epochs * rows, rate)
            elif cached is not None:
                images += cached.epochs * rows
                size = rows * width * FEATURE_BYTES[params.feature_dtype]
                fits.append(rates.fast_probe_seconds(size, cached.epochs, cached.heads))
    if fits and hours is not None:
        hours += max(sum(fits) / _probe_gpus(params), max(fits)) / 3600
    return StepEstimate("probe", images, hours, 0)


def _probe_gpus(params: TimecatSettings) -> int:
    """The GPUs a probe of cached features is given (the launch's node, or its `devices`; one
    off CUDA), as the probe job asks for them (kit.experiments.timecat.jobs.step_settings)."""
    if params.device != "cuda":
        return 1
    return shared_gpus(params.probe, params.launch.gpus_per_node or params.launch.nproc_per_node)


def overheads(params: TimecatSettings, gpu: str | None) -> list[Overhead]:
    """What the steps spend besides their images (wall hours on the launch's GPUs, runs side
    by side as `_training_runs` counts them); empty on CPU, where nothing is estimated."""
    runs = plan(params).trainings
    if gpu is None or not runs:
        return []
    launch = params.launch
    ranks = launch.nproc_per_node * launch.nodes
    concurrent = max(
        launch.max_concurrent or len(runs) if launch.backend == "slurm" else launch.workers, 1
    )
    totals = {"compile": 0.0, "evaluate": 0.0, "save": 0.0, "epochs": 0.0}
    for run in runs:
        for item, seconds in _run_overheads(run, gpu, ranks).items():
            totals[item] += seconds / 3600 / concurrent
    weights = _network(runs[0].model, runs[0].num_classes, runs[0].width)[1]
    cache = _extraction(params, None).disk_bytes
    found = [
        Overhead(
            "train",
            "compile",
            totals["compile"],
            f"{COMPILE_S:.0f} s per run (estimate, an upper bound)",
        ),
        Overhead(
            "train",
            "evaluations",
            totals["evaluate"],
            "BatchNorm recalibration and the evaluation split at the inference rate",
        ),
        Overhead(
            "train",
            "checkpoints and snapshots",
            totals["save"],
            f"recalibration, then {weights / 1e6:,.0f} MB per copy of the weights written at "
            f"{WRITE_RATE / 1e9:.1f} GB/s and hashed at {HASH_RATE / 1e9:.2f} GB/s",
        ),
        Overhead(
            "train",
            "epoch boundaries",
            totals["epochs"],
            "each loader worker decodes a batch before the first step "
            f"({rates.loader_rate():.0f} img/s)",
        ),
    ]
    if kinds.get(runs[0].data.kind).reads_disk:
        found.append(
            Overhead("train", "listing the dataset", SCAN_S / 3600, "once per process (estimate)")
        )
    found.append(
        Overhead(
            "extract",
            "writing and hashing the cache",
            (cache / WRITE_RATE + 2 * cache / HASH_RATE) / 3600,
            f"{cache / 1e9:,.0f} GB written, hashed when recorded and at its first read",
        )
    )
    return found


def _every(interval: int, iterations: int) -> set[int]:
    """The steps a run does something every `interval` steps at (never for 0), and its last."""
    return set(range(interval, iterations + 1, interval) if interval else ()) | {iterations}


def _run_overheads(run: TrainSettings, gpu: str, ranks: int) -> dict[str, float]:
    """Seconds one run spends compiling, at evaluation points, saving and at epoch ends."""
    evaluations = _every(run.eval_every, run.iterations)
    saves = _every(run.checkpoint_every, run.iterations) | set(run.snapshot_steps)
    cost = _cost(run.width, run.data.image_size)
    inference = _rate(gpu, ranks, cost, run.num_workers, run.data, False) or 1.0
    train_rows, eval_rows = kinds.get(run.data.kind).expected_sizes(run.data) or (0, 0)
    recalibration = run.bn_recalibration_batches * run.batch_size / inference
    weights = _network(run.model, run.num_classes, run.width)[1]
    copies = CHECKPOINT_COPIES * (len(saves) - len(run.snapshot_steps)) + len(run.snapshot_steps)
    epochs = run.iterations * run.batch_size / train_rows if train_rows else 0.0
    reads_disk = kinds.get(run.data.kind).reads_disk
    return {
        "compile": COMPILE_S if run.compile else 0.0,
        "evaluate": len(evaluations) * (recalibration + eval_rows / inference),
        "save": len(saves - evaluations) * recalibration
        + copies * weights * (1 / WRITE_RATE + 1 / HASH_RATE),
        "epochs": epochs * (run.batch_size / ranks) / rates.loader_rate() if reads_disk else 0.0,
    }


def sources(params: TimecatSettings, gpu: str | None) -> str:
    """Where each step's rate comes from, and whether the GPU or the input bounds training."""
    if gpu is None:
        return ""
    step_rate, step_source = EXPECTED_TRAIN_RATES[gpu.upper()]
    lines = ["rates per GPU (ResNet-50, 224 px), and where they come from:"]
    lines.append(f"  - step     {step_rate:>7,.0f} img/s eager  {step_source}")
    if params.train is not None:
        run = params.train
        if run.compile:
            compiled = step_rate * rates.COMPILE_SPEEDUP
            lines.append(
                f"  - compiled {compiled:>7,.0f} img/s        x{rates.COMPILE_SPEEDUP:.2f}, "
                f"{rates.COMPILE_SOURCE}"
            )
        if kinds.get(run.data.kind).reads_disk:
            fed, source = rates.input_rate(run.data.decode, run.num_workers)
            step = (
                step_rate
                * (rates.COMPILE_SPEEDUP if run.compile else 1.0)
                / _cost(run.width, run.data.image_size)
            )
            bound = "the input" if fed is not None and fed < step else "the GPU"
            shown = "-" if fed is None else f"{fed:,.0f}"
            lines.append(
                f"  - input    {shown:>7} img/s        data.decode: {run.data.decode}, "
                f"{run.num_workers} workers; {source}"
            )
            lines.append(f"  - training is bound by {bound}")
            per_worker = rates.INPUT_RATES["cpu"].per_worker or 1.0
            lines.append(
                f"  - feeding the step takes {step:,.0f} img/s a GPU: "
                f"{math.ceil(step / per_worker)} CPU-decoding workers a GPU at the measured rate"
            )
    lines.append(
        f"  - extract  {INFERENCE_SPEEDUP:.0f} x the eager step (estimate: a forward pass is a "
        f"third of a step), at most {params.feature_workers} CPU workers' decoding"
    )
    probe_source = (
        rates.FAST_PROBE_SOURCE
        if params.probe.feature_passes() is not None
        else "images through the frozen backbones at the extraction rate"
    )
    if params.probe.feature_passes() is not None:
        probe_source += f"; its fits shared over {counted(_probe_gpus(params), 'GPU')}"
    lines.append(f"  - probe    {probe_source}")
    return "\n".join(lines)


def estimate(params: TimecatSettings, gpu: str | None) -> list[StepEstimate]:
    """The plan's steps, estimated for `gpu` (a GPU kit.train.rates knows; None: no wall
    times)."""
    return [_training(params, gpu), _extraction(params, gpu), _probing(params, gpu)]


def describe(
    estimates: list[StepEstimate], gpu: str | None, extra: list[Overhead] | None = None
) -> str:
    """The estimates as a table, each step followed by its overheads (what they assume beside
    them), with the total of both, for the plan's output."""
    extra = extra or []
    where = f"on {gpu.upper()} GPUs" if gpu else "(on CPU: wall times not estimated)"
    lines = [
        f"expected cost {where}, from the rates in kit/experiments/timecat/estimates.py:",
        f"  {'step':<8}{'images':>16}{'wall time':>12}{'disk':>12}",
    ]
    known = not any(e.hours is None for e in estimates)
    total = StepEstimate(
        "total",
        sum(e.images for e in estimates),
        sum(e.hours or 0.0 for e in estimates) + sum(o.hours for o in extra) if known else None,
        sum(e.disk_bytes for e in estimates),
    )
    for row in [*estimates, total]:
        hours = "-" if row.hours is None else f"{row.hours:.1f} h"
        lines.append(f"  {row.step:<8}{row.images:>16,}{hours:>12}{row.disk_bytes / 1e9:>9.1f} GB")
        lines += [
            f"    + {o.item:<30}{o.hours:>6.2f} h  {o.basis}" for o in extra if o.step == row.step
        ]
    return "\n".join(lines)


def left_to_write(params: TimecatSettings) -> tuple[int, int]:
    """The bytes the plan's checkpoints and feature cache still need (its unfinished training
    runs', and the cache's less what its folder holds: a cache shared with other plans lowers it
    by theirs), and the bytes already written, which a resumed run does not write again."""
    runs = plan(params).trainings
    left = [run for run in runs if not is_finished(run)]
    train, to_train = (_training_runs(some, params, None)[0].disk_bytes for some in (runs, left))
    cache = _extraction(params, None).disk_bytes
    held = sum(f.stat().st_size for f in features_dir(params).rglob("*") if f.is_file())
    return to_train + max(cache - held, 0), train - to_train + min(held, cache)
