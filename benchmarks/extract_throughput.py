"""Feature-extraction throughput: images decoded per second and backbone images per second
(images x backbones), extracting k small ResNets one pass each (as before) or all in one pass.

Reads photo-like 500 x 375 JPEG fixtures (written once to benchmarks/.cache) with the kit's
evaluation pipeline (decode, resize, centre crop to uint8; normalisation in the loop) into
fresh caches, so every run extracts. The process pins itself to `--cores`. `--device cuda`
runs the backbones on the GPU in bf16 autocast, as extraction does there (the decoding stays on
the cores and workers given).

    .venv/bin/python benchmarks/extract_throughput.py                       # 4 x resnet10, 64 px
    .venv/bin/python benchmarks/extract_throughput.py --backbones 8 --workers 1 --cores 0 1
    .venv/bin/python benchmarks/extract_throughput.py --arch resnet50 --width 1 --image-size 224 \
        --batch 256 --backbones 1 --images 2048 --workers 15 --cores $(seq 0 15) --device cuda
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from photo_fixtures import image_folder

from kit import features, models
from kit.data import pipeline as data
from kit.data.kinds import imagefolder
from kit.train.settings import TrainSettings

CACHE = Path(__file__).parent / ".cache" / "jpeg_photos"


def checkpoint(folder: Path, seed: int, args: argparse.Namespace) -> Path:
    cfg = TrainSettings(
        model=args.arch,
        width=args.width,
        num_classes=10,
        seed=seed,
        data={"kind": "imagefolder", "root": str(CACHE), "image_size": args.image_size},
        batch_size=8,
        iterations=1,
        output_dir=str(folder),
    )
    torch.manual_seed(seed)
    model = models.build(cfg.model, cfg.num_classes, cfg.width, cfg.stem, cfg.data.image_size)
    path = folder / f"seed{seed}.pt"
    torch.save({"model": model.state_dict(), "config": cfg.model_dump()}, path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--backbones", type=int, default=4)
    parser.add_argument("--arch", default="resnet10")
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--cores", type=int, nargs="+", default=[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    os.sched_setaffinity(0, set(args.cores))
    torch.set_num_threads(len(args.cores))
    root = image_folder(CACHE, classes=4, per_class=args.images // 4)
    dataset = data.Transformed(
        imagefolder.image_folder(root, "train"),
        data.augmentation("algoperf", args.image_size, False, True),
    )
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        paths = [checkpoint(folder, seed, args) for seed in range(args.backbones)]
        kwargs = dict(
            dataset=dataset,
            dataset_id="fixtures",
            split="train",
            transform="eval",
            batch_size=args.batch,
            num_workers=args.workers,
            progress=False,
            device=args.device,
        )
        timings = {}
        for name, representations in (
            ("one pass per backbone (before)", [[p] for p in paths]),
            ("all backbones in one pass", [paths]),
        ):
            cache = folder / "cache"
            start = time.perf_counter()
            if len(representations) > 1:
                for representation in representations:
                    features.extract(representation, cache_dir=cache, **kwargs)
            else:
                features.extract_many(representations, cache_dir=cache, **kwargs)
            timings[name] = time.perf_counter() - start
            shutil.rmtree(cache)
    print(
        f"{len(dataset)} JPEGs of 500x375 -> {args.image_size} px, {args.backbones} x "
        f"{args.arch} width {args.width}, batch {args.batch}, {args.workers} workers, "
        f"cores {args.cores}, device {args.device}"
    )
    for name, seconds in timings.items():
        decodes = len(dataset) * (args.backbones if "before" in name else 1)
        print(
            f"  {name:32s} decoded {decodes / seconds:6.0f} img/s, images through backbones "
            f"{len(dataset) * args.backbones / seconds:6.0f} img/s  ({seconds:.1f} s)"
        )


if __name__ == "__main__":
    main()
