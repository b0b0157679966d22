"""Small datasets written in the real on-disk layouts the kit reads: ImageNet's class folders of
JPEGs, its shifted evaluation sets (V2, R, Sketch, A), iNaturalist 2018's JSON index and
images, and CIFAR-10/100's python pickles.

`write_paper_data(DIR)` (`python -m kit fixtures DIR`) lays out everything the shipped paper
profiles read through `TIMECAT_DATA`, with the datasets' full class counts (1,000 ImageNet class
folders, 8,142 iNat18 categories, 10 and 100 CIFAR classes) but a handful of tiny random images,
so that `kit check` and `kit launch plan` of those profiles, and the dress rehearsal of the test
suite, run on any machine. The tests build their own small datasets with the same writers; `jpegs`
writes pictures with a photograph's detail for the input benchmarks and the self-check.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from kit.data import kinds
from kit.data.kinds.cifar import Cifar10Kind, Cifar100Kind, CifarKind
from kit.data.kinds.imagenet_shifts import ShiftedImageNetKind
from kit.files import files

#: ImageNet-1k's and iNaturalist 2018's class counts (the shipped profiles' num_classes)
IMAGENET_CLASSES = 1000
INAT18_CLASSES = 8142
#: the folders under TIMECAT_DATA the paper profiles read, by dataset
PAPER_FOLDERS = {
    "imagenet": "imagenet",
    "inat18": "inat18",
    "cifar100": "cifar100",
    "cifar10": "cifar10",
    # ImageNet's shifted test sets, each unpacked here in its own folder (the profiles' optional
    # extra evaluation sets of the ImageNet-1k task)
    "imagenet-shifts": "imagenet-shifts",
}
#: the ImageNet classes the fixture's ImageNet-R and ImageNet-A hold (the real ones hold 200)
SHIFT_SUBSET = 3


def _write_bytes(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


@contextlib.contextmanager
def _staged(folder: Path) -> Iterator[Path]:
    """A temporary folder beside `folder` that replaces it once written in full, so that an
    interrupted run leaves the former dataset or none, never a partial one (one rename instead
    of a synced write for each of thousands of files)."""
    temporary = files.temporary_name(folder)
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    try:
        yield temporary
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(temporary, folder)


def write_image(path: Path, seed: int, size: int = 20) -> None:
    """A size x (size + 4) picture of seeded noise, in the format its suffix names (JPEG for
    .JPEG/.jpg)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size + 4, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def write_image_folder(
    root: Path, classes: Sequence[str], counts: Mapping[str, int], size: int = 20
) -> Path:
    """ImageNet's layout, root/<split>/<class>/<class><i>.JPEG, with counts[split] images per
    class (seeded 1, 2, ... in split, class, index order); returns root."""
    seed = 0
    for split, count in counts.items():
        for label in classes:
            for i in range(count):
                seed += 1
                write_image(root / split / label / f"{label}{i}.JPEG", seed, size)
    return root


def write_imagenet_shift(root: Path, kind: str, classes: Sequence[str], count: int = 2) -> Path:
    """One of ImageNet's shifted evaluation sets (kit.data.kinds.imagenet_shifts) in its own
    layout, root/<its folder>/<class>/<class><i><its suffix>, `count` images per class (the
    classes: wnids, or ImageNet-V2's class indices); returns root."""
    shift = kinds.get(kind)
    assert isinstance(shift, ShiftedImageNetKind), kind
    for seed, (label, i) in enumerate(((c, i) for c in classes for i in range(count)), 1):
        write_image(root / shift.folder / label / f"{label}{i}{shift.suffix}", seed)
    return root


def write_inat18(
    root: Path, categories: Sequence[int], counts: Mapping[str, int], size: int = 20
) -> Path:
    """iNaturalist 2018's layout: root/{train,val}2018.json (COCO-like, listing every category)
    and the counts[split] images they name, their categories taken in turn; returns root."""
    listed = [{"id": category, "name": f"species{category}"} for category in categories]
    for split, count in counts.items():
        images, annotations = [], []
        for i in range(count):
            category = categories[i % len(categories)]
            name = f"train_val2018/Plantae/{category}/{split}{i}.jpg"
            write_image(root / name, 1000 + i, size)
            images.append({"id": 100 * len(split) + i, "file_name": name})
            annotations.append({"id": i, "image_id": 100 * len(split) + i, "category_id": category})
        _write_bytes(
            root / f"{split}2018.json",
            json.dumps(
                {"images": images, "annotations": annotations, "categories": listed}
            ).encode(),
        )
    return root


