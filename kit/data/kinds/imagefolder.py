"""ImageNet's folder layout, root/{train,val}/<class>/<image>: the `imagefolder` kind."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kit.data.kinds.base import (
    IMAGE_SUFFIXES,
    DataError,
    DatasetKind,
    data_root,
    empty_class_folders,
    existing_folder,
)

if TYPE_CHECKING:
    from kit.data.kinds.images import ImageList
    from kit.data.settings import DataSettings


def image_folder(root: Path, split: str) -> ImageList:
    """ImageNet layout: root/{train,val}/<class>/<image>."""
    from torchvision import datasets

    from kit.data.kinds.images import ImageList, open_image

    folder = existing_folder(root / split, f"ImageFolder '{split}'")
    if not any(p.is_dir() for p in folder.iterdir()):
        raise DataError(f"{folder}: no class folders with images")
    empty = empty_class_folders(folder)
    if empty:
        raise DataError("\n".join(f"{path}: class folder without images" for path in empty))
    found = datasets.ImageFolder(str(folder), loader=open_image,
                                 is_valid_file=lambda p: p.lower().endswith(IMAGE_SUFFIXES))
    return ImageList(found.samples, found.classes)


class ImageFolderKind(DatasetKind):
    """Any dataset stored as ImageNet is: one folder per class in each split."""

    name = "imagefolder"
    probe_grid = "imagenet"
    layout = ("train/", "val/")
    #: the folder of each split under the root
    folders = {"train": "train", "eval": "val"}

    def open_split(self, data: DataSettings, split: str, num_classes: int) -> ImageList:
        return image_folder(data_root(data), self.folders[split])
