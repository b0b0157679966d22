"""Whether the input keeps up with the training step: images/s of the kit's ResNet-50 step fed
from a fixed device batch (the ceiling, eager and compiled) and from each `data.decode` path
reading photo-like JPEGs, with the ratio of each to the compiled ceiling.

    python benchmarks/gpu_input.py                       # one GPU, ResNet-50, 224 px, batch 256
    python benchmarks/gpu_input.py --device cpu --tiny   # the same measurements, tiny, on the CPU
    python benchmarks/gpu_input.py --device cpu --tiny --eager   # no compilation: seconds

Everything runs in one process on one device. The step is `kit.train.step.Replica.step`, as
`python -m kit.train` takes it; the input is the training loader `kit.data.pipeline.build` makes
for `data.decode` cpu (8, 12 and all-but-one workers), gpu and dali (where installed), made
ready by `Replica.on_device` (the trainer's prefetching of the next batch on a side stream).
On a GPU the eager ceiling is measured again with `torch.backends.cudnn.benchmark` on (row
`autotuned`), which the kit's trainer leaves off.
One compiled model serves every input path, so only one compilation is paid. Each path runs
`--windows` windows of `--window` steps after `--warm` windows (workers starting, queues
filling); a window is timed between two device synchronisations, as the trainer's logging
steps are. The JPEGs (`--files` files through `--distinct` distinct pictures, about ImageNet's
500 x 375 and detail, 1/f spectrum: kit.data.fixtures.jpegs) are written to a temporary folder.

Prints a table (median, min and max of the windows; ratio of the median to the compiled
ceiling, the eager one with --eager) and writes it as JSON to `--out` (default gpu_input.json,
or $OUT/gpu_input.json when OUT is set), with the device, CPU, cores and versions it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kit.core import numerics
from kit.core.distributed import Process
from kit.data import fixtures, pipeline
from kit.data.settings import dali_installed
from kit.train.settings import TrainSettings
from kit.train.step import Replica

CLASSES = 16


@dataclass(frozen=True)
class Rate:
    """One input path's windows: images/s median, min and max, and the median's ratio to the
    compiled ceiling."""

    input: str
    workers: int
    compiled: bool
    median: float
    low: float
    high: float
    ratio: float | None = None


def settings(args: argparse.Namespace, root: Path, decode: str, compiled: bool) -> TrainSettings:
    return TrainSettings.model_validate(
        {
            "model": args.model,
            "width": args.width,
            "num_classes": CLASSES,
            "data": {
                "kind": "imagefolder",
                "root": str(root),
                "image_size": args.image_size,
                "decode": decode,
            },
            "batch_size": args.batch,
            "iterations": 10**6,
            "seed": 0,
            "output_dir": str(root / "unused"),
            "device": args.device,
            "compile": compiled,
        }
    )


def image_folder(root: Path, files: int, distinct: int) -> Path:
    """root/{train,val}/class<c>/<n>.JPEG: `files` training files (hard links to `distinct`
    pictures: decoding costs the same, writing costs a fraction) over CLASSES classes."""
    pictures = root / "pictures"
    pictures.mkdir(parents=True)
    sources = fixtures.jpegs(pictures, distinct)
    for split, count in (("train", files), ("val", CLASSES)):
        for index in range(count):
            folder = root / split / f"class{index % CLASSES}"
            folder.mkdir(parents=True, exist_ok=True)
            os.link(sources[index % distinct], folder / f"{index}.JPEG")
    return root


def windows(
    step: Callable[[], None], device: torch.device, args: argparse.Namespace
) -> list[float]:
    """Images/s of each of `--windows` windows of `--window` calls of `step`, after `--warm`."""
    rates = []
    for index in range(args.warm + args.windows):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(args.window):
            step()
        synchronize(device)
        if index >= args.warm:
            rates.append(args.window * args.batch / (time.perf_counter() - start))
    return rates


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rate(name: str, workers: int, compiled: bool, found: list[float]) -> Rate:
    return Rate(name, workers, compiled, statistics.median(found), min(found), max(found))


def ceiling(replica: Replica, args: argparse.Namespace, device: torch.device) -> list[float]:
    """The step on one fixed, already standardised device batch: no input at all."""
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch, 3, args.image_size, args.image_size)
    images = torch.randn(shape, generator=generator).to(device)
    images = images.contiguous(memory_format=replica.memory_format)
    labels = torch.randint(0, CLASSES, (args.batch,), generator=generator).to(device)
    return windows(lambda: replica.step(images, labels), device, args)


def fed(replica: Replica, cfg: TrainSettings, args: argparse.Namespace) -> list[float]:
    """The step fed by the training loader of `cfg` (its decode path and workers), epoch after
    epoch, as the trainer feeds it."""
    data = pipeline.build(
        cfg.data,
        cfg.num_classes,
        cfg.seed,
        cfg.batch_size,
        0,
        1,
        cfg.num_workers,
        0,
        pin_memory=replica.process.device.type == "cuda",
    )

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield from replica.on_device(data.train)

    stream = batches()
    return windows(lambda: replica.step(*next(stream)), replica.process.device, args)


def paths(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(decode, workers) to measure: cpu at 8, 12 and all-but-one cores' workers (those the
    machine has), gpu at 8, dali at 8 where installed."""
    cores = len(os.sched_getaffinity(0))
    every = max(1, cores - 1)
    counts = sorted({n for n in (*args.cpu_workers, every) if n <= every})
    chosen = [("cpu", n) for n in counts] + [("gpu", min(8, every))]
    if dali_installed():
        chosen.append(("dali", min(8, every)))
    return chosen


