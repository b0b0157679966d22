"""The training input pipeline: augmentation, (epoch, index) samples, resumable order, loaders.

Datasets of pictures yield uint8 images [3, H, W]: JPEGs are decoded by torchvision
(libjpeg-turbo) and augmented as tensors, and normalisation happens on the device
(kit.data.prefetch); the synthetic world's renders stay float (kit.data.synthetic). With
`data.decode: gpu` training workers read file bytes only and the device decodes and crops
whole batches (kit.data.batched); with `dali`, NVIDIA DALI does (kit.data.dali).
Every dataset is indexed by (epoch, index) keys. Each sample's augmentation is drawn from an RNG
seeded by (run seed, epoch, index), so it does not depend on which worker loads it or on where a
resumed run starts: a resumed run sees exactly the batches an uninterrupted one would. Data
problems (missing or empty folders, unreadable images, class counts that disagree with the
configuration) raise DataError naming the path before training starts, all of them at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision.transforms import v2

from kit.data import batched, crops, dali, kinds, workers
from kit.data.kinds.base import DataError, data_root, existing_folder, split_size
from kit.data.kinds.images import CifarImages, ImageList, open_image, unreadable_images
from kit.data.settings import DataSettings
from kit.data.synthetic import SyntheticWorld
from kit.runtime import machine

Key = tuple[int, int]  # (epoch, index)


def augmentation(
    augment: str, image_size: int, train: bool, from_images: bool
) -> Callable[[torch.Tensor], torch.Tensor]:
    """AlgoPerf's ImageNet pipeline (RandomResizedCrop 0.08-1 + flip; eval resize by 256/224 and
    centre crop), pad-crop + flip for small images, or none; uint8 tensors in and out.

    Crops and flips draw the same random numbers as the former PIL pipeline, so a seed gives the
    same crop. Resizing is torchvision's antialiased bilinear on uint8 tensors, not PIL's: the
    two round differently on a few pixels, by at most one grey level (mean difference below
    1e-4 in standardised units on photo-like JPEGs; tests/test_data.py measures it)."""
    steps: list[Callable] = []
    if augment == "algoperf":
        steps = (
            [
                v2.RandomResizedCrop(image_size, scale=(0.08, 1.0), antialias=True),
                v2.RandomHorizontalFlip(),
            ]
            if train
            else [
                v2.Resize(round(image_size * 256 / 224), antialias=True),
                v2.CenterCrop(image_size),
            ]
        )
    elif augment == "crop_flip":
        steps = [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
        if train:
            steps += [
                v2.RandomCrop(image_size, padding=image_size // 8, padding_mode="reflect"),
                v2.RandomHorizontalFlip(),
            ]
    elif from_images:
        steps = [v2.Resize(image_size, antialias=True), v2.CenterCrop(image_size)]
    return v2.Compose(steps) if steps else v2.Identity()


def resolved_augment(data: DataSettings) -> str:
    """'auto' means none for kinds rendered in memory (the synthetic world), AlgoPerf's
    pipeline from 64 px, pad-crop below."""
    if data.augment != "auto":
        return data.augment
    if not kinds.get(data.kind).reads_disk:
        return "none"
    return "algoperf" if data.image_size >= 64 else "crop_flip"


class Samples(Dataset):
    """A dataset read by (epoch, index) keys, each sample augmented with its own seeded RNG."""

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor], seed: int) -> None:
        self.base, self.transform, self.seed = base, transform, seed

    def __len__(self) -> int:
        return split_size(self.base)

    def __getitem__(self, key: Key) -> tuple[torch.Tensor, int]:
        epoch, index = key
        image, label = self.base[index]
        if isinstance(self.transform, v2.Identity):  # draws nothing: no generator to seed
            return image, label
        # the CPU generator directly: torch.random.fork_rng costs as much as a fifth of a decode
        generator = torch.default_generator
        outside = generator.get_state()
        generator.manual_seed(_sample_generator(self.seed, epoch, index))
        try:
            return self.transform(image), label
        finally:
            generator.set_state(outside)


def _sample_generator(seed: int, epoch: int, index: int) -> int:
    """The seed of one sample's augmentation: the same whichever worker or run reads it."""
    return hash((seed, epoch, index)) & 0x7FFF_FFFF_FFFF


