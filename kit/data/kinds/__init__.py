"""The registry of dataset kinds (`DataSettings.kind`): one module per kind, registered below.

To add a kind, write a module here with a kit.data.kinds.base.DatasetKind subclass and register
an instance of it in the loop at the end of this file.
"""

from __future__ import annotations

from kit.data.kinds import cifar, imagefolder, imagenet_shifts, inat18, synthetic
from kit.data.kinds.base import DatasetKind
from kit.params.registry import Registry

#: every dataset kind by the name `DataSettings.kind` gives
KINDS: Registry[DatasetKind] = Registry("dataset kind")


def get(name: str) -> DatasetKind:
    """The kind registered as `name`; ParameterError naming the known kinds otherwise."""
    return KINDS.get(name)


for kind in (
    synthetic.SyntheticKind(),
    imagefolder.ImageFolderKind(),
    cifar.Cifar10Kind(),
    cifar.Cifar100Kind(),
    inat18.INat18Kind(),
    imagenet_shifts.ImageNetV2Kind(),
    imagenet_shifts.ImageNetRKind(),
    imagenet_shifts.ImageNetSketchKind(),
    imagenet_shifts.ImageNetAKind(),
):
    KINDS.register(kind.name, kind)
