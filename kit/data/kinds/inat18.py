"""iNaturalist 2018, root/{train,val}2018.json (COCO-like) and the images they name: `inat18`."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from kit.data.kinds.base import (
    DataError,
    DatasetKind,
    DataSource,
    data_root,
    existing_folder,
    sample_problems,
)
from kit.files.files import change_stamp

if TYPE_CHECKING:
    from kit.data.kinds.images import ImageList


@functools.lru_cache(maxsize=4)
def _read_index(
    index_file: Path, _stamp: tuple[int, ...]
) -> tuple[list[tuple[str, int]], list[int]]:
    try:
        index = json.loads(index_file.read_text())
        files = {image["id"]: image["file_name"] for image in index["images"]}
        labels = {a["image_id"]: a["category_id"] for a in index["annotations"]}
        category_ids = sorted(
            {c["id"] for c in index.get("categories", [])} or set(labels.values())
        )
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise DataError(f"{index_file}: not a COCO-style index ({error!r})") from None
    class_of = {category: position for position, category in enumerate(category_ids)}
    samples = [
        (files[image_id], class_of[labels[image_id]]) for image_id in files if image_id in labels
    ]
    if not samples:
        raise DataError(f"{index_file}: no annotated images")
    return samples, category_ids


def read_index(index_file: Path) -> tuple[list[tuple[str, int]], list[int]]:
    """An iNat18 index file's (image path relative to the root, label) pairs and category ids;
    DataError naming the file when it is not a COCO-style index or annotates no image. Parsed
    once per process while the file is unchanged (the training index is about 200 MB)."""
    return _read_index(index_file, change_stamp(index_file))


def inat18(root: Path, split: str) -> ImageList:
    """iNaturalist 2018: root/{train,val}2018.json (COCO-like) and the image paths they name."""
    from kit.data.kinds.images import ImageList

    index_file = existing_folder(root, "iNat18") / f"{split}2018.json"
    if not index_file.is_file():
        raise DataError(f"{index_file}: iNat18 index file not found")
    samples, category_ids = read_index(index_file)
    return ImageList([(str(root / name), label) for name, label in samples], category_ids)


class INat18Kind(DatasetKind):
    """iNaturalist 2018 (8,142 species), an unseen task of the paper's Table 3."""

    name = "inat18"
    probe_grid = "inat18"
    layout = ("train2018.json", "val2018.json")
    obtain = (
        "the kit does not fetch iNat18: download train_val2018.tar.gz, train2018.json and "
        "val2018.json from https://github.com/visipedia/inat_comp/tree/master/2018 and unpack "
        "them under <root> (<root>/train2018.json, <root>/val2018.json, <root>/train_val2018/...)"
    )
    split_sizes = (437_513, 24_426)
    #: the index file's prefix of each split
    index_names = {"train": "train", "eval": "val"}

    def open_split(self, data: DataSource, split: str, num_classes: int) -> ImageList:
        return inat18(data_root(data), self.index_names[split])

    def layout_problems(self, root: Path) -> list[str]:
        """Besides the layout: each index file parsed and annotating images, and a few of the
        images it names decoded."""
        problems = super().layout_problems(root)
        for prefix in [] if problems else self.index_names.values():
            try:
                samples, _ = read_index(root / f"{prefix}2018.json")
            except DataError as error:
                problems.append(str(error))
                continue
            problems += sample_problems([str(root / name) for name, _ in samples])
        return problems