class EncodedSamples(Dataset):
    """`data.decode: gpu`: (file bytes, draws, label, file) by (epoch, index) keys, the draws
    from the sample's seeded generator; a file the device's decoder does not take (not a JPEG,
    or a greyscale, CMYK or progressive one: batched.gpu_decodable) is decoded to RGB here
    instead, its size with it (the header's for file bytes: kit.data.batched.EncodedBatch)."""

    def __init__(self, base: ImageList, seed: int) -> None:
        self.base, self.seed = base, seed

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key: Key) -> tuple[torch.Tensor, torch.Tensor, int, str]:
        epoch, index = key
        path, label = self.base.samples[index]
        data = batched.file_bytes(path)
        item = data if batched.gpu_decodable(data) else open_image(path)
        generator = torch.Generator().manual_seed(_sample_generator(self.seed, epoch, index))
        return item, crops.sample_draws(generator), label, path


class DaliSamples(Dataset):
    """`data.decode: dali`: (file bytes, crop box, flip, label) by (epoch, index) keys, the box
    (top, left, height, width) and flip drawn as `EncodedSamples` draws them, from the sample's
    seeded generator, for the image's size read from its header (kit.data.dali)."""

    def __init__(self, base: ImageList, seed: int) -> None:
        self.base, self.seed = base, seed

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key: Key) -> tuple[torch.Tensor, torch.Tensor, bool, int]:
        epoch, index = key
        path, label = self.base.samples[index]
        data = batched.file_bytes(path)
        with Image.open(path) as header:  # reads the header, not the pixels
            width, height = header.size
        generator = torch.Generator().manual_seed(_sample_generator(self.seed, epoch, index))
        draws = crops.sample_draws(generator)[None]
        box = crops.crop_boxes(torch.tensor([height]), torch.tensor([width]), draws)[0]
        return data, box, bool(draws[0, -1] < 0.5), label


class ResumableOrder(Sampler[Key]):
    """This rank's share of each epoch's shuffled order (DistributedSampler's), as keys, starting
    after the batches a resumed run has already consumed.

    Rank r holds the global batch's positions r, r + W, r + 2W, ... (W ranks). Within each local
    batch, micro-batch j gathers every M-th of them from the j-th (M micro-batches), so it holds
    the global positions congruent to j W + r modulo W M: the global batch splits into the same
    BatchNorm groups for any number of ranks with the same number of groups W M."""

    def __init__(
        self,
        size: int,
        rank: int,
        world_size: int,
        seed: int,
        local_batch: int,
        micro_batches: int = 1,
    ) -> None:
        # DistributedSampler only takes the length of its dataset: the indices are the dataset
        self.shard: DistributedSampler[int] = DistributedSampler(
            range(size),  # type: ignore[arg-type]
            num_replicas=world_size,
            rank=rank,
            shuffle=True,
            seed=seed,
            drop_last=True,
        )
        self.local_batch = local_batch
        self.micro_order = [
            k for j in range(micro_batches) for k in range(j, local_batch, micro_batches)
        ]
        self.epoch, self.skip = 0, 0

    def set_position(self, epoch: int, batches_done: int) -> None:
        self.shard.set_epoch(epoch)
        self.epoch, self.skip = epoch, batches_done * self.local_batch

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
    """The (train, eval) base datasets of the data's kind, checked against the configuration."""
    kind = kinds.get(data.kind)
    if not kind.reads_disk:
        return (
            kind.open_split(data, "train", num_classes),
            kind.open_split(data, "eval", num_classes),
        )
    root = data_root(data)
    existing_folder(root, "data")
    found, problems = {}, []
    for split in ("train", "eval"):
        try:
            found[split] = kind.open_split(data, split, num_classes)
        except DataError as error:
            problems.append(str(error))
    for split, dataset in found.items():
        classes = dataset.classes  # type: ignore[attr-defined]  # every kind's split has them
        if len(classes) != num_classes:
            problems.append(
                f"{root}: the {split} split has {len(classes)} classes but "
                f"the configuration says num_classes: {num_classes}"
            )
        if split_size(dataset) == 0:
            problems.append(f"{root}: the {split} split is empty")
    if data.verify_images:
        problems += unreadable_images(
            [
                path
                for dataset in found.values()
                if isinstance(dataset, ImageList)
                for path, _ in dataset.samples
            ]
        )
    if problems:
        raise DataError("\n".join(problems))
    return found["train"], found["eval"]


