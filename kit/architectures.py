"""The ResNet architectures a run can name, free of torch: one registry that a run's settings
validate `model` against and kit.models builds from, so that a new depth is one `register`
call."""

from __future__ import annotations

from dataclasses import dataclass

from kit.params.registry import Registry


@dataclass(frozen=True)
class Architecture:
    """A ResNet's residual blocks: bottleneck blocks (three convolutions, four times as many
    output channels) or basic ones (two convolutions), and how many in each of its four
    stages."""

    bottleneck: bool
    stages: tuple[int, int, int, int]


ARCHITECTURES: Registry[Architecture] = Registry("architecture")

for name, bottleneck, stages in (
    ("resnet10", False, (1, 1, 1, 1)),
    ("resnet18", False, (2, 2, 2, 2)),
    ("resnet34", False, (3, 4, 6, 3)),
    ("resnet50", True, (3, 4, 6, 3)),
    ("resnet101", True, (3, 4, 23, 3)),
):
    ARCHITECTURES.register(name, Architecture(bottleneck, stages))
