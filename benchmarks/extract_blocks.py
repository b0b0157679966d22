"""What the size of extraction's blocks of images costs: the wall time of a forward of the cpu
profile's network (ResNet-10 at width 0.25, 24 px images, batch norm folded as CPU extraction
folds it) over 2,560 images in batches of 256, each batch cut into blocks of about
`kit.numerics.blocked.BLOCK_PIXELS` pixels (a multiple of 16 images) spread over the process's
threads, at several block sizes in alternation, with whether the features are the same bits.

    .venv/bin/python benchmarks/extract_blocks.py
    .venv/bin/python benchmarks/extract_blocks.py --image-size 32 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from kit.models import build, fold_batch_norms
from kit.numerics import blocked, numerics

SIZES = (1 << 16, 1 << 15, 1 << 14, 1 << 13)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=24)
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    numerics.apply()
    torch.manual_seed(0)
    model = fold_batch_norms(build("resnet10", 10, args.width, image_size=args.image_size).eval())
    images = torch.randn(2560, 3, args.image_size, args.image_size)
    best = dict.fromkeys(SIZES, float("inf"))
    features: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for _ in range(args.repeats):
            for size in SIZES:  # alternated, so that a drift of the host's speed hits each
                blocked.BLOCK_PIXELS = size
                start = time.perf_counter()
                out = torch.cat([blocked.images(model, batch) for batch in images.split(256)])
                best[size] = min(best[size], time.perf_counter() - start)
                features[size] = out
    pixels = args.image_size**2
    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"{args.image_size} px, best of {args.repeats}"
    )
    for size in SIZES:
        per = blocked.bounds(256, pixels, blocked.IMAGE_ALIGN, size)[1]
        same = torch.equal(features[size], features[SIZES[0]])
        print(
            f"  block of {size:>6} px ({per:>3} images): {best[size] / len(images) * 1e3:.3f} ms "
            f"an image, {best[size] / best[SIZES[0]]:.2f} x, same bits as the first: {same}"
        )


if __name__ == "__main__":
    main()
