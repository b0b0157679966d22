"""The parts of benchmarks/gpu_input.py: each `data.decode: gpu` part timed alone and beside the
step (`--parts`), and the step's options on synthetic rows (`--steps`).

Parts, on one batch of the training JPEGs packed as a loader worker packs it (kit.data.batched):
the hardware engines' decode of whole files and of each crop's region alone (kit.data.hardware;
nvImageCodec's CPU backend on a CPU), the CUDA decoder's (TorchCodec's, or torchvision's where
TorchCodec does not load), the batch's resize in float32 and in float16 (kit.data.crops), and
the whole of `EncodedBatch.on` (decode, crop, resize, flip) with the engines and with the CUDA
decoder. Each is timed alone, then in turn with the step on a fixed batch (the rate of the
pair: what the two cost together on the GPU's SMs).

Step options, each a variant of the kit's step (`kit.train.step.Replica`) on one fixed batch:
torch.compile's modes (the kit's default, max-autotune without and with CUDA graphs,
reduce-overhead's CUDA graphs), schedule-free AdamW's step as a for-loop instead of foreach or
compiled, channels-last off, bf16 autocast off, and BatchNorm removed (what it costs; that
network trains differently). They are measurements for choosing, not the kit's settings: the
trainer changes none of them without one.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from kit.data import batched, crops, hardware, pipeline
from kit.data.kinds.images import ImageList
from kit.runtime.distributed import Process
from kit.train.step import Replica

Add = Callable[[str, int, bool, list[float]], None]
Windows = Callable[[Callable[[], None]], list[float]]


def packed_batch(root: Path, args: argparse.Namespace, hardware_jpeg: bool) -> batched.EncodedBatch:
    """The first `--batch` training files as a loader worker hands them over."""
    paths = sorted(str(path) for path in (root / "train").rglob("*.JPEG"))[: args.batch]
    base = ImageList([(path, 0) for path in paths], ["picture"])
    data = args.settings(root, "gpu", False).data.model_copy(
        update={"hardware_jpeg": hardware_jpeg}
    )
    samples = pipeline.training_samples(data, base, 0)
    collate = pipeline.training_collate(data, 1)
    assert collate is not None
    return collate([samples[(0, index)] for index in range(len(paths))])[0]


def parts(
    replica: Replica, args: argparse.Namespace, root: Path, windows: Windows, add: Add
) -> None:
    """Each gpu-path part alone, then beside `replica`'s step on a fixed batch."""
    device = replica.process.device
    batch = packed_batch(root, args, True)
    files = [item for item in batch.items() if item.dim() == 1]
    boxes = crops.crop_boxes(batch.shapes[:, 1], batch.shapes[:, 2], batch.draws).tolist()
    whole = batched.decoded_jpegs(files, device)
    regions = [
        image[:, t : t + h, x : x + w] for image, (t, x, h, w) in zip(whole, boxes, strict=True)
    ]
    flips = crops.flips(batch.draws)
    engines = hardware.engine_decoder(device)
    found: dict[str, Callable[[], object]] = {}
    if engines is not None:
        found["gpu/decode engines whole"] = lambda: engines.decode(files, None, None)
        if engines.regions:
            found["gpu/decode engines regions"] = lambda: engines.decode(files, boxes, None)
    found["gpu/decode cuda decoder"] = lambda: batched.decoded_jpegs(files, device)
    found["gpu/resize float32"] = lambda: crops.resized_regions(
        regions, flips, args.size, half=False
    )
    found["gpu/resize float16"] = lambda: crops.resized_regions(
        regions, flips, args.size, half=True
    )
    cuda_batch = packed_batch(root, args, False)
    found["gpu/all (engines)"] = lambda: batch.on(device)
    found["gpu/all (cuda decoder)"] = lambda: cuda_batch.on(device)
    images, labels = fixed_batch(replica, args)
    compiled = replica.settings.compile
    for name, part in found.items():
        add(name, 0, False, windows(lambda part=part: part()))
        add(
            f"{name} + step",
            0,
            compiled,
            windows(lambda part=part: pair(part, replica, images, labels)),
        )


def pair(
    part: Callable[[], object], replica: Replica, images: torch.Tensor, labels: torch.Tensor
) -> None:
    part()
    replica.step(images, labels)


def fixed_batch(replica: Replica, args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """One standardised batch on the device, in the replica's memory format, and its labels."""
    generator = torch.Generator().manual_seed(0)
    device = replica.process.device
    images = torch.randn((args.batch, 3, args.size, args.size), generator=generator).to(device)
    labels = torch.randint(0, args.classes, (args.batch,), generator=generator).to(device)
    return images.contiguous(memory_format=replica.memory_format), labels


#: step options: name -> (torch.compile mode or None for the kit's own choice, changes)
STEP_OPTIONS: dict[str, tuple[str | None, dict[str, object]]] = {
    "compile max-autotune-no-cudagraphs": ("max-autotune-no-cudagraphs", {}),
    "compile reduce-overhead (CUDA graphs)": ("reduce-overhead", {}),
    "compile max-autotune (CUDA graphs)": ("max-autotune", {}),
    "optimizer for-loop": (None, {"foreach": False}),
    "optimizer step compiled": (None, {"compiled_optimizer": True}),
    "channels-last off": (None, {"channels_last": False}),
    "bf16 autocast off": (None, {"precision": "fp32"}),
    "BatchNorm removed": (None, {"batchnorm": False}),
}


def step_options(
    args: argparse.Namespace, root: Path, process: Process, windows: Windows, add: Add
) -> None:
    """Each of `--steps` (STEP_OPTIONS' names), a variant of the kit's step on a fixed batch,
    compiled as the kit compiles unless the option names a mode (eager with --eager, where the
    options that compile are left out, said)."""
    for name in args.steps:
        mode, changes = STEP_OPTIONS[name]
        if args.eager and (mode is not None or changes.get("compiled_optimizer")):
            print(f"| step: {name}: not measured with --eager", flush=True)
            continue
        replica = variant(args, root, process, mode, **changes)
        images, labels = fixed_batch(replica, args)
        found = windows(lambda r=replica, x=images, y=labels: r.step(x, y))
        add(f"step: {name}", 0, not args.eager, found)


def variant(
    args: argparse.Namespace,
    root: Path,
    process: Process,
    mode: str | None,
    *,
    foreach: bool = True,
    compiled_optimizer: bool = False,
    channels_last: bool = True,
    precision: str = "auto",
    batchnorm: bool = True,
) -> Replica:
    """The kit's replica with one option changed (its model compiled in `mode`, or as the kit
    compiles it unless --eager)."""
    settings = args.settings(root, "cpu", False).model_copy(
        update={"channels_last": channels_last, "precision": precision}
    )
    replica = Replica(settings=settings, process=process)
    if not batchnorm:
        _without_batchnorm(replica.module)
    for group in replica.optimizer.param_groups:
        group["foreach"] = foreach
    if compiled_optimizer:
        replica.optimizer.step = torch.compile(replica.optimizer.step)  # type: ignore[method-assign]
    if not args.eager:
        replica.model = torch.compile(replica.module, mode=mode)
    return replica


def _without_batchnorm(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, _BatchNorm):
            setattr(module, name, nn.Identity())
        else:
            _without_batchnorm(child)
