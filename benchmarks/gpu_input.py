"""Whether the input keeps up with the training step: images/s of the kit's ResNet-50 step fed
from a fixed device batch (the ceiling, eager and compiled) and from each `data.decode` path
reading photo-like JPEGs, with the ratio of each to the compiled ceiling; with --parts, each part
of the gpu path alone and beside the step, and with --steps, the step's options on a fixed batch
(benchmarks/gpu_parts.py).

    python benchmarks/gpu_input.py                       # one GPU, ResNet-50, 224 px, batch 256
    python benchmarks/gpu_input.py --parts --steps       # and where the time goes
    python benchmarks/gpu_input.py --device cpu --tiny   # the same measurements, tiny, on the CPU
    python benchmarks/gpu_input.py --device cpu --tiny --eager --parts --steps  # seconds

Everything runs in one process on one device. The step is `kit.train.step.Replica.step`, as
`python -m kit.train` takes it; the input is the training loader `kit.data.pipeline.build` makes
for `data.decode` cpu (8, 12 and all-but-one workers), gpu (row `gpu`: on the hardware JPEG
engines where the GPU has them and nvImageCodec is installed, else the CUDA decoder, as the
trainer decodes; row `gpu-cuda`: `hardware_jpeg: false`, the CUDA decoder) and dali (where
installed; `--dali-loads` adds a row per `dali_hw_decoder_load`), made ready by
`Replica.on_device` (the trainer's prefetching of the next batch on a side stream).
On a GPU the eager ceiling is measured again with `torch.backends.cudnn.benchmark` on (row
`autotuned`), which the kit's trainer leaves off.
One compiled model serves every input path, so only one compilation is paid. Each path runs
`--windows` windows of `--window` steps after `--warm` windows (workers starting, queues
filling); a window is timed between two device synchronisations, as the trainer's logging
steps are. The JPEGs (`--files` files through `--distinct` distinct pictures, about ImageNet's
500 x 375 and detail, 1/f spectrum: kit.data.fixtures.jpegs) are written to a temporary folder.

Prints a table (median, min and max of the windows; ratio of the median to the compiled
ceiling, the eager one with --eager) and writes it as JSON to `--out` (default gpu_input.json,
or $OUT/gpu_input.json when OUT is set) after every row, so that a run stopped at a time limit
keeps what it measured, with the device, CPU, cores and versions it ran on. `kit launch plan
--rates` reads the rows `synthetic`, `cpu`, `gpu` and `dali`; the others are for reading.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import gpu_parts
import torch

from kit.data import codecs, fixtures, hardware, pipeline
from kit.data.settings import dali_installed
from kit.numerics import cpu
from kit.runtime.distributed import Process
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
    """The kit's training settings of this benchmark's model and batch, reading `root`."""
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
    step: Callable[[], object], device: torch.device, args: argparse.Namespace
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


def paths(args: argparse.Namespace) -> list[tuple[str, int, dict]]:
    """(row, workers, data settings) to measure: cpu at 8, 12 and all-but-one cores' workers
    (those the machine has), gpu (the trainer's choice of decoder) and gpu-cuda (the CUDA
    decoder) at 8, dali at 8 where installed, once per --dali-loads share."""
    cores = len(os.sched_getaffinity(0))
    every = max(1, cores - 1)
    counts = sorted({n for n in (*args.cpu_workers, every) if n <= every})
    few = min(8, every)
    chosen = [("cpu", n, {"decode": "cpu"}) for n in counts]
    chosen += [("gpu", few, {"decode": "gpu"})]
    chosen += [("gpu-cuda", few, {"decode": "gpu", "hardware_jpeg": False})]
    if dali_installed():
        chosen.append(("dali", few, {"decode": "dali"}))
        chosen += [
            (f"dali load {load:g}", few, {"decode": "dali", "dali_hw_decoder_load": load})
            for load in args.dali_loads
        ]
    return chosen


class Table:
    """The rows measured so far: each printed as it comes and the JSON rewritten, the ratio to
    the ceiling (`top`, once measured) with it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.rows, self.top = args, [], None

    def add(self, name: str, workers: int, compiled: bool, found: list[float]) -> None:
        self.rows.append(rate(name, workers, compiled, found))
        print(line(self.finished()[-1]), flush=True)
        self.write()

    def finished(self) -> list[Rate]:
        top = self.top
        return [Rate(**{**asdict(r), "ratio": r.median / top if top else None}) for r in self.rows]

    def write(self) -> None:
        record = {"measured_on": where(self.args), "rates": [asdict(r) for r in self.finished()]}
        self.args.out.write_text(json.dumps(record, indent=1) + "\n")


