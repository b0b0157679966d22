"""Notebook 01's parameters: the XOR counterexample's mixtures, replicates and sparse training.

`SparseTrainingSettings` is what `kit.experiments.toy` trains with; the notebook's schema is the
same settings plus the experiment around them, so there is one set of defaults. Free of torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, model_validator

from kit.params import bounds, params
from kit.params.params import NotebookSettings, Strict


class SparseTrainingSettings(Strict):
    """Hyper-parameters of the sparse (weight-decayed, large-step SGD) toy training."""

    n_train: int = Field(default=512, ge=8, le=bounds.ROWS)
    noise: float = Field(default=0.1, ge=0.0, le=0.4)
    lr: float = Field(default=0.5, gt=0.0, le=10.0)
    weight_decay: float = Field(default=0.01, ge=0.0)
    steps: int = Field(default=3000, ge=1, le=bounds.STEPS)
    batch_size: int = Field(default=32, ge=1, le=bounds.BATCH)
    init_scale: float = Field(default=0.1, gt=0.0)
    keep_threshold: float = Field(default=0.05, gt=0.0)
    probe_samples: int = Field(default=512, ge=16, le=bounds.ROWS)
    probe_steps: int = Field(default=300, ge=1, le=bounds.STEPS)

    @model_validator(mode="after")
    def _batch_fits(self) -> SparseTrainingSettings:
        if self.batch_size > self.n_train:
            raise ValueError(f"batch_size: {self.batch_size} exceeds n_train={self.n_train}")
        return self


class ToySettings(NotebookSettings, SparseTrainingSettings):
    """Notebook 01: mixtures dominated by each component at several weights, many seeds each."""

    seed: int = Field(default=0, ge=0, le=bounds.SEED)
    #: weight of the dominant component
    shares: list[bounds.Fraction] = Field(
        default_factory=lambda: [0.25, 0.3, 0.4, 0.55, 0.7, 0.85],
        min_length=1,
        max_length=bounds.GRID,
    )
    #: trained models per mixture (each: own sample, init and batch order)
    replicates: int = Field(default=16, ge=2, le=200)
    concat_sizes: list[Annotated[int, Field(le=200)]] = Field(
        default_factory=lambda: [1, 2, 4], min_length=1, max_length=bounds.GRID
    )
    direct_replicates: int = Field(default=8, ge=1, le=200)
    weight_decays: list[bounds.Decay] = Field(
        default_factory=lambda: [0.0, 0.001, 0.003, 0.01, 0.03],
        min_length=1,
        max_length=bounds.GRID,
    )
    #: a mixture in which both features carry signal, for the weight-decay sweep
    sparsity_weights: list[bounds.Fraction] = Field(
        default_factory=lambda: [0.45, 0.10, 0.30, 0.15], min_length=4, max_length=4
    )

    @model_validator(mode="after")
    def _consistent(self) -> ToySettings:
        for share in self.shares:
            if not 0.25 <= share <= 1.0:
                raise ValueError(
                    f"shares: {share} is not in [0.25, 1] (the dominant component's "
                    "weight cannot be below the uniform 1/4)"
                )
        for k in self.concat_sizes:
            if not 1 <= k <= self.replicates:
                raise ValueError(f"concat_sizes: {k} is not in [1, replicates={self.replicates}]")
        if any(wd < 0 for wd in self.weight_decays):
            raise ValueError("weight_decays: values must be >= 0")
        if any(w < 0 for w in self.sparsity_weights) or sum(self.sparsity_weights) <= 0:
            raise ValueError("sparsity_weights: four weights >= 0, not all zero")
        return self


@dataclass(frozen=True)
class ToyFiles:
    """Notebook 01's result files in its output folder, named in one place for the notebook, the
    tests and the report."""

    runs: str = "toy_runs.parquet"
    direct: str = "toy_direct.parquet"
    accuracy: str = "toy_accuracy.parquet"
    concat: str = "toy_concat.parquet"
    concat_shared_sample: str = "toy_concat_shared_sample.parquet"
    sparsity: str = "toy_sparsity.parquet"
    summary: str = "toy_summary.json"


TOY = ToyFiles()

params.register_schema("01_toy_counterexample", ToySettings)
