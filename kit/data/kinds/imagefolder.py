"""ImageNet's folder layout, root/{train,val}/<class>/<image>: the `imagefolder` kind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kit.data.kinds.base import (
    IMAGE_SUFFIXES,
    SAMPLE_IMAGES,
    DataError,
    DatasetKind,
    DataSource,
    data_root,
    empty_class_folders,
    existing_folder,
    sample_problems,
)

if TYPE_CHECKING:
    from kit.data.kinds.images import ImageList


#: the file lists of the splits this process has scanned, by their folders' change stamps
_SCANNED: dict[tuple, tuple[list[tuple[str, int]], list[str]]] = {}


def image_folder(root: Path, split: str) -> ImageList:
    """ImageNet layout: root/{train,val}/<class>/<image>. The file list is scanned once per
    process and kept while the split's folder and its class folders keep their modification
    times (adding or removing an image changes its folder's): ImageNet's 1.28M files take
    minutes to list on a shared file system, and a process training a chain of runs would list
    them again for every run."""
    from kit.data.kinds.images import ImageList

    folder = existing_folder(root / split, f"ImageFolder '{split}'")
    stamps = _stamps(folder)
    if stamps not in _SCANNED:
        _SCANNED[stamps] = _scan(folder)
    samples, classes = _SCANNED[stamps]
    return ImageList(list(samples), list(classes))


def _stamps(folder: Path) -> tuple:
    """The folder and its class folders, each with its modification time."""
    with os.scandir(folder) as entries:
        inside = sorted((e.name, e.stat().st_mtime_ns) for e in entries if e.is_dir())
    return (str(folder.resolve()), folder.stat().st_mtime_ns, tuple(inside))


def _scan(folder: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """Every image of a split with its class index, and the classes (refusing empty ones)."""
    from torchvision import datasets

    from kit.data.kinds.images import open_image

    if not any(p.is_dir() for p in folder.iterdir()):
        raise DataError(f"{folder}: no class folders with images")
    empty = empty_class_folders(folder)
    if empty:
        raise DataError("\n".join(f"{path}: class folder without images" for path in empty))
    found = datasets.ImageFolder(
        str(folder), loader=open_image, is_valid_file=lambda p: p.lower().endswith(IMAGE_SUFFIXES)
    )
    return found.samples, found.classes


class ImageFolderKind(DatasetKind):
    """Any dataset stored as ImageNet is: one folder per class in each split."""

    name = "imagefolder"
    probe_grid = "imagenet"
    layout = ("train/", "val/")
    obtain = (
        "the kit does not fetch ImageNet-1k (its terms ask for a sign-up): download ILSVRC2012's "
        "training and validation images from https://image-net.org/download.php and lay them "
        "out as <root>/train/<wnid>/*.JPEG and <root>/val/<wnid>/*.JPEG (the validation "
        "images sorted into class folders, as torchvision's ImageNet does)"
    )
    #: ImageNet-1k's (ILSVRC-2012), the dataset the paper stores this way
    split_sizes = (1_281_167, 50_000)
    #: the folder of each split under the root
    folders = {"train": "train", "eval": "val"}

    def open_split(self, data: DataSource, split: str, num_classes: int) -> ImageList:
        return image_folder(data_root(data), self.folders[split])

    def layout_problems(self, root: Path) -> list[str]:
        """Besides the layout: each split holds class folders, not images directly (ImageNet's
        val/ as distributed is flat), both splits the same classes, and a few images of each
        decode."""
        problems = super().layout_problems(root)
        if problems:
            return problems
        classes = {}
        for split in self.folders.values():
            folder = root / split
            classes[split] = {p.name for p in folder.iterdir() if p.is_dir()}
            loose = [p for p in folder.iterdir() if p.name.lower().endswith(IMAGE_SUFFIXES)]
            if loose or not classes[split]:
                problems.append(
                    f"{folder}: holds images directly; each class needs its own "
                    f"folder ({split}/<class>/<image>; for ImageNet's val, sort it "
                    "with the devkit's labels first)"
                )
            else:
                problems += sample_problems(
                    [
                        str(min(_images(root / split / name)))
                        for name in sorted(classes[split])[:SAMPLE_IMAGES]
                    ]
                )
        train, val = (classes[split] for split in self.folders.values())
        if not problems and train != val:
            only = sorted(train - val)[:3] or sorted(val - train)[:3]
            problems.append(
                f"{root}: train/ has {len(train)} class folders and val/ {len(val)}; "
                f"they differ (e.g. {', '.join(only)}): both splits need the same "
                "classes"
            )
        return problems


def _images(folder: Path) -> Iterator[Path]:
    """The images under a class folder, at any depth."""
    return (p for p in folder.rglob("*") if p.name.lower().endswith(IMAGE_SUFFIXES))
