"""Loader-only images/s on one core: the former PIL + ToTensor + Normalize workers against the
kit's uint8 pipeline (TorchCodec decode, v2 transforms; normalisation left to the device).

Both read the same photo-like 500 x 375 JPEG fixtures (written once to benchmarks/.cache) through
the kit's per-sample seeded `Samples` and a DataLoader without workers, so the figure is what
one worker core delivers. The process pins itself to one core and one thread; repeats alternate
between the two pipelines and medians are printed. The CPU bar is 400 images/s per core.

    .venv/bin/python benchmarks/input_pipeline.py                 # train pipeline, 224 px
    .venv/bin/python benchmarks/input_pipeline.py --eval --repeats 7
    .venv/bin/python benchmarks/input_pipeline.py --crops         # data.decode: gpu's resize

`--crops` times instead the `data.decode: gpu` crop and resize of decoded batches on this core's
CPU tensors: one resize per image (kit.data.crops.resized_crops) against the whole batch in
a few kernels (batch_resized_crops), with the largest and mean pixel difference between them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from photo_fixtures import image_folder
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms

from kit.data import batched, crops, prefetch
from kit.data import pipeline as data
from kit.data.kinds import imagefolder
from kit.data.kinds.images import ImageList

CACHE = Path(__file__).parent / ".cache" / "jpeg_photos"


def pil_float_transform(image_size: int, train: bool) -> Callable:
    """The former worker pipeline: PIL resizing, then float32 ToTensor and Normalize."""
    steps = (
        [
            transforms.RandomResizedCrop(image_size, scale=(0.08, 1.0)),
            transforms.RandomHorizontalFlip(),
        ]
        if train
        else [transforms.Resize(round(image_size * 256 / 224)), transforms.CenterCrop(image_size)]
    )
    return transforms.Compose(
        steps
        + [
            transforms.ToTensor(),
            transforms.Normalize(prefetch.IMAGENET_MEAN, prefetch.IMAGENET_STD),
        ]
    )


class PilImages(ImageList):
    """The same files opened with PIL, as the former loader did."""

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        path, label = self.samples[index]
        with Image.open(path) as image:
            return image.convert("RGB"), label


def images_per_s(samples: data.Samples, batch: int, normalise: bool) -> float:
    keys = [(0, i) for i in range(len(samples))]
    loader = DataLoader(samples, batch_size=batch, sampler=keys, num_workers=0)
    start = time.perf_counter()
    for images, _ in loader:
        if normalise:
            prefetch.normalise(images)
    return len(keys) // batch * batch / (time.perf_counter() - start)


def crop_rates(paths: list[str], size: int, batch: int, repeats: int) -> None:
    """Per-image against batched crop and resize of decoded batches, images/s on this core."""
    images = batched.decoded_jpegs(
        [batched.file_bytes(path) for path in paths], torch.device("cpu")
    )
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([crops.sample_draws(generator) for _ in images])
    resizes = {
        "one resize per image": crops.resized_crops,
        "whole batch": crops.batch_resized_crops,
    }
    timings: dict[str, list[float]] = {name: [] for name in resizes}
    for _ in range(repeats):
        for name, resize in resizes.items():
            start = time.perf_counter()
            for first in range(0, len(images) - batch + 1, batch):
                resize(images[first : first + batch], draws[first : first + batch], size)
            timings[name].append(len(images) // batch * batch / (time.perf_counter() - start))
    apart = (
        crops.batch_resized_crops(images, draws, size).int()
        - crops.resized_crops(images, draws, size).int()
    ).abs()
    print(f"{len(images)} decoded 500x375 images cropped to {size} px, batch {batch}")
    for name, values in timings.items():
        print(f"  {name:22s} median {statistics.median(values):6.0f} img/s per core")
    mean = float(apart.float().mean())
    print(f"  pixels apart: at most {int(apart.max())} grey level, mean {mean:.2g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=256, help="fixture images read per repeat")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--eval", action="store_true", help="the evaluation transform instead")
    parser.add_argument("--core", type=int, default=0, help="the CPU core to pin to")
    parser.add_argument("--crops", action="store_true", help="time data.decode: gpu's resize")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    root = image_folder(CACHE, classes=4, per_class=args.images // 4)
    listed = imagefolder.image_folder(root, "train")
    if args.crops:
        paths = [path for path, _ in listed.samples]
        return crop_rates(paths, args.image_size, args.batch, args.repeats)
    train = not args.eval
    pipelines = {
        "PIL + ToTensor + Normalize (former)": data.Samples(
            PilImages(listed.samples, listed.classes),
            pil_float_transform(args.image_size, train),
            seed=0,
        ),
        "TorchCodec decode + v2, uint8 (kit)": data.Samples(
            listed, data.augmentation("algoperf", args.image_size, train, True), seed=0
        ),
    }
    timings: dict[str, list[float]] = {name: [] for name in pipelines}
    timings["kit, plus normalising on this core"] = []
    for _ in range(args.repeats):
        for name, samples in pipelines.items():
            timings[name].append(images_per_s(samples, args.batch, normalise=False))
        timings["kit, plus normalising on this core"].append(
            images_per_s(pipelines["TorchCodec decode + v2, uint8 (kit)"], args.batch, True)
        )
    print(
        f"{len(listed)} JPEGs of 500x375, {'eval' if args.eval else 'train'} transform to "
        f"{args.image_size} px, batch {args.batch}, core {args.core}, {args.repeats} repeats"
    )
    for name, values in timings.items():
        print(
            f"  {name:40s} median {statistics.median(values):6.0f} img/s per core  "
            f"(runs: {', '.join(f'{v:.0f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
