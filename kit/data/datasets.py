"""Training data: the offline synthetic world, ImageNet-style folders, CIFAR-10/100 and iNat18.

Datasets of pictures yield uint8 images [3, H, W]: JPEGs are decoded by torchvision
(libjpeg-turbo) and augmented as tensors, and normalisation happens on the device (kit.prefetch).
The synthetic world stays float and standardised: its renders are tiny (16-32 px), so their bytes
cost nothing, and quantising them would change every synthetic result the kit has recorded.
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
from torchvision import datasets
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2

from kit.core.paths import resolve
from kit.data.preflight import (
    CIFAR_LAYOUTS,
    IMAGE_SUFFIXES,
    DataError,
    cifar_class_names,
    empty_class_folders,
    read_cifar_pickle,
)
from kit.data.settings import CUES, DataSettings, SyntheticSettings

Key = tuple[int, int]  # (epoch, index)


# ---------------------------------------------------------------------------------------------
# The synthetic world
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SyntheticDraw:
    """What a synthetic sample shows: its label, mixture component and each cue's class (None
    where the component does not show that cue)."""

    label: int
    component: int
    cue_values: dict[str, int | None]


def _figure(u: np.ndarray, v: np.ndarray, shape: int) -> np.ndarray:
    """Whether each point (u, v), in units of the object's radius, lies inside figure `shape`:
    ten outlines a small CNN can tell apart at 24 px (beyond ten classes they repeat smaller)."""
    r = np.hypot(u, v)
    p, q = (u + v) / np.sqrt(2), (u - v) / np.sqrt(2)
    figures = (
        lambda: r <= 1.0,                                                     # disc
        lambda: np.maximum(abs(u), abs(v)) <= 0.8,                            # square
        lambda: abs(u) + abs(v) <= 1.1,                                       # diamond
        lambda: (v <= 0.6) & (abs(u) <= 0.6 * (v + 1.0)),                     # triangle, up
        lambda: (v >= -0.6) & (abs(u) <= 0.6 * (1.0 - v)),                    # triangle, down
        lambda: (r >= 0.55) & (r <= 1.0),                                     # ring
        lambda: (np.minimum(abs(u), abs(v)) <= 0.33) & (np.maximum(abs(u), abs(v)) <= 1.0),
        lambda: (np.minimum(abs(p), abs(q)) <= 0.33) & (np.maximum(abs(p), abs(q)) <= 1.0),
        lambda: (abs(u) <= 1.0) & (abs(v) <= 0.4),                            # bar, lying
        lambda: (abs(u) <= 0.4) & (abs(v) <= 1.0),                            # bar, standing
    )
    return figures[shape % len(figures)]()


#: synthetic worlds whose rendered images a process keeps (a sample is a pure function of its
#: world, split and index): runs trained in turn in one process, and every probe of a task,
#: render each image once. About 7 kB an image at 24 px: 8 worlds of 8,192 images, 0.5 GB.
RENDERED_WORLDS = 8
_RENDERED: dict[tuple, dict[int, tuple[torch.Tensor, int]]] = {}


class SyntheticWorld(Dataset):
    """Images rendered on the fly from (world seed, split, index): an object on a grey field
    whose colour (hue), shape (one of ten figures), texture (stripe orientation) and position
    (angle around the centre) each show a class. In each mixture component only the
    component's cues show the label, each with probability `strength[cue]`; its absent cues are
    not shown (grey, unstriped, a disc, centred) and all other cues show random classes. No
    disk, no state, identical in every worker."""

    SPLITS = {"train": 0, "eval": 1}
    #: the object's radius, in units of half the image side
    RADIUS = 0.5

    def __init__(self, world: SyntheticSettings, num_classes: int, image_size: int,
                 split: str) -> None:
        self.world, self.num_classes, self.image_size = world, num_classes, image_size
        self.split = self.SPLITS[split]
        self.size = world.num_train if split == "train" else world.num_eval
        weights = np.array([c.weight for c in world.components])
        self.component_weights = weights / weights.sum()
        axis = np.linspace(-1.0, 1.0, image_size, dtype=np.float32)
        self.grid_x, self.grid_y = np.meshgrid(axis, axis)
        self._key = (world.model_dump_json(), num_classes, image_size, self.split)

    def __len__(self) -> int:
        return self.size

    def _rng(self, index: int) -> np.random.Generator:
        if not 0 <= index < self.size:
            raise IndexError(index)
        return np.random.default_rng([self.world.seed, self.split, index])

    def _draw(self, rng: np.random.Generator) -> SyntheticDraw:
        label = int(rng.integers(self.num_classes))
        component = int(rng.choice(len(self.component_weights), p=self.component_weights))
        chosen = self.world.components[component]
        values: dict[str, int | None] = {}
        for cue in CUES:  # two draws per cue whatever the branch, so streams stay aligned
            shows_label, other = rng.random(), int(rng.integers(self.num_classes))
            strength = self.world.strength.get(cue, 1.0)
            values[cue] = (None if cue in chosen.absent
                           else label if cue in chosen.cues and shows_label < strength
                           else other)
        return SyntheticDraw(label, component, values)

    def draw(self, index: int) -> SyntheticDraw:
        return self._draw(self._rng(index))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rendered = _RENDERED.get(self._key)
        if rendered is None:
            rendered = _RENDERED[self._key] = {}
            while len(_RENDERED) > RENDERED_WORLDS:
                del _RENDERED[next(iter(_RENDERED))]  # the least recently made
        if index not in rendered:
            rng = self._rng(index)
            drawn = self._draw(rng)
            rendered[index] = (torch.from_numpy(self._render(drawn.cue_values, rng)), drawn.label)
        image, label = rendered[index]
        return image.clone(), label  # a transform may write into what it is given

    def _render(self, values: dict[str, int | None], rng: np.random.Generator) -> np.ndarray:
        classes = self.num_classes
        centre = rng.normal(0, 0.04, 2)
        if values["position"] is not None:
            angle = 2 * np.pi * values["position"] / classes
            centre += 0.45 * np.array([np.cos(angle), np.sin(angle)])
        dx, dy = self.grid_x - centre[0], self.grid_y - centre[1]
        radius = self.RADIUS * rng.uniform(0.9, 1.1)
        shape = values["shape"]
        level = 0 if shape is None else shape // 10  # classes beyond ten: smaller figures
        inside = _figure(dx / radius * (1 + 0.3 * level), dy / radius * (1 + 0.3 * level),
                         0 if shape is None else shape)
        if values["texture"] is None:
            shade = np.full_like(dx, 0.85)
        else:
            stripe_angle = np.pi * values["texture"] / classes
            phase = (dx * np.cos(stripe_angle) + dy * np.sin(stripe_angle)) * (np.pi * 6)
            shade = 0.65 + 0.35 * np.sign(np.sin(phase))
        hue, saturation = (0.0, 0.0) if values["colour"] is None else (values["colour"] / classes,
                                                                        0.85)
        rgb = np.array(colorsys.hsv_to_rgb(hue, saturation, 1.0), dtype=np.float32)
        image = np.where(inside, shade * rgb[:, None, None], 0.5).astype(np.float32)
        image += rng.normal(0, self.world.noise, image.shape).astype(np.float32)
        return (image - 0.5) / 0.25


def bayes_ceiling(world: SyntheticSettings, num_classes: int) -> float:
    """The best top-1 any classifier can reach on this world if it reads every cue perfectly:
    the probability mass of the most likely label of each combination of cue values. A task
    whose components cannot be told apart (each shows a random class in the cues it does not
    carry) has a ceiling well below 100%, and no representation can be blamed for it."""
    weights = np.array([c.weight for c in world.components])
    weights = weights / weights.sum()
    shape = (num_classes,) + (num_classes + 1,) * len(CUES)  # label, then each cue (+ absent)
    joint = np.zeros(shape)
    eye = np.eye(num_classes)
    for weight, component in zip(weights, world.components):
        term = np.full(shape, weight / num_classes)
        for axis, cue in enumerate(CUES, start=1):
            given = np.zeros((num_classes, num_classes + 1))  # P(cue value | label)
            if cue in component.absent:
                given[:, num_classes] = 1.0
            elif cue in component.cues:
                strength = world.strength.get(cue, 1.0)
                given[:, :num_classes] = strength * eye + (1 - strength) / num_classes
            else:
                given[:, :num_classes] = 1.0 / num_classes
            view = [1] * len(shape)
            view[0], view[axis] = num_classes, num_classes + 1
            term = term * given.reshape(view)
        joint += term
    return float(joint.max(axis=0).sum())


# ---------------------------------------------------------------------------------------------
# Images on disk
# ---------------------------------------------------------------------------------------------

def open_image(path: str) -> torch.Tensor:
    """An RGB image as uint8 [3, H, W]: JPEG, PNG and WebP decoded by torchvision (about twice
    PIL's speed), other formats by PIL; an unreadable file raises DataError naming it."""
    try:
        return decode_image(path, mode=ImageReadMode.RGB)
    except RuntimeError:
        pass  # a format torchvision does not decode (BMP), or a broken file: PIL says which
    try:
        with Image.open(path) as image:
            return torch.from_numpy(np.asarray(image.convert("RGB"))).permute(2, 0, 1)
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

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
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
    """CIFAR images (uint8 [3, 32, 32]) and labels, read from the python
    pickles with either text or bytes keys (files re-saved from Python 3 have bytes keys, which
    torchvision's own reader refuses with a bare KeyError)."""

    def __init__(self, images: np.ndarray, labels: list[int], classes: list[str]) -> None:
        self.images, self.labels, self.classes = images, labels, classes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(self.images[index]).permute(2, 0, 1), self.labels[index]


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
    classes = cifar_class_names(folder, layout)
    images, labels = [], []
    for name in names:
        batch = read_cifar_pickle(folder / name)
        if "data" not in batch or layout.labels_key not in batch:
            raise DataError(f"{folder / name}: expected 'data' and '{layout.labels_key}' "
                            f"(has {', '.join(batch)})")
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels += [int(label) for label in batch[layout.labels_key]]
    return CifarImages(np.concatenate(images).transpose(0, 2, 3, 1), labels, classes)


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
                 ) -> Callable[[torch.Tensor], torch.Tensor]:
    """AlgoPerf's ImageNet pipeline (RandomResizedCrop 0.08-1 + flip; eval resize by 256/224 and
    centre crop), pad-crop + flip for small images, or none; uint8 tensors in and out.

    Crops and flips draw the same random numbers as the former PIL pipeline, so a seed gives the
    same crop. Resizing is torchvision's antialiased bilinear on uint8 tensors, not PIL's: the
    two round differently on a few pixels, by at most one grey level (mean difference below
    1e-4 in standardised units on photo-like JPEGs; tests/test_data.py measures it)."""
    steps: list[Callable] = []
    if augment == "algoperf":
        steps = ([v2.RandomResizedCrop(image_size, scale=(0.08, 1.0), antialias=True),
                  v2.RandomHorizontalFlip()] if train else
                 [v2.Resize(round(image_size * 256 / 224), antialias=True),
                  v2.CenterCrop(image_size)])
    elif augment == "crop_flip":
        steps = [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
        if train:
            steps += [v2.RandomCrop(image_size, padding=image_size // 8, padding_mode="reflect"),
                      v2.RandomHorizontalFlip()]
    elif from_images:
        steps = [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
    return v2.Compose(steps) if steps else v2.Identity()


def resolved_augment(data: DataSettings) -> str:
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
        if isinstance(self.transform, v2.Identity):  # draws nothing: no generator to seed
            return image, label
        # the CPU generator directly: torch.random.fork_rng costs as much as a fifth of a decode
        generator = torch.default_generator
        outside = generator.get_state()
        generator.manual_seed(hash((self.seed, epoch, index)) & 0x7FFF_FFFF_FFFF)
        try:
            return self.transform(image), label
        finally:
            generator.set_state(outside)


class ResumableOrder(Sampler[Key]):
    """This rank's share of each epoch's shuffled order (DistributedSampler's), as keys, starting
    after the batches a resumed run has already consumed.

    Rank r holds the global batch's positions r, r + W, r + 2W, ... (W ranks). Within each local
    batch, micro-batch j gathers every M-th of them from the j-th (M micro-batches), so it holds
    the global positions congruent to j W + r modulo W M: the global batch splits into the same
    BatchNorm groups for any number of ranks with the same number of groups W M."""

    def __init__(self, size: int, rank: int, world_size: int, seed: int, local_batch: int,
                 micro_batches: int = 1) -> None:
        self.shard = DistributedSampler(range(size), num_replicas=world_size, rank=rank,
                                        shuffle=True, seed=seed, drop_last=True)
        self.local_batch = local_batch
        self.micro_order = [k for j in range(micro_batches)
                            for k in range(j, local_batch, micro_batches)]
        self.epoch, self.skip = 0, 0

    def set_position(self, epoch: int, batches_done: int) -> None:
        self.shard.set_epoch(epoch)
        self.epoch, self.skip = epoch, batches_done * self.local_batch

    def batches_per_epoch(self) -> int:
        return len(self.shard) // self.local_batch

    def __iter__(self) -> Iterator[Key]:
        batch: list[int] = []
        for position, index in enumerate(self.shard):
            if position >= self.skip:
                batch.append(index)
            if len(batch) == self.local_batch:
                yield from ((self.epoch, batch[k]) for k in self.micro_order)
                batch = []
        yield from ((self.epoch, index) for index in batch)  # the incomplete last batch

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


def datasets_for(data: DataSettings, num_classes: int) -> tuple[Dataset, Dataset]:
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


def build(data: DataSettings, num_classes: int, seed: int, batch_size: int, rank: int,
          world_size: int, num_workers: int, recalibration_batches: int, pin_memory: bool,
          micro_batch: int | None = None) -> RunData:
    """Loaders for one rank of a run whose global batch is `batch_size`, each training batch
    ordered as its micro-batches; recalibration and evaluation read micro-batches."""
    train_base, eval_base = datasets_for(data, num_classes)
    local_batch = batch_size // world_size
    micro_batch = micro_batch or local_batch
    if len(train_base) < batch_size:
        raise DataError(f"the training split has {len(train_base)} images, fewer than one global "
                        f"batch ({batch_size})")
    from_images = data.kind != "synthetic"
    augment = resolved_augment(data)
    train = Samples(train_base, augmentation(augment, data.image_size, True, from_images), seed)
    plain = augmentation(augment, data.image_size, False, from_images)
    order = ResumableOrder(len(train_base), rank, world_size, seed, local_batch,
                           local_batch // micro_batch)
    # BN recalibration reads fixed training images with eval preprocessing, the same every time
    chosen = torch.randperm(len(train_base), generator=torch.Generator().manual_seed(seed))
    recalibration_keys = [(0, int(i)) for i in chosen[:recalibration_batches * batch_size]]
    eval_keys = [(0, i) for i in range(len(eval_base))]

    def loader(dataset: Dataset, sampler: Any, batch: int = micro_batch, drop_last: bool = False
               ) -> DataLoader:
        return DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=drop_last,
                          num_workers=num_workers, pin_memory=pin_memory,
                          persistent_workers=num_workers > 0,
                          prefetch_factor=4 if num_workers > 0 else None)

    return RunData(
        train=loader(train, order, local_batch, drop_last=True),
        order=order,
        recalibration=loader(Samples(train_base, plain, seed),
                             recalibration_keys[rank::world_size]),
        eval=loader(Samples(eval_base, plain, seed), eval_keys[rank::world_size]),
        num_train=len(train_base), num_eval=len(eval_base))


# ---------------------------------------------------------------------------------------------
# Pre-flight checks and probe inputs
# ---------------------------------------------------------------------------------------------

class Transformed(Dataset):
    """A base dataset with a fixed (evaluation) transform: what feature extraction reads (uint8
    images, normalised on the device like training batches)."""

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor]) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[index]
        return self.transform(image), label


def probe_datasets(data: DataSettings, num_classes: int) -> tuple[Dataset, Dataset]:
    """(train, eval) splits with evaluation transforms, for frozen-feature probes."""
    train, evaluation = datasets_for(data, num_classes)
    from_images = data.kind != "synthetic"
    augment = resolved_augment(data)
    plain = augmentation(augment, data.image_size, False, from_images)
    return Transformed(train, plain), Transformed(evaluation, plain)


# ---------------------------------------------------------------------------------------------
# Probe subsets
# ---------------------------------------------------------------------------------------------

def labels_of(dataset: Dataset) -> np.ndarray:
    """Every label of a dataset without decoding an image (folders and CIFAR list them; the
    synthetic world draws them)."""
    base = dataset.base if isinstance(dataset, Transformed) else dataset
    if isinstance(base, SyntheticWorld):
        return np.array([base.draw(index).label for index in range(len(base))])
    if isinstance(base, ImageList):
        return np.array([label for _, label in base.samples])
    if isinstance(base, CifarImages):
        return np.asarray(base.labels)
    return np.array([int(base[index][1]) for index in range(len(base))])


def balanced_subset(labels: np.ndarray, rows: int, seed: int) -> np.ndarray:
    """`rows` indices drawn with a seed, as equal per class as the classes allow (a class with
    too few images gives all it has, the others share the rest), in sorted order. Datasets on
    disk are ordered by class, so the first N rows would hold only the first classes."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    pools = {c: rng.permutation(np.flatnonzero(labels == c)) for c in classes}
    take = dict.fromkeys(classes, 0)
    left = min(rows, len(labels))
    while left:
        open_classes = [c for c in classes if take[c] < len(pools[c])]
        share, extra = divmod(left, len(open_classes))
        lucky = set(rng.choice(open_classes, size=extra, replace=False).tolist())
        for c in open_classes:
            grant = min(share + (c in lucky), len(pools[c]) - take[c])
            take[c] += grant
            left -= grant
    return np.sort(np.concatenate([pools[c][:take[c]] for c in classes]))
