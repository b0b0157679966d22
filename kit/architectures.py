"""The ResNet architectures a run can name, free of torch: one registry that a run's settings
validate `model` against and kit.models builds from, so that a new depth is one `register`
call. Each architecture also says its own sizes (channels, feature width, the numbers of its
weights and buffers) without building a network, so that what only needs those numbers (the
plan's disk estimates, kit.experiments.timecat.estimates) runs in a process that never imports
torch: `kit check` and `kit run` before their kernels (tests/test_models.py compares them
with the built networks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kit.params.registry import Registry

#: bytes of one weight or batch-norm statistic (float32, torch's default type) and of one batch
#: norm's counter of batches (int64), as a network's state dict holds them
FLOAT_BYTES, COUNTER_BYTES = 4, 8
#: the stem convolution's kernel side: 7 (stride 2, then a max-pool) for ImageNet's images, 3
#: for small ones (kit.models)
STEM_KERNELS = {"imagenet": 7, "small": 3}


@dataclass(frozen=True)
class Sizes:
    """What a network's state dict holds: the features its head reads, its parameters (weights
    and biases), its batch norms' running statistics, and their counters of batches."""

    feature_dim: int
    parameters: int
    statistics: int
    counters: int

    @property
    def state_bytes(self) -> int:
        """Bytes of the state dict's tensors (what a copy of the weights in a checkpoint or a
        snapshot takes, before the file's own overhead)."""
        return FLOAT_BYTES * (self.parameters + self.statistics) + COUNTER_BYTES * self.counters


@dataclass(frozen=True)
class Architecture:
    """A ResNet's residual blocks: bottleneck blocks (three convolutions, four times as many
    output channels) or basic ones (two convolutions), and how many in each of its four
    stages."""

    bottleneck: bool
    stages: tuple[int, int, int, int]

    @property
    def expansion(self) -> int:
        """How many times a block's inner channels its output has (torchvision's)."""
        return 4 if self.bottleneck else 1

    def channels(self, width: float) -> tuple[int, int, int, int]:
        """The inner channels of each stage's blocks at `width` (64, 128, 256, 512 at 1), at
        least one each."""
        first, second, third, fourth = (max(1, round(64 * width * 2**s)) for s in range(4))
        return first, second, third, fourth

    def feature_dim(self, width: float) -> int:
        """The width of the pooled features the head reads."""
        return self.channels(width)[3] * self.expansion

    def convolutions(
        self, width: float, stem: Literal["imagenet", "small"] = "imagenet"
    ) -> list[tuple[int, int, int]]:
        """(input channels, output channels, kernel side) of each convolution, each followed by
        a batch norm, in torchvision's layout: the stem, then each block's shortcut projection
        (where the block changes the resolution or the channels) and its own convolutions."""
        channels = self.channels(width)
        convolutions = [(3, channels[0], STEM_KERNELS[stem])]
        inputs = channels[0]
        for stage, (inner, blocks) in enumerate(zip(channels, self.stages, strict=True)):
            outputs = inner * self.expansion
            for block in range(blocks):
                if block == 0 and (stage > 0 or inputs != outputs):
                    convolutions.append((inputs, outputs, 1))
                if self.bottleneck:
                    convolutions += [(inputs, inner, 1), (inner, inner, 3), (inner, outputs, 1)]
                else:
                    convolutions += [(inputs, inner, 3), (inner, inner, 3)]
                inputs = outputs
        return convolutions

    def sizes(
        self, num_classes: int, width: float, stem: Literal["imagenet", "small"] = "imagenet"
    ) -> Sizes:
        """The sizes of the network kit.models.build makes, counted without building it: each
        convolution's weights (no bias), each batch norm's scale, shift, two running statistics
        and counter, and the head's weights and biases."""
        convolutions = self.convolutions(width, stem)
        features = self.feature_dim(width)
        return Sizes(
            feature_dim=features,
            parameters=sum(i * o * k * k + 2 * o for i, o, k in convolutions)
            + (features + 1) * num_classes,
            statistics=sum(2 * o for _, o, _ in convolutions),
            counters=len(convolutions),
        )


ARCHITECTURES: Registry[Architecture] = Registry("architecture")

for name, bottleneck, stages in (
    ("resnet10", False, (1, 1, 1, 1)),
    ("resnet18", False, (2, 2, 2, 2)),
    ("resnet34", False, (3, 4, 6, 3)),
    ("resnet50", True, (3, 4, 6, 3)),
    ("resnet101", True, (3, 4, 23, 3)),
):
    ARCHITECTURES.register(name, Architecture(bottleneck, stages))
