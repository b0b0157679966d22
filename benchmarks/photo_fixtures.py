"""Photo-like JPEG fixtures for the input benchmarks: ImageNet's typical 500 x 375 size, smooth
coloured structure plus grain, so decoding and resampling cost what they cost on photographs."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def photo_like(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    image = np.zeros((height, width, 3))
    for channel in range(3):
        for _ in range(6):
            fy, fx = rng.uniform(1, 12, 2)
            image[..., channel] += rng.uniform(0.2, 1) * np.sin(
                2 * np.pi * (fy * y + fx * x) + rng.uniform(0, 2 * np.pi)
            )
    image = (image - image.min()) / (image.max() - image.min()) * 255
    return np.clip(image + rng.normal(0, 8, image.shape), 0, 255).astype(np.uint8)


def image_folder(
    root: Path, classes: int, per_class: int, size: tuple[int, int] = (375, 500)
) -> Path:
    """root/{train,val}/<class>/<n>.JPEG, written once (kept between runs)."""
    for split in ("train", "val"):
        for label in range(classes):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(per_class):
                path = folder / f"{n}.JPEG"
                if not path.exists():
                    # not hash(): a string's hash changes with each process (PYTHONHASHSEED)
                    seed = zlib.crc32(f"{split}/{label}/{n}".encode())
                    Image.fromarray(photo_like(*size, seed)).save(path, quality=90)
    return root