def measure(args: argparse.Namespace, root: Path, table: Table) -> None:
    device = torch.device(args.device)
    process = Process(0, 1, device)
    time = functools.partial(windows, device=device, args=args)
    for compiled in (False, True)[: 1 if args.eager else 2]:
        replica = Replica(settings=settings(args, root, "cpu", compiled), process=process)
        table.add("synthetic", 0, compiled, ceiling(replica, args, device))
        if device.type == "cuda" and not compiled:  # cuDNN's autotuner, eager: no recompiling
            torch.backends.cudnn.benchmark = True
            table.add("autotuned", 0, False, ceiling(replica, args, device))
            torch.backends.cudnn.benchmark = False
    table.top = table.rows[-1].median
    table.write()
    for name, workers, data in [] if args.no_paths else paths(args):
        step = not args.eager
        cfg = settings(args, root, "cpu", step)
        cfg = cfg.model_copy(
            update={"num_workers": workers, "data": cfg.data.model_copy(update=data)}
        )
        table.add(name, workers, step, fed(replica, cfg, args))
    if args.parts:
        gpu_parts.parts(replica, args, root, time, table.add)
    if args.steps:
        gpu_parts.step_options(args, root, process, time, table.add)


def line(found: Rate) -> str:
    alone = found.input.startswith("gpu/") and not found.input.endswith("+ step")
    step = "-" if alone else "compiled" if found.compiled else "eager"
    ratio = "" if found.ratio is None else f"{found.ratio:6.0%}"
    return (
        f"| {found.input:42} | {found.workers:7} | {step:8} | {found.median:8,.0f} | "
        f"{found.low:8,.0f} | {found.high:8,.0f} | {ratio:>6} |"
    )


HEADER = f"| {'input':42} | workers | step     |   median |      min |      max |  ratio |"


def where(args: argparse.Namespace) -> dict:
    """What the figures were measured on."""
    device = torch.device(args.device)
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu": cpu.cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": __import__("torchvision").__version__,
        "decoders": codecs.decoders_in_use(),
        "nvimgcodec": _version("nvidia-nvimgcodec-cu13"),
        "hardware_jpeg": hardware.engine_decoder(device) is not None,
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
    parser.add_argument(
        "--dali-loads", type=float, nargs="*", default=[], help="dali_hw_decoder_load shares"
    )
    parser.add_argument("--parts", action="store_true", help="the gpu path's parts")
    parser.add_argument(
        "--steps",
        nargs="*",
        choices=list(gpu_parts.STEP_OPTIONS),
        default=None,
        help="step options on a fixed batch (all without names)",
    )
    parser.add_argument("--no-paths", action="store_true", help="leave out the decode paths' rows")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.steps == []:
        args.steps = list(gpu_parts.STEP_OPTIONS)
    args.model, args.width, args.image_size, args.batch = "resnet50", 1.0, 224, 256
    if args.tiny:  # seconds on a CPU: what the suite runs
        args.model, args.width, args.image_size, args.batch = "resnet10", 0.25, 64, 16
        args.window, args.windows, args.warm, args.files, args.distinct = 2, 2, 1, 96, 24
        args.cpu_workers = [1]
    if args.out is None:
        args.out = Path(os.environ.get("OUT", ".")) / "gpu_input.json"
    args.size, args.classes = args.image_size, CLASSES
    args.settings = functools.partial(settings, args)
    return args


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def main() -> None:
    args = arguments()
    started = time.perf_counter()
    table = Table(args)
    with tempfile.TemporaryDirectory(prefix="gpu_input_") as scratch:
        root = image_folder(Path(scratch), args.files, args.distinct)
        print(f"{args.files} JPEGs written in {time.perf_counter() - started:.0f} s", flush=True)
        print(HEADER)
        measure(args, root, table)
    print("\nimages/s per window; ratio: the median over the compiled synthetic median")
    for found in table.finished():
        print(line(found))
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
