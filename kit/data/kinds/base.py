"""What every dataset kind is: the DatasetKind interface, DataError and shared layout checks.

Free of torch, like the settings that name a kind: a kind opens its splits with torch imported
inside `open_split`, so that validating parameters (`python -m kit check`) stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from PIL import Image

from kit.data.synthetic_settings import SyntheticSettings
from kit.files.paths import resolve

if TYPE_CHECKING:
    from torch.utils.data import Dataset

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
#: images of each split decoded by the pre-flight checks (from different classes where possible)
SAMPLE_IMAGES = 4


class DataError(ValueError):
    """Data that cannot be trained on, with the path that holds it."""


class DataSource(Protocol):
    """What a kind reads of a run's data settings (kit.data.settings.DataSettings has it): the
    kinds are typed against this rather than the settings class, which imports the kinds to
    check its `kind`."""

    @property
    def root(self) -> str | None: ...
    @property
    def image_size(self) -> int: ...
    @property
    def verify_images(self) -> bool: ...
    @property
    def synthetic(self) -> SyntheticSettings | None: ...


class DatasetKind:
    """One kind of data a run can read (`DataSettings.kind`), registered in kit.data.kinds.

    A kind that reads from disk opens its splits under `data.root`, and each split it returns
    has `classes` (the class names or ids, in label order), checked against the configured class
    count; its pre-flight checks are the `layout` entries under the root ('name/' a non-empty
    folder of class folders holding images, 'name' a readable file). A kind that does not read
    from disk renders its samples at the configured size, as float tensors that neither the
    resize of image kinds nor the 'auto' augmentation touches.
    """

    #: the name DataSettings.kind gives
    name: ClassVar[str]
    #: whether samples are pictures read from files under data.root (uint8, any size)
    reads_disk: ClassVar[bool] = True
    #: the DataSettings section that configures this kind, if any
    section: ClassVar[str | None] = None
    #: the authors' linear-probe weight-decay grid for this data (a key of
    #: kit.probes.settings.PAPER_WEIGHT_DECAYS)
    probe_grid: ClassVar[str]
    #: the number of classes the dataset defines, where it defines one
    num_classes: ClassVar[int | None] = None
    #: what a data root must hold, checked before anything starts
    layout: ClassVar[tuple[str, ...]] = ()
    #: where to get the data and how to lay it out, said when its root does not exist
    obtain: ClassVar[str] = ""
    #: images in the training and evaluation splits of the dataset the kind usually holds, for
    #: estimates made before the data is read (None: not known in advance)
    split_sizes: ClassVar[tuple[int, int] | None] = None
    #: bytes per image a split of this kind holds in shared memory for its loader workers
    #: (kit.data.workers.shareable; 0 for a kind that reads its images from files)
    held_bytes_per_image: ClassVar[int] = 0

    def expected_sizes(self, data: DataSource) -> tuple[int, int] | None:
        """The images of the training and evaluation splits `data` is expected to hold."""
        return self.split_sizes

    def held_bytes(self, data: DataSource) -> int:
        """Bytes of shared memory a rank's training and evaluation splits hold (estimated from
        `expected_sizes`; 0 when unknown)."""
        sizes = self.expected_sizes(data)
        return sum(sizes) * self.held_bytes_per_image if sizes else 0

    def open_split(self, data: DataSource, split: str, num_classes: int) -> Dataset:
        """The 'train' or 'eval' split as a dataset of (image, label); DataError naming the path
        when it cannot be read."""
        raise NotImplementedError

    def layout_problems(self, root: Path) -> list[str]:
        """Cheap checks of an existing, readable data root: each `layout` entry, every problem
        found, each naming its path (kinds add their own: class lists, index files, a few
        images decoded)."""
        problems = []
        for entry in self.layout:
            path = root / entry
            if entry.endswith("/"):
                if not path.is_dir() or not any(path.iterdir()):
                    problems.append(f"{path}: expected a non-empty folder for kind {self.name}")
                else:
                    problems += [
                        f"{folder}: class folder without images"
                        for folder in empty_class_folders(path)
                    ]
            elif not path.is_file():
                problems.append(f"{path}: expected file missing for kind {self.name}")
            elif not os.access(path, os.R_OK):
                problems.append(f"{path}: not readable")
        return problems


def split_size(dataset: Dataset) -> int:
    """The samples of a split. torch's Dataset declares no `__len__` (an iterable-style one has
    none); every split the kinds open and the pipeline wraps is map-style and has one."""
    return len(dataset)  # type: ignore[arg-type]


def data_root(data: DataSource) -> Path:
    """The data root of a kind that reads from disk, resolved (kit.files.paths.resolve)."""
    if data.root is None:
        raise DataError("data.root: this kind reads images from disk and needs a root")
    return resolve(data.root)


def existing_folder(path: Path, what: str) -> Path:
    """`path`, or DataError when it is not a folder."""
    if not path.is_dir():
        raise DataError(f"{path}: {what} folder does not exist (data.root)")
    return path


def _holds_an_image(folder: str) -> bool:
    """Stops at the first image found, so that a full ImageNet split is checked quickly."""
    subfolders = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir():
                subfolders.append(entry.path)
            elif entry.name.lower().endswith(IMAGE_SUFFIXES):
                return True
    return any(_holds_an_image(sub) for sub in subfolders)


def empty_class_folders(split: Path) -> list[Path]:
    """Class folders of an ImageFolder split holding no image (at any depth)."""
    return [
        folder
        for folder in sorted(p for p in split.iterdir() if p.is_dir())
        if not _holds_an_image(str(folder))
    ]


def undecodable(paths: Sequence[str]) -> list[str]:
    """The files among `paths` that do not decode, each with its error."""
    bad = []
    for path in paths:
        try:
            with Image.open(path) as image:
                image.load()
        except (OSError, SyntaxError, ValueError) as error:
            bad.append(f"{path} ({error})")
    return bad


def sample_problems(paths: Sequence[str]) -> list[str]:
    """A few of `paths` decoded (SAMPLE_IMAGES, spread over the list): one line per image that
    does not decode, or that is missing."""
    step = max(1, len(paths) // SAMPLE_IMAGES)
    sample = list(paths)[::step][:SAMPLE_IMAGES]
    return [f"{problem}: cannot decode this image" for problem in undecodable(sample)]
