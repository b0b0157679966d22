"""The settings of a run's images: which dataset, where it lives, how it is augmented, and the
synthetic world's cues. Free of torch, like every settings class."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kit.core.params import Strict
from kit.data import kinds

#: visual cues of the synthetic world (kit.data) that can carry the label
CUES = ("colour", "shape", "texture", "position")


class ComponentSettings(Strict):
    """One mixture component of the synthetic world: the cues that carry the label in it, and
    the cues it does not show at all (a grey, unstriped, round or centred object), which is how
    a component can be told apart from the others without carrying its label twice."""

    #: the component's share of the images (weights are normalised over the components)
    weight: float = Field(gt=0.0)
    #: the cues that carry the label in this component (colour, shape, texture, position);
    #: two or more make each of them redundant for this component's images
    cues: list[str] = Field(min_length=1)
    #: cues this component does not show (grey, unstriped, round or centred), so that its images
    #: can be told apart from other components' without a second label-carrying cue
    absent: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_cues(self) -> ComponentSettings:
        for key, named in (("cues", self.cues), ("absent", self.absent)):
            unknown = sorted(set(named) - set(CUES))
            if unknown:
                raise ValueError(
                    f"{key}: unknown cue(s) {', '.join(unknown)} (known: {', '.join(CUES)})"
                )
        both = sorted(set(self.cues) & set(self.absent))
        if both:
            raise ValueError(f"absent: {', '.join(both)} cannot both carry the label and be absent")
        return self


class SyntheticSettings(Strict):
    """The offline synthetic world. Its seed is separate from the run's, so seeds share a world."""

    #: images in the training pool (a run drawing more repeats them)
    num_train: int = Field(ge=1)
    #: images in the evaluation split
    num_eval: int = Field(ge=1)
    #: the mixture: which cues carry the label, in what share of the images
    components: list[ComponentSettings] = Field(min_length=1)
    #: per cue, the probability that a carrying cue shows the sample's label (else a random class)
    strength: dict[str, float] = Field(default_factory=lambda: dict.fromkeys(CUES, 1.0))
    #: standard deviation of the Gaussian pixel noise added to every image (pixels in [0, 1])
    noise: float = Field(default=0.1, ge=0.0, le=1.0)
    #: the world's seed: it draws every image (labels, cues, nuisances), apart from the runs' seeds
    seed: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _known_strengths(self) -> SyntheticSettings:
        for cue, value in self.strength.items():
            if cue not in CUES:
                raise ValueError(f"strength: unknown cue '{cue}' (known: {', '.join(CUES)})")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"strength: {cue}={value} is not in [0, 1]")
        return self


class DataSettings(Strict):
    """Where the images come from and how they are augmented ('auto' picks by kind and size)."""

    #: a registered dataset kind (kit.data.kinds)
    kind: str
    root: str | None = None
    image_size: int = Field(ge=8)
    augment: Literal["auto", "algoperf", "crop_flip", "none"] = "auto"
    verify_images: bool = True
    #: where training JPEGs are decoded. cpu: by the DataLoader workers (libjpeg-turbo), about
    #: 100-200 images/s per core with the crop, so eight H100s need over 100 free cores. gpu: the
    #: workers only read the files; the run's device decodes each batch (torchvision's
    #: decode_jpeg, nvJPEG on CUDA) and crops and flips it there (kit.data.batched). Training
    #: batches only, with augment algoperf and a folder dataset; evaluation keeps cpu
    decode: Literal["cpu", "gpu"] = "cpu"
    synthetic: SyntheticSettings | None = None

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str) -> str:
        return kinds.KINDS.checked(kind)

    @model_validator(mode="after")
    def _consistent(self) -> DataSettings:
        owners = [name for name in kinds.KINDS if kinds.get(name).section == "synthetic"]
        if (self.kind in owners) != (self.synthetic is not None):
            raise ValueError(
                f"synthetic: give this section exactly when kind is {' or '.join(owners)}"
            )
        if kinds.get(self.kind).reads_disk and not self.root:
            raise ValueError(f"root: kind {self.kind} reads images from disk and needs a root")
        if self.decode == "gpu" and (
            not kinds.get(self.kind).reads_disk
            or self.augment not in ("auto", "algoperf")
            or (self.augment == "auto" and self.image_size < 64)
        ):
            raise ValueError(
                f"decode: gpu decodes JPEG files with RandomResizedCrop (augment "
                f"algoperf, or auto from 64 px); kind {self.kind} with augment "
                f"{self.augment} at {self.image_size} px needs decode: cpu"
            )
        return self