def measure(args: argparse.Namespace, root: Path) -> list[Rate]:
    device = torch.device(args.device)
    process = Process(0, 1, device)
    found: list[Rate] = []
    for compiled in (False, True)[: 1 if args.eager else 2]:
        replica = Replica(settings=settings(args, root, "cpu", compiled), process=process)
        found.append(rate("synthetic", 0, compiled, ceiling(replica, args, device)))
        print(line(found[-1]), flush=True)
        if device.type == "cuda" and not compiled:  # cuDNN's autotuner, eager: no recompiling
            torch.backends.cudnn.benchmark = True
            found.append(rate("autotuned", 0, False, ceiling(replica, args, device)))
            torch.backends.cudnn.benchmark = False
            print(line(found[-1]), flush=True)
    top = found[-1].median
    for decode, workers in paths(args):
        step = not args.eager
        cfg = settings(args, root, decode, step).model_copy(update={"num_workers": workers})
        found.append(rate(decode, workers, step, fed(replica, cfg, args)))
        print(line(found[-1]), flush=True)
    return [Rate(**{**asdict(r), "ratio": r.median / top}) for r in found]


def line(found: Rate) -> str:
    step = "compiled" if found.compiled else "eager"
    ratio = "" if found.ratio is None else f"{found.ratio:6.0%}"
    return (
        f"| {found.input:9} | {found.workers:7} | {step:8} | {found.median:8,.0f} | "
        f"{found.low:8,.0f} | {found.high:8,.0f} | {ratio:>6} |"
    )


def where(args: argparse.Namespace) -> dict:
    """What the figures were measured on."""
    device = torch.device(args.device)
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu": numerics.cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": __import__("torchvision").__version__,
        "model": args.model,
        "width": args.width,
        "image_size": args.image_size,
        "batch": args.batch,
        "window": args.window,
        "windows": args.windows,
        "files": args.files,
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a tiny network on small images")
    parser.add_argument(
        "--eager", action="store_true", help="no compilation: every path feeds the eager step"
    )
    parser.add_argument("--window", type=int, default=10, help="steps per timed window")
    parser.add_argument("--windows", type=int, default=8, help="timed windows per path")
    parser.add_argument("--warm", type=int, default=3, help="untimed windows per path")
    parser.add_argument("--files", type=int, default=12_800, help="training JPEGs")
    parser.add_argument("--distinct", type=int, default=256, help="distinct pictures")
    parser.add_argument("--cpu-workers", type=int, nargs="+", default=[8, 12])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.model, args.width, args.image_size, args.batch = "resnet50", 1.0, 224, 256
    if args.tiny:  # seconds on a CPU: what the suite runs
        args.model, args.width, args.image_size, args.batch = "resnet10", 0.25, 64, 16
        args.window, args.windows, args.warm, args.files, args.distinct = 2, 2, 1, 96, 24
        args.cpu_workers = [1]
    if args.out is None:
        args.out = Path(os.environ.get("OUT", ".")) / "gpu_input.json"
    return args


def main() -> None:
    args = arguments()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_input_") as scratch:
        root = image_folder(Path(scratch), args.files, args.distinct)
        print(f"{args.files} JPEGs written in {time.perf_counter() - started:.0f} s", flush=True)
        print("| input     | workers | step     |   median |      min |      max |  ratio |")
        rates = measure(args, root)
    print("\nimages/s per window; ratio: the median over the compiled synthetic median")
    for found in rates:
        print(line(found))
    record = {"measured_on": where(args), "rates": [asdict(r) for r in rates]}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
