"""Settings of the fast linear probe, shared by `kit.probe` and notebook 03's schema (no torch)."""

from __future__ import annotations

from pydantic import Field

from kit.params import Strict


class FastProbe(Strict):
    """Minibatch SGD (Nesterov) with cosine decay on standardised features; one head per
    (learning rate, weight decay), all trained in one pass."""

    lrs: list[float] = Field(default_factory=lambda: [0.03, 0.1, 0.3], min_length=1)
    weight_decays: list[float] = Field(default_factory=lambda: [0.0, 1.0e-4], min_length=1)
    epochs: int = Field(default=8, ge=1)
    batch_size: int = Field(default=512, ge=1)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    heldout_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    seed: int = Field(default=0, ge=0)
    device: str = Field(default="cpu", min_length=1)
