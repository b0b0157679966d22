"""The network a run's settings describe (model, classes, width, stem, image size), built, and
written untrained as a kit checkpoint: the file `kit.train.backbones.load_backbone` reads,
holding the weights and the settings that rebuild the architecture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from kit import models
from kit.files import files
from kit.train.settings import TrainSettings


def network(settings: TrainSettings) -> models.KitResNet:
    """The untrained network of `settings`, initialised from torch's current generator."""
    return models.build(
        settings.model,
        settings.num_classes,
        settings.width,
        settings.stem,
        settings.data.image_size,
    )


def write_untrained(path: Path, settings: TrainSettings, config: dict[str, Any]) -> None:
    """The network of `settings` initialised from its seed, written hashed and atomically to
    `path` with `config` as the settings it records."""
    torch.manual_seed(settings.seed)
    built = network(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    with files.hashed_write(path) as handle:
        torch.save({"model": built.state_dict(), "config": config}, handle)
