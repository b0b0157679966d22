"""The offline synthetic world (kit.data.synthetic), rendered in memory: the `synthetic` kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.data.kinds.base import DatasetKind, DataSource

if TYPE_CHECKING:
    from kit.data.synthetic import SyntheticWorld


class SyntheticKind(DatasetKind):
    """Images rendered from the `synthetic` section's world: no disk, no class names."""

    name = "synthetic"
    reads_disk = False
    section = "synthetic"
    probe_grid = "imagenet"

    def expected_sizes(self, data: DataSource) -> tuple[int, int] | None:
        assert data.synthetic is not None
        return data.synthetic.num_train, data.synthetic.num_eval

    def open_split(self, data: DataSource, split: str, num_classes: int) -> SyntheticWorld:
        from kit.data.synthetic import SyntheticWorld

        assert data.synthetic is not None, "DataSettings gives the synthetic section"
        return SyntheticWorld(data.synthetic, num_classes, data.image_size, split)
