"""Training data: the offline synthetic world, ImageNet-style folders, CIFAR-10/100 and iNat18.

Every dataset is indexed by (epoch, index) keys. Each sample's augmentation is drawn from an RNG
seeded by (run seed, epoch, index), so it does not depend on which worker loads it or on where a
resumed run starts: a resumed run sees exactly the batches an uninterrupted one would. Data
problems (missing or empty folders, unreadable images, class counts that disagree with the
configuration) raise DataError naming the path before training starts, all of them at once.
"""

from __future__ import annotations

import colorsys
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision import datasets, transforms

from kit.config import CUES, DataConfig, SyntheticConfig
from kit.paths import resolve
from kit.preflight import (CIFAR_LAYOUTS, IMAGE_SUFFIXES, DataError, empty_class_folders,
                           read_cifar_pickle)

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

Key = tuple[int, int]  # (epoch, index)


# ---------------------------------------------------------------------------------------------
# The synthetic world
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SyntheticDraw:
    """What a synthetic sample shows: its label, mixture component and each cue's class."""

    label: int
    component: int
    cue_values: dict[str, int]


class SyntheticWorld(Dataset):
    """Images rendered on the fly from (world seed, split, index): an object on a grey field
    whose colour (hue), shape (number and depth of lobes), texture (stripe orientation) and
    position (angle around the centre) each show a class. In each mixture component only the
    component's cues show the label, each with probability `strength[cue]`; all other cues show
    random classes. No disk, no state, identical in every worker."""

    SPLITS = {"train": 0, "eval": 1}

    def __init__(self, world: SyntheticConfig, num_classes: int, image_size: int,
                 split: str) -> None:
        self.world, self.num_classes, self.image_size = world, num_classes, image_size
        self.split = self.SPLITS[split]
        self.size = world.num_train if split == "train" else world.num_eval
        weights = np.array([c.weight for c in world.components])
        self.component_weights = weights / weights.sum()
        axis = np.linspace(-1.0, 1.0, image_size, dtype=np.float32)
        self.grid_x, self.grid_y = np.meshgrid(axis, axis)

    def __len__(self) -> int:
        return self.size

    def _rng(self, index: int) -> np.random.Generator:
        if not 0 <= index < self.size:
            raise IndexError(index)
        return np.random.default_rng([self.world.seed, self.split, index])

    def _draw(self, rng: np.random.Generator) -> SyntheticDraw:
        label = int(rng.integers(self.num_classes))
        component = int(rng.choice(len(self.component_weights), p=self.component_weights))
        carrying = self.world.components[component].cues
        values = {}
        for cue in CUES:  # two draws per cue whatever the branch, so streams stay aligned
            shows_label, other = rng.random(), int(rng.integers(self.num_classes))
            strength = self.world.strength.get(cue, 1.0)
            values[cue] = label if cue in carrying and shows_label < strength else other
        return SyntheticDraw(label, component, values)

    def draw(self, index: int) -> SyntheticDraw:
        return self._draw(self._rng(index))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = self._rng(index)
        drawn = self._draw(rng)
        return torch.from_numpy(self._render(drawn.cue_values, rng)), drawn.label

    def _render(self, values: dict[str, int], rng: np.random.Generator) -> np.ndarray:
        classes = self.num_classes
        angle = 2 * np.pi * values["position"] / classes
        centre = 0.45 * np.array([np.cos(angle), np.sin(angle)]) + rng.normal(0, 0.04, 2)
        dx, dy = self.grid_x - centre[0], self.grid_y - centre[1]
        lobes = 3 + values["shape"] % 5
        levels = max(1, (classes - 1) // 5)
        depth = 0.1 + 0.4 * (values["shape"] // 5) / levels
        theta = np.arctan2(dy, dx) - rng.uniform(0, 2 * np.pi)
        boundary = 0.5 * (1 - depth * (0.5 + 0.5 * np.cos(lobes * theta)))
        inside = np.hypot(dx, dy) <= boundary
        stripe_angle = np.pi * values["texture"] / classes
        phase = (dx * np.cos(stripe_angle) + dy * np.sin(stripe_angle)) * (np.pi * 6)
        shade = 0.65 + 0.35 * np.sign(np.sin(phase))
        rgb = np.array(colorsys.hsv_to_rgb(values["colour"] / classes, 0.85, 1.0),
                       dtype=np.float32)
        image = np.where(inside, shade * rgb[:, None, None], 0.5).astype(np.float32)
        image += rng.normal(0, self.world.noise, image.shape).astype(np.float32)
        return (image - 0.5) / 0.25


# ---------------------------------------------------------------------------------------------
# Images on disk
# ---------------------------------------------------------------------------------------------

def open_image(path: str) -> Image.Image:
    """An RGB image; an unreadable file raises DataError naming it. A resumed run would read it
    again at the same step, so the message says how to get past it."""
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, SyntaxError, ValueError) as error:
        raise DataError(f"{path}: cannot read image ({error}); replace or remove the file, then "
                        "re-run to resume (data.verify_images: true lists every unreadable "
                        "image before training)") from None


def unreadable_images(paths: list[str]) -> list[str]:
    """The files that do not decode, each with its error (checked before any training)."""
    bad = []
    for path in paths:
        try:
            with Image.open(path) as image:
                image.load()
        except (OSError, SyntaxError, ValueError) as error:
            bad.append(f"{path} ({error})")
    if not bad:
        return []
    more = f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else ""
    return [f"{len(bad)} unreadable image(s):\n  " + "\n  ".join(bad[:10]) + more]


class ImageList(Dataset):
    """(path, label) pairs, read with open_image; `classes` names the labels in order."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[Any]) -> None:
        self.samples, self.classes = samples, classes

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        path, label = self.samples[index]
        return open_image(path), label


def _existing_folder(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise DataError(f"{path}: {what} folder does not exist (data.root)")
    return path


def image_folder(root: Path, split: str) -> ImageList:
    """ImageNet layout: root/{train,val}/<class>/<image>."""
    folder = _existing_folder(root / split, f"ImageFolder '{split}'")
    if not any(p.is_dir() for p in folder.iterdir()):
        raise DataError(f"{folder}: no class folders with images")
    empty = empty_class_folders(folder)
    if empty:
        raise DataError("\n".join(f"{path}: class folder without images" for path in empty))
    found = datasets.ImageFolder(str(folder), loader=open_image,
                                 is_valid_file=lambda p: p.lower().endswith(IMAGE_SUFFIXES))
    return ImageList(found.samples, found.classes)


class CifarImages(Dataset):
    """CIFAR images (PIL, as torchvision's reader gives them) and labels, read from the python
    pickles with either text or bytes keys (files re-saved from Python 3 have bytes keys, which
    torchvision's own reader refuses with a bare KeyError)."""

    def __init__(self, images: np.ndarray, labels: list[int], classes: list[str]) -> None:
        self.images, self.labels, self.classes = images, labels, classes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        return Image.fromarray(self.images[index]), self.labels[index]


def cifar(kind: str, root: Path, split: str) -> CifarImages:
    """CIFAR-10/100 in torchvision's layout: root/cifar-10-batches-py or root/cifar-100-python."""
    layout = CIFAR_LAYOUTS[kind]
    folder = _existing_folder(root, "CIFAR") / layout.folder
    names = layout.train if split == "train" else layout.test
    missing = [name for name in (*names, layout.meta) if not (folder / name).is_file()]
    if missing:
        raise DataError(f"{folder}: missing {', '.join(missing)} (expected "
                        f"{', '.join((*layout.train, *layout.test, layout.meta))} in "
                        "torchvision's format)")
    meta_path = folder / layout.meta
    meta = read_cifar_pickle(meta_path)
    if layout.names_key not in meta:
        raise DataError(f"{meta_path}: no '{layout.names_key}' (has {', '.join(meta)})")
    images, labels = [], []
    for name in names:
        batch = read_cifar_pickle(folder / name)
        if "data" not in batch or layout.labels_key not in batch:
            raise DataError(f"{folder / name}: expected 'data' and '{layout.labels_key}' "
                            f"(has {', '.join(batch)})")
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels += [int(label) for label in batch[layout.labels_key]]
    return CifarImages(np.concatenate(images).transpose(0, 2, 3, 1), labels,
                       meta[layout.names_key])


def inat18(root: Path, split: str) -> ImageList:
    """iNaturalist 2018: root/{train,val}2018.json (COCO-like) and the image paths they name."""
    index_file = _existing_folder(root, "iNat18") / f"{split}2018.json"
    if not index_file.is_file():
        raise DataError(f"{index_file}: iNat18 index file not found")
    try:
        index = json.loads(index_file.read_text())
        files = {image["id"]: image["file_name"] for image in index["images"]}
        labels = {a["image_id"]: a["category_id"] for a in index["annotations"]}
        category_ids = sorted({c["id"] for c in index.get("categories", [])}
                              or set(labels.values()))
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise DataError(f"{index_file}: not a COCO-style index ({error!r})") from None
    class_of = {category: position for position, category in enumerate(category_ids)}
    samples = [(str(root / files[image_id]), class_of[labels[image_id]]) for image_id in files
               if image_id in labels]
    if not samples:
        raise DataError(f"{index_file}: no annotated images")
    return ImageList(samples, category_ids)


# ---------------------------------------------------------------------------------------------
# Augmentation, samples, order
# ---------------------------------------------------------------------------------------------

def augmentation(augment: str, image_size: int, train: bool, from_images: bool
                 ) -> Callable[[Any], torch.Tensor]:
    """AlgoPerf's ImageNet pipeline (RandomResizedCrop 0.08-1 + flip; eval resize by 256/224 and
    centre crop), pad-crop + flip for small images, or none."""
    steps: list[Callable] = []
    if augment == "algoperf":
        steps = ([transforms.RandomResizedCrop(image_size, scale=(0.08, 1.0)),
                  transforms.RandomHorizontalFlip()] if train else
                 [transforms.Resize(round(image_size * 256 / 224)),
                  transforms.CenterCrop(image_size)])
    elif augment == "crop_flip":
        steps = [transforms.Resize(image_size), transforms.CenterCrop(image_size)]
        if train:
            steps += [transforms.RandomCrop(image_size, padding=image_size // 8,
                                            padding_mode="reflect"),
                      transforms.RandomHorizontalFlip()]
    elif from_images:
        steps = [transforms.Resize(image_size), transforms.CenterCrop(image_size)]
    if from_images:
        steps += [transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return transforms.Compose(steps)


def resolved_augment(data: DataConfig) -> str:
    """'auto' means none for synthetic renders, AlgoPerf's pipeline from 64 px, pad-crop below."""
    if data.augment != "auto":
        return data.augment
    if data.kind == "synthetic":
        return "none"
    return "algoperf" if data.image_size >= 64 else "crop_flip"


class Samples(Dataset):
    """A dataset read by (epoch, index) keys, each sample augmented with its own seeded RNG."""

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor], seed: int) -> None:
        self.base, self.transform, self.seed = base, transform, seed

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key: Key) -> tuple[torch.Tensor, int]:
        epoch, index = key
        image, label = self.base[index]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(hash((self.seed, epoch, index)) & 0x7FFF_FFFF_FFFF)
            return self.transform(image), label


class ResumableOrder(Sampler[Key]):
    """This rank's share of each epoch's shuffled order (DistributedSampler's), as keys, starting
    after the batches a resumed run has already consumed."""

    def __init__(self, size: int, rank: int, world_size: int, seed: int, local_batch: int) -> None:
        self.shard = DistributedSampler(range(size), num_replicas=world_size, rank=rank,
                                        shuffle=True, seed=seed, drop_last=True)
        self.local_batch = local_batch
        self.epoch, self.skip = 0, 0

    def set_position(self, epoch: int, batches_done: int) -> None:
        self.shard.set_epoch(epoch)
        self.epoch, self.skip = epoch, batches_done * self.local_batch

    def batches_per_epoch(self) -> int:
        return len(self.shard) // self.local_batch

    def __iter__(self) -> Iterator[Key]:
        for position, index in enumerate(self.shard):
            if position >= self.skip:
                yield self.epoch, index

    def __len__(self) -> int:
        return len(self.shard) - self.skip


# ---------------------------------------------------------------------------------------------
# Everything a run reads
# ---------------------------------------------------------------------------------------------

@dataclass
class RunData:
    """Loaders of one rank: training batches, BN-recalibration batches and evaluation batches."""

    train: DataLoader
    order: ResumableOrder
    recalibration: DataLoader
    eval: DataLoader
    num_train: int
    num_eval: int


def datasets_for(data: DataConfig, num_classes: int) -> tuple[Dataset, Dataset]:
    """The (train, eval) base datasets, checked against the configuration."""
    if data.kind == "synthetic":
        return (SyntheticWorld(data.synthetic, num_classes, data.image_size, "train"),
                SyntheticWorld(data.synthetic, num_classes, data.image_size, "eval"))
    root = resolve(data.root)
    _existing_folder(root, "data")
    readers: dict[str, Callable[[str], Dataset]] = {
        "imagefolder": lambda split: image_folder(root, split),
        "inat18": lambda split: inat18(root, split),
        "cifar10": lambda split: cifar("cifar10", root, split),
        "cifar100": lambda split: cifar("cifar100", root, split)}
    on_disk = {"train": "train", "eval": "test" if data.kind.startswith("cifar") else "val"}
    found, problems = {}, []
    for split, name in on_disk.items():
        try:
            found[split] = readers[data.kind](name)
        except DataError as error:
            problems.append(str(error))
    for split, dataset in found.items():
        if len(dataset.classes) != num_classes:
            problems.append(f"{root}: the {split} split has {len(dataset.classes)} classes but "
                            f"the configuration says num_classes: {num_classes}")
        if len(dataset) == 0:
            problems.append(f"{root}: the {split} split is empty")
    if data.verify_images:
        problems += unreadable_images([path for dataset in found.values()
                                       if isinstance(dataset, ImageList)
                                       for path, _ in dataset.samples])
    if problems:
        raise DataError("\n".join(problems))
    return found["train"], found["eval"]


def build(data: DataConfig, num_classes: int, seed: int, batch_size: int, rank: int,
          world_size: int, num_workers: int, recalibration_batches: int, pin_memory: bool
          ) -> RunData:
    """Loaders for one rank of a run whose global batch is `batch_size`."""
    train_base, eval_base = datasets_for(data, num_classes)
    local_batch = batch_size // world_size
    if len(train_base) < batch_size:
        raise DataError(f"the training split has {len(train_base)} images, fewer than one global "
                        f"batch ({batch_size})")
    from_images = data.kind != "synthetic"
    augment = resolved_augment(data)
    train = Samples(train_base, augmentation(augment, data.image_size, True, from_images), seed)
    plain = augmentation(augment, data.image_size, False, from_images)
    order = ResumableOrder(len(train_base), rank, world_size, seed, local_batch)
    # BN recalibration reads fixed training images with eval preprocessing, the same every time
    chosen = torch.randperm(len(train_base), generator=torch.Generator().manual_seed(seed))
    recalibration_keys = [(0, int(i)) for i in chosen[:recalibration_batches * batch_size]]
    eval_keys = [(0, i) for i in range(len(eval_base))]

    def loader(dataset: Dataset, sampler: Any, drop_last: bool = False) -> DataLoader:
        return DataLoader(dataset, batch_size=local_batch, sampler=sampler, drop_last=drop_last,
                          num_workers=num_workers, pin_memory=pin_memory,
                          persistent_workers=num_workers > 0,
                          prefetch_factor=4 if num_workers > 0 else None)

    return RunData(
        train=loader(train, order, drop_last=True),
        order=order,
        recalibration=loader(Samples(train_base, plain, seed),
                             recalibration_keys[rank::world_size]),
        eval=loader(Samples(eval_base, plain, seed), eval_keys[rank::world_size]),
        num_train=len(train_base), num_eval=len(eval_base))


# ---------------------------------------------------------------------------------------------
# Pre-flight checks and probe inputs
# ---------------------------------------------------------------------------------------------

class Transformed(Dataset):
    """A base dataset with a fixed (evaluation) transform: what feature extraction reads."""

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor]) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[index]
        return self.transform(image), label


def probe_datasets(data: DataConfig, num_classes: int) -> tuple[Dataset, Dataset]:
    """(train, eval) splits with evaluation transforms, for frozen-feature probes."""
    train, evaluation = datasets_for(data, num_classes)
    from_images = data.kind != "synthetic"
    augment = resolved_augment(data)
    plain = augmentation(augment, data.image_size, False, from_images)
    return Transformed(train, plain), Transformed(evaluation, plain)
