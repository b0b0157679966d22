"""The entries of notebook 03's lists: a probe task (`tasks:`) and a variant (`variants:`), each
validated on its own (no torch). What an entry must agree on with the rest of the parameters (a
variant's tasks among the tasks, its checkpoints for every replicate, the baseline among the
variants) is checked by the schema that holds them (kit.experiments.timecat.settings).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kit.data.settings import DataSettings
from kit.data.synthetic_settings import ComponentSettings
from kit.experiments.timecat import shifted
from kit.experiments.timecat.variants import VARIANT_KINDS, VariantKind, kinds_where
from kit.files.paths import SAFE_NAME
from kit.params import bounds
from kit.params.params import Strict


class ProbeTask(Strict):
    """A dataset the representations are probed on, and its role in the paper's comparison:
    its own `data` (with `num_classes`), the pretraining data itself (`pretraining: true`, the
    in-distribution task, as ImageNet-1k is in Table 3), or, in the synthetic world, the
    pretraining world with `components` (lists of cues, equally weighted) as its mixture. A task
    of ImageNet-1k's classes may name `extra_evals`, ImageNet's shifted test sets that the heads
    fitted on it are scored on too (kit.experiments.timecat.shifted)."""

    name: str = Field(min_length=1, pattern=SAFE_NAME)
    role: Literal["in-distribution", "in-mixture", "unseen"]
    data: DataSettings | None = None
    num_classes: int | None = Field(default=None, ge=2, le=bounds.CLASSES)
    components: list[bounds.Names] | None = Field(default=None, max_length=bounds.ENTRIES)
    pretraining: bool = False
    extra_evals: list[shifted.ExtraEval] = Field(default_factory=list, max_length=bounds.ENTRIES)

    @model_validator(mode="after")
    def _one_source(self) -> ProbeTask:
        if [self.data is not None, self.components is not None, self.pretraining].count(True) != 1:
            raise ValueError(
                f"tasks: {self.name} needs exactly one of data, components or pretraining: true"
            )
        if self.data is not None and self.num_classes is None:
            raise ValueError(f"tasks: {self.name} has its own data and needs num_classes")
        for cues in self.components or []:
            ComponentSettings(weight=1.0, cues=cues)
        return self


class Variant(Strict):
    """One representation per replicate: `n` models concatenated in seed order.

    `kind` names one of `VARIANT_KINDS` (kit.experiments.timecat.variants): `time-concat`,
    `wide`, `random-init` or `direct`. With `checkpoints` (per replicate, n files) the variant
    is probed from those files and nothing is trained."""

    name: str = Field(min_length=1, pattern=SAFE_NAME)
    kind: str
    n: int = Field(default=1, ge=1, le=bounds.MODELS)
    width: float = Field(default=1.0, gt=0.0, le=bounds.WIDTH)
    #: iterations per model (default: the budget split in n)
    iterations: int | None = Field(default=None, ge=1, le=bounds.ITERATIONS)
    tasks: list[str] | None = Field(default=None, max_length=bounds.ENTRIES)
    checkpoints: list[bounds.Names] | None = Field(default=None, max_length=bounds.REPLICATES)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        return VARIANT_KINDS.checked(kind)

    @model_validator(mode="after")
    def _consistent(self) -> Variant:
        where = f"variants: {self.name}"
        spec = self.spec
        if spec.one_model and self.n != 1:
            raise ValueError(f"{where}: a {self.kind} variant is one model (n: 1)")
        if spec.per_task != (self.tasks is not None):
            per_task = " or ".join(kinds_where(lambda kind: kind.per_task))
            raise ValueError(f"{where}: give tasks exactly for kind {per_task}")
        if not spec.trained and self.iterations is not None:
            raise ValueError(f"{where}: {self.kind} networks are untrained (no iterations)")
        if spec.per_task and self.checkpoints is not None:
            raise ValueError(f"{where}: {self.kind} variants are trained, not loaded")
        if any(len(files) != self.n for files in self.checkpoints or []):
            raise ValueError(f"{where}: every replicate's checkpoint list needs n={self.n} files")
        return self

    @property
    def spec(self) -> VariantKind:
        """What the variant's kind is (the registry's entry)."""
        return VARIANT_KINDS.get(self.kind)

    @property
    def trained(self) -> bool:
        """Its models are trained by the notebook."""
        return self.spec.trained and self.checkpoints is None

    @property
    def initialised(self) -> bool:
        """Its models are untrained networks the notebook writes."""
        return not self.spec.trained and self.checkpoints is None
