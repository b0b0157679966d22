"""What notebook 03's plan holds in this machine's memory at its peak, from every size-like
setting, so that `kit check` and `kit run` refuse a plan that would not fit before any process
starts, naming the key that costs most and the figure.

The plan's work on the CPU runs in two phases that do not overlap, each costed as a sum of
terms, each term the bytes one setting (or a pair of them) puts in memory:

- training: every training process (launch.workers x launch.nproc_per_node) with its Python
  and torch (PROCESS_BYTES), its step's activations (the batch per rank, image_size squared
  pixels, the width: TRAIN_PIXEL_BYTES a pixel at width 1), its loader workers (WORKER_BYTES
  and PREFETCH batches each), the images it renders and keeps (the synthetic world: 4 bytes a
  channel and pixel, at most the images the run sees) or holds (CIFAR's arrays);
- extraction and probing, in the notebook's kernel: `side_by_side` backbones each on a batch of
  `feature_batch_size` images (EXTRACT_PIXEL_BYTES a pixel at width 1), `feature_workers`
  loader workers, and the rows the probes index (the tasks' training rows: ROW_BYTES each).

The rows of the training data are indexed once a machine (ROW_BYTES a row: the samplers'
permutations, labels and class-balanced draws). The constants are rounded up from what `kit
run --profile ci` was measured to hold (1e8 rows: 9.3 GB; 1,024 feature workers:
10.5 GB); the figure is an estimate, said as `about`. GPU work (a `cuda` device) holds its
activations on the GPU and is not costed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.experiments.timecat import estimates
from kit.experiments.timecat.planning import plan
from kit.experiments.timecat.settings import TimecatSettings
from kit.runtime import machine

#: a process of the kit with torch imported, before its data
PROCESS_BYTES = 400e6
#: a row of a dataset a machine indexes (a sampler's permutation, labels, balanced draws)
ROW_BYTES = 96
#: a training step's activations and gradients per input pixel of a batch, at width 1 (a
#: ResNet-18 at 224 px keeps about 25 MB an image)
TRAIN_PIXEL_BYTES = 500
#: an extraction's (no gradients) per input pixel, at width 1
EXTRACT_PIXEL_BYTES = 170
#: side-by-side fits taken on any machine (the cpu profile's 2, on fewer cores)
SIDE_BY_SIDE_ANYWHERE = 2
#: a forked loader worker's own bytes, and the batches it keeps ready
WORKER_BYTES = 10e6
PREFETCH = 2


@dataclass(frozen=True)
class Term:
    """Bytes one setting puts in memory: the key, its value as set, and what it holds."""

    key: str
    value: object
    what: str
    bytes: float


def _training(params: TimecatSettings) -> list[Term]:
    train, launch = params.train, params.launch
    if train is None or train.device == "cuda" or not plan(params).trainings:
        return []
    data = train.data
    processes = launch.workers * launch.nproc_per_node
    batch = train.micro_batch or train.batch_size // launch.nproc_per_node
    pixels = data.image_size**2
    images = 3 * pixels
    seen = max(run.iterations for run in plan(params).trainings) * train.batch_size
    rows = (
        (data.synthetic.num_train, data.synthetic.num_eval) if data.synthetic is not None else None
    )
    terms = [
        Term("launch.workers", launch.workers, "training processes", processes * PROCESS_BYTES),
        Term(
            "train.data.image_size",
            data.image_size,
            f"activations of a batch of {batch} at width {train.width:g}",
            processes * batch * pixels * TRAIN_PIXEL_BYTES * train.width,
        ),
        Term(
            "train.num_workers",
            train.num_workers,
            "loader workers",
            processes * train.num_workers * (WORKER_BYTES + PREFETCH * batch * images),
        ),
    ]
    if rows is not None:
        terms += [
            Term(
                "train.data.synthetic.num_train",
                rows[0],
                "rows indexed",
                (rows[0] + rows[1]) * ROW_BYTES,
            ),
            Term(
                "train.data.image_size",
                data.image_size,
                "rendered images kept",
                processes * (min(seen, rows[0]) + rows[1]) * images * 4,
            ),
        ]
    return terms


def _features(params: TimecatSettings) -> list[Term]:
    if params.device == "cuda":
        return []
    width = params.train.width if params.train else 1.0
    size = params.train.data.image_size if params.train else 224
    rows = sum(train + evaluate for train, evaluate in estimates.task_rows(params).values())
    batch = params.feature_batch_size
    return [
        Term("side_by_side", params.side_by_side, "the kernel", PROCESS_BYTES),
        Term(
            "side_by_side",
            params.side_by_side,
            f"backbones at once on batches of {batch}",
            params.side_by_side * batch * size**2 * EXTRACT_PIXEL_BYTES * width,
        ),
        Term(
            "feature_workers",
            params.feature_workers,
            "feature loader workers",
            params.feature_workers * (WORKER_BYTES + PREFETCH * batch * 3 * size**2 * 4),
        ),
        Term("probe_train_rows", params.probe_train_rows, "probe rows indexed", rows * ROW_BYTES),
    ]


def phases(params: TimecatSettings) -> dict[str, list[Term]]:
    """The plan's phases on this machine's CPU, each with its terms (none for GPU work)."""
    found = {"training": _training(params), "feature extraction and probing": _features(params)}
    return {name: terms for name, terms in found.items() if terms}


def peak(params: TimecatSettings) -> tuple[str, float, Term | None]:
    """The phase that holds most, its bytes and its largest term."""
    totals = {name: sum(t.bytes for t in terms) for name, terms in phases(params).items()}
    if not totals:
        return "", 0.0, None
    name = max(totals, key=lambda phase: totals[phase])
    return name, totals[name], max(phases(params)[name], key=lambda term: term.bytes)


def memory_problems(params: TimecatSettings) -> list[str]:
    """The plan against this machine's memory: refused, naming the key that costs most and
    its figure, when its peak would not fit; and `side_by_side` above the usable cores (one
    thread a backbone; SIDE_BY_SIDE_ANYWHERE is taken anywhere)."""
    problems = []
    cores = machine.usable_cores()
    if params.device != "cuda" and params.side_by_side > max(cores, SIDE_BY_SIDE_ANYWHERE):
        problems.append(
            f"side_by_side: {params.side_by_side} backbones or probes at once, one thread each, "
            f"but this machine has {cores} usable cores; lower side_by_side to {cores} or less"
        )
    name, needed, largest = peak(params)
    memory = machine.memory_bytes()
    if largest is not None and needed > memory:
        problems.append(
            f"{largest.key}: {largest.value} makes the plan's {name} hold about "
            f"{machine.byte_size(needed)} of memory ({largest.what}: about "
            f"{machine.byte_size(largest.bytes)}), but this machine has "
            f"{machine.byte_size(memory)}; lower {largest.key}"
        )
    return problems


def describe(params: TimecatSettings) -> str:
    """`kit check`'s line of the plan's memory at its peak beside this machine's."""
    name, needed, _ = peak(params)
    memory = machine.byte_size(machine.memory_bytes())
    if not name:
        return f"memory: no CPU work costed here (GPU work), of {memory}"
    return f"memory: about {machine.byte_size(needed)} at the peak ({name}) of {memory}"