def build(
    data: DataSettings,
    num_classes: int,
    seed: int,
    batch_size: int,
    rank: int,
    world_size: int,
    num_workers: int,
    recalibration_batches: int,
    pin_memory: bool,
    micro_batch: int | None = None,
    timeout_s: float = 0,
) -> RunData:
    """Loaders for one rank of a run whose global batch is `batch_size`, each training batch
    ordered as its micro-batches; recalibration and evaluation read micro-batches. Workers
    start from a fork server (kit.data.workers); a batch that takes longer than `timeout_s`
    (0: no limit) raises RuntimeError in the loader."""
    train_base, eval_base = datasets_for(data, num_classes)
    local_batch = batch_size // world_size
    micro_batch = micro_batch or local_batch
    if split_size(train_base) < batch_size:
        raise DataError(
            f"the training split has {split_size(train_base)} images, fewer than one global "
            f"batch ({batch_size})"
        )
    from_images = kinds.get(data.kind).reads_disk
    augment = resolved_augment(data)
    train, collate = training_samples(data, train_base, seed), training_collate(data, num_workers)
    plain = augmentation(augment, data.image_size, False, from_images)
    order = ResumableOrder(
        split_size(train_base), rank, world_size, seed, local_batch, local_batch // micro_batch
    )
    # BN recalibration reads fixed training images with eval preprocessing, the same every time
    chosen = torch.randperm(split_size(train_base), generator=torch.Generator().manual_seed(seed))
    recalibration_keys = [(0, int(i)) for i in chosen[: recalibration_batches * batch_size]]
    eval_keys = [(0, i) for i in range(split_size(eval_base))]

    def loader(
        dataset: Dataset,
        sampler: Any,
        batch: int = micro_batch,
        drop_last: bool = False,
        collate_fn: Callable | None = None,
    ) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch,
            sampler=sampler,
            drop_last=drop_last,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=num_workers > 0,
            collate_fn=collate_fn,
            prefetch_factor=machine.PREFETCH_FACTOR if num_workers > 0 else None,
            multiprocessing_context=workers.context() if num_workers else None,
            timeout=timeout_s if num_workers else 0,
        )

    return RunData(
        train=loader(train, order, local_batch, drop_last=True, collate_fn=collate),
        order=order,
        recalibration=loader(
            Samples(train_base, plain, seed), recalibration_keys[rank::world_size]
        ),
        eval=loader(Samples(eval_base, plain, seed), eval_keys[rank::world_size]),
        num_train=split_size(train_base),
        num_eval=split_size(eval_base),
    )


def training_samples(data: DataSettings, base: Dataset, seed: int) -> Dataset:
    """The training split as its loader reads it: augmented images (`decode: cpu`), file
    bytes and draws for the device to decode and augment (`decode: gpu`), or file bytes and
    crop boxes for DALI (`decode: dali`)."""
    if data.decode == "cpu":
        return Samples(
            base,
            augmentation(
                resolved_augment(data), data.image_size, True, kinds.get(data.kind).reads_disk
            ),
            seed,
        )
    if not isinstance(base, ImageList):
        raise DataError(
            f"data.decode: {data.decode} reads image files, but kind {data.kind} holds "
            "decoded images; set decode: cpu"
        )
    return EncodedSamples(base, seed) if data.decode == "gpu" else DaliSamples(base, seed)


def training_collate(data: DataSettings, threads: int) -> Callable | None:
    """How the training loader packs its samples into a batch: the loader's default for
    augmented images (None), one packed batch of file bytes for the device or DALI to decode
    (DALI with `threads` CPU threads, at least one)."""
    if data.decode == "gpu":
        return functools.partial(batched.collate, size=data.image_size, hardware=data.hardware_jpeg)
    if data.decode == "dali":
        return functools.partial(
            dali.collate,
            size=data.image_size,
            threads=threads,
            hw_decoder_load=data.dali_hw_decoder_load,
        )
    return None


# ---------------------------------------------------------------------------------------------
# Probe inputs
# ---------------------------------------------------------------------------------------------


class Transformed(Dataset):
    """A base dataset with a fixed (evaluation) transform: what feature extraction reads (uint8
    images, normalised on the device like training batches)."""

    def __init__(self, base: Dataset, transform: Callable[[Any], torch.Tensor]) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return split_size(self.base)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[index]
        return self.transform(image), label


def probe_datasets(data: DataSettings, num_classes: int) -> tuple[Dataset, Dataset]:
    """(train, eval) splits with evaluation transforms, for frozen-feature probes."""
    train, evaluation = datasets_for(data, num_classes)
    return evaluated(data, train), evaluated(data, evaluation)


def evaluated(data: DataSettings, base: Dataset) -> Transformed:
    """A split of `data` with its evaluation transform: what feature extraction reads."""
    from_images = kinds.get(data.kind).reads_disk
    return Transformed(
        base, augmentation(resolved_augment(data), data.image_size, False, from_images)
    )


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
    return np.array([int(base[index][1]) for index in range(split_size(base))])


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
    return np.sort(np.concatenate([pools[c][: take[c]] for c in classes]))