def _as_bytes(content: dict) -> dict:
    """What Python 3 writes after reading a CIFAR file with encoding='bytes'."""
    return {
        key.encode(): [v.encode() for v in value] if key.endswith("names") else value
        for key, value in content.items()
    }


def write_cifar(root: Path, kind: str, per_file: int, bytes_keys: bool = False) -> Path:
    """CIFAR-10 or CIFAR-100 ('cifar10', 'cifar100') as torchvision stores it under root, each
    batch file holding `per_file` random images (keys as bytes with `bytes_keys`, as a file
    re-saved from Python 3 has them); returns root."""
    chosen: type[CifarKind] = {"cifar10": Cifar10Kind, "cifar100": Cifar100Kind}[kind]
    layout, classes = chosen.cifar_layout, int(chosen.num_classes or 0)
    meta = {layout.names_key: [f"c{i}" for i in range(classes)]}
    if kind == "cifar100":
        meta["coarse_label_names"] = [f"s{i}" for i in range(20)]
    rng = np.random.default_rng(0)
    for name in (*layout.train, *layout.test):
        batch = {
            "data": rng.integers(0, 256, (per_file, 3072), dtype=np.uint8),
            layout.labels_key: rng.integers(0, classes, per_file).tolist(),
        }
        _write_bytes(
            root / layout.folder / name, pickle.dumps(_as_bytes(batch) if bytes_keys else batch)
        )
    _write_bytes(
        root / layout.folder / layout.meta, pickle.dumps(_as_bytes(meta) if bytes_keys else meta)
    )
    return root


def write_paper_data(root: Path) -> dict[str, Path]:
    """Every dataset the paper profiles read, under root as `TIMECAT_DATA` (see PAPER_FOLDERS):
    one training and one validation JPEG per ImageNet class, 50 and 10 iNat18 images, 50
    training and 10 test images of each CIFAR (enough that a 2% held-out split of every task
    keeps a row), and ImageNet's four shifted test sets side by side, one image per class (R and
    A: of `SHIFT_SUBSET` classes). Returns each dataset's folder."""
    folders = {name: root / folder for name, folder in PAPER_FOLDERS.items()}
    wnids = [f"n{i:08d}" for i in range(IMAGENET_CLASSES)]
    with _staged(folders["imagenet"]) as staged:
        write_image_folder(staged, wnids, {"train": 1, "val": 1})
    with _staged(folders["imagenet-shifts"]) as staged:
        write_imagenet_shift(staged, "imagenet-v2", [str(i) for i in range(IMAGENET_CLASSES)], 1)
        write_imagenet_shift(staged, "imagenet-sketch", wnids, 1)
        for kind in ("imagenet-r", "imagenet-a"):
            write_imagenet_shift(staged, kind, wnids[:SHIFT_SUBSET], 1)
    with _staged(folders["inat18"]) as staged:
        write_inat18(staged, range(INAT18_CLASSES), {"train": 50, "val": 10})
    for kind, per_file in (("cifar100", 50), ("cifar10", 10)):
        with _staged(folders[kind]) as staged:
            write_cifar(staged, kind, per_file)
    return folders


def jpegs(folder: Path, count: int) -> list[str]:
    """`count` ImageNet-sized JPEGs (500 x 375, quality 90) written to `folder`, with a natural
    image's amplitude spectrum (falling as 1/frequency, D. J. Field 1987, JOSA A 4(12)), so that
    each file holds about as much detail to decode as a photograph: about 120 kB, where
    ImageNet's training JPEGs average about 110 kB (138 GB for 1.28M files). Smooth pictures
    compress to a third of that and decode faster than the photographs a node will read."""
    from torchvision.io import encode_jpeg, write_file

    paths, generator = [], torch.Generator().manual_seed(0)
    height, width = 375, 500
    frequency = torch.sqrt(
        torch.fft.fftfreq(height)[:, None] ** 2 + torch.fft.rfftfreq(width)[None, :] ** 2
    )
    frequency[0, 0] = 1.0
    for index in range(count):
        shape = (3, height, width // 2 + 1)
        phase = torch.exp(2j * torch.pi * torch.rand(shape, generator=generator))
        spectrum = phase * torch.randn(shape, generator=generator).abs() / frequency
        picture = torch.fft.irfft2(spectrum, s=(height, width))
        picture = (picture - picture.mean((1, 2), keepdim=True)) / picture.std((1, 2), keepdim=True)
        pixels = ((0.5 + 0.18 * picture).clamp(0, 1) * 255).to(torch.uint8)
        path = folder / f"{index}.jpg"
        write_file(str(path), encode_jpeg(pixels, quality=90))
        paths.append(str(path))
    return paths
