"""Pictures as datasets of uint8 [3, H, W] tensors: decoding files, and the datasets of image kinds.

The one module of kit.data.kinds that imports torch: the kinds import it when they open a split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from kit.data import workers
from kit.data.codecs import decode_image
from kit.data.kinds.base import DataError, undecodable
from kit.readout.numbers import counted


def open_image(path: str) -> torch.Tensor:
    """An RGB image as uint8 [3, H, W]: JPEG, PNG and WebP decoded by TorchCodec (the pixels and
    about the speed of torchvision's decoders, which it supersedes; faster than PIL), other
    formats by PIL; an unreadable file raises DataError naming it."""
    try:
        return decode_image(path)
    except (RuntimeError, ValueError, OSError):
        pass  # a format TorchCodec does not decode (BMP), or a broken file: PIL says which
    try:
        with Image.open(path) as image:
            return torch.from_numpy(np.asarray(image.convert("RGB"))).permute(2, 0, 1)
    except (OSError, SyntaxError, ValueError) as error:
        raise DataError(
            f"{path}: cannot read image ({error}); replace or remove the file, then "
            "re-run to resume (data.verify_images: true lists every unreadable "
            "image before training)"
        ) from None


def unreadable_images(paths: list[str]) -> list[str]:
    """The files that do not decode, each with its error (checked before any training)."""
    bad = undecodable(paths)
    if not bad:
        return []
    more = f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else ""
    return [f"{counted(len(bad), 'unreadable image')}:\n  " + "\n  ".join(bad[:10]) + more]


class ImageList(Dataset):
    """(path, label) pairs, read with open_image; `classes` names the labels in order."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[Any]) -> None:
        self.samples, self.classes = samples, classes

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        return open_image(path), label


class CifarImages(Dataset):
    """CIFAR images (uint8 [3, 32, 32]) and labels, read from the python
    pickles with either text or bytes keys (files re-saved from Python 3 have bytes keys, which
    torchvision's own reader refuses with a bare KeyError). Both are held as tensors, so that
    each loader worker receives a handle to them in shared memory, not a copy
    (kit.data.workers.shareable)."""

    def __init__(self, images: np.ndarray, labels: list[int], classes: list[str]) -> None:
        self.images = workers.shareable(images)  # [N, 32, 32, 3] as CIFAR's pickles hold them
        self.labels = workers.shareable(np.asarray(labels, dtype=np.int64))
        self.classes = classes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index].permute(2, 0, 1), int(self.labels[index])
