"""Data checked deeply before anything starts: ImageFolder splits sorted into the same class
folders, iNat18 index files parsed and annotating images, CIFAR pickles holding images, a few
images of each split decoded; each problem one line naming its path."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from kit.data.fixtures import write_cifar, write_image
from kit.data.preflight import preflight
from kit.data.settings import DataSettings


def _check(kind: str, root: Path) -> list[str]:
    return preflight(DataSettings(kind=kind, root=str(root), image_size=16))


@pytest.fixture()
def imagenet(tmp_path: Path) -> Path:
    for split in ("train", "val"):
        for index, label in enumerate(("n01", "n02", "n03")):
            write_image(tmp_path / split / label / f"{label}_{index}.JPEG", index)
    return tmp_path


def test_a_sorted_imagenet_passes(imagenet: Path) -> None:
    assert _check("imagefolder", imagenet) == []


def test_a_flat_val_folder_is_named(imagenet: Path) -> None:
    for folder in list((imagenet / "val").iterdir()):
        for image in folder.iterdir():
            image.rename(imagenet / "val" / image.name)
        folder.rmdir()
    (problem,) = _check("imagefolder", imagenet)
    assert problem.startswith(f"{imagenet / 'val'}: holds images directly")


def test_splits_with_other_classes_are_named(imagenet: Path) -> None:
    write_image(imagenet / "train" / "n04" / "extra.JPEG", 9)
    (problem,) = _check("imagefolder", imagenet)
    assert "train/ has 4 class folders and val/ 3" in problem and "n04" in problem


def test_an_undecodable_jpeg_is_named(imagenet: Path) -> None:
    broken = imagenet / "val" / "n02" / "n02_1.JPEG"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    (problem,) = _check("imagefolder", imagenet)
    assert problem.startswith(str(broken)) and "cannot decode this image" in problem


def _inat(root: Path, index: dict | str) -> None:
    for split in ("train", "val"):
        text = index if isinstance(index, str) else json.dumps(index)
        (root / f"{split}2018.json").write_text(text)


def test_inat_index_files_are_parsed_and_must_annotate_images(tmp_path: Path) -> None:
    write_image(tmp_path / "images" / "a.jpg", 1)
    good = {
        "images": [{"id": 1, "file_name": "images/a.jpg"}],
        "annotations": [{"image_id": 1, "category_id": 7}],
        "categories": [{"id": 7}],
    }
    _inat(tmp_path, good)
    assert _check("inat18", tmp_path) == []
    _inat(tmp_path, {"images": [], "annotations": [], "categories": []})
    assert _check("inat18", tmp_path) == [
        f"{tmp_path / f'{split}2018.json'}: no annotated images" for split in ("train", "val")
    ]
    _inat(tmp_path, "")
    assert all("not a COCO-style index" in p for p in _check("inat18", tmp_path))
    _inat(tmp_path, good | {"images": [{"id": 1, "file_name": "images/missing.jpg"}]})
    assert all(
        p.startswith(str(tmp_path / "images" / "missing.jpg")) for p in _check("inat18", tmp_path)
    )


def test_an_empty_cifar_pickle_is_named(tmp_path: Path) -> None:
    write_cifar(tmp_path, "cifar10", 2)
    assert _check("cifar10", tmp_path) == []
    empty = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    empty.write_bytes(pickle.dumps({"data": np.zeros((0, 3072), np.uint8), "labels": []}))
    (problem,) = _check("cifar10", tmp_path)
    assert problem.startswith(f"{empty}: holds 0 images")
