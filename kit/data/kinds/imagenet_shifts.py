"""ImageNet's distribution-shift evaluation sets, each a dataset kind in the layout its archive
unpacks to: ImageNet-V2 (matched frequency; Recht et al. 2019, github.com/modestyachts/ImageNetV2),
ImageNet-R (Hendrycks et al. 2021, github.com/hendrycks/imagenet-r), ImageNet-Sketch (Wang et al.
2019, github.com/HaohanWang/ImageNet-Sketch) and ImageNet-A (Hendrycks et al. 2021,
github.com/hendrycks/natural-adv-examples).

They are evaluation sets only: a probe fitted on ImageNet-1k's features is scored on them, so
their labels are ImageNet-1k's classes. ImageNet-V2 names its class folders by ImageNet's class
index (0-999, the sorted wnids' order), the others by wnid; ImageNet-R and ImageNet-A hold 200
of the 1,000 classes, so a prediction is taken among those 200 (`imagenet_indices` says which),
as their authors score them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from kit.data.kinds.base import DataError, DatasetKind, DataSource, data_root, existing_folder

if TYPE_CHECKING:
    from kit.data.kinds.images import ImageList


class ShiftedImageNetKind(DatasetKind):
    """An evaluation set labelled with ImageNet-1k's classes: root/<folder>/<class>/<image>."""

    probe_grid = "imagenet"
    num_classes = 1000
    #: the folder the dataset's archive unpacks to, under the root (`layout` names it too)
    folder: ClassVar[str]
    #: the suffix of its images, as its archive names them (matched in any case)
    suffix: ClassVar[str]
    #: the ImageNet-1k classes it holds (1,000, or a 200-class subset)
    holds_classes: ClassVar[int]

    def open_split(self, data: DataSource, split: str, num_classes: int) -> ImageList:
        """The evaluation split; DataError for 'train' (these sets have none)."""
        from kit.data.kinds.images import ImageList

        root = data_root(data)
        if split != "eval":
            raise DataError(
                f"{root}: kind {self.name} is an evaluation set only (no training split); a "
                "probe fitted on ImageNet-1k is scored on it"
            )
        folder = existing_folder(root / self.folder, self.name)
        classes = sorted((p.name for p in folder.iterdir() if p.is_dir()), key=self.class_order)
        if not classes:
            raise DataError(f"{folder}: no class folders with images")
        samples = [
            (str(path), label)
            for label, name in enumerate(classes)
            for path in sorted((folder / name).iterdir())
            if path.name.lower().endswith(self.suffix.lower())
        ]
        return ImageList(samples, classes)

    def class_order(self, name: str) -> str | int:
        """How the class folders sort: by wnid."""
        return name

    def imagenet_indices(self, classes: list[str], imagenet: list[str]) -> list[int]:
        """Each of `classes` (a split's, in label order) as an index into ImageNet-1k's classes
        `imagenet` (the wnids a probe was fitted on, in label order): by wnid."""
        unknown = sorted(set(classes) - set(imagenet))
        if unknown:
            raise DataError(
                f"kind {self.name}: class folders {', '.join(unknown[:3])} are not among the "
                f"{len(imagenet)} classes the ImageNet-1k probe was fitted on"
            )
        position = {wnid: index for index, wnid in enumerate(imagenet)}
        return [position[name] for name in classes]

    def layout_problems(self, root: Path) -> list[str]:
        """Besides the layout: no more class folders than the set holds."""
        problems = super().layout_problems(root)
        folder = root / self.folder
        if not problems:
            found = sum(1 for p in folder.iterdir() if p.is_dir())
            if found > self.holds_classes:
                problems.append(
                    f"{folder}: {found} class folders; kind {self.name} holds "
                    f"{self.holds_classes} of ImageNet-1k's classes"
                )
        return problems


class ImageNetV2Kind(ShiftedImageNetKind):
    """ImageNet-V2, matched frequency: 10,000 images, 10 of each class."""

    name = "imagenet-v2"
    folder = "imagenetv2-matched-frequency-format-val"
    layout = ("imagenetv2-matched-frequency-format-val/",)
    suffix = ".jpeg"
    holds_classes = 1000
    split_sizes = (0, 10_000)
    obtain = (
        "download imagenetv2-matched-frequency.tar.gz (linked from "
        "https://github.com/modestyachts/ImageNetV2) and unpack it under the root: "
        "<root>/imagenetv2-matched-frequency-format-val/<class index 0-999>/*.jpeg"
    )

    def class_order(self, name: str) -> str | int:
        """By class index, not as text (which would put 10 before 2)."""
        return int(name) if name.isdigit() else name

    def imagenet_indices(self, classes: list[str], imagenet: list[str]) -> list[int]:
        """The folder names are ImageNet-1k's class indices."""
        bad = [name for name in classes if not name.isdigit() or int(name) >= len(imagenet)]
        if bad:
            raise DataError(
                f"kind {self.name}: class folders {', '.join(bad[:3])} are not class indices "
                f"0-{len(imagenet) - 1}"
            )
        return [int(name) for name in classes]


class ImageNetRKind(ShiftedImageNetKind):
    """ImageNet-R: 30,000 renditions (art, cartoons, sculptures...) of 200 classes."""

    name = "imagenet-r"
    folder = "imagenet-r"
    layout = ("imagenet-r/",)
    suffix = ".jpg"
    holds_classes = 200
    split_sizes = (0, 30_000)
    obtain = (
        "download imagenet-r.tar (linked from https://github.com/hendrycks/imagenet-r) and "
        "unpack it under the root: <root>/imagenet-r/<wnid>/*.jpg, 200 wnids"
    )


class ImageNetSketchKind(ShiftedImageNetKind):
    """ImageNet-Sketch: 50,889 black-and-white sketches, about 50 of each class."""

    name = "imagenet-sketch"
    folder = "sketch"
    layout = ("sketch/",)
    suffix = ".JPEG"
    holds_classes = 1000
    split_sizes = (0, 50_889)
    obtain = (
        "download ImageNet-Sketch's zip (linked from https://github.com/HaohanWang/"
        "ImageNet-Sketch) and unpack it under the root: <root>/sketch/<wnid>/*.JPEG"
    )


class ImageNetAKind(ShiftedImageNetKind):
    """ImageNet-A: 7,500 natural adversarial examples of 200 classes."""

    name = "imagenet-a"
    folder = "imagenet-a"
    layout = ("imagenet-a/",)
    suffix = ".jpg"
    holds_classes = 200
    split_sizes = (0, 7_500)
    obtain = (
        "download imagenet-a.tar (linked from https://github.com/hendrycks/"
        "natural-adv-examples) and unpack it under the root: <root>/imagenet-a/<wnid>/*.jpg, "
        "200 wnids"
    )
