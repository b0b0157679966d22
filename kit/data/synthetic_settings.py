"""The settings of the offline synthetic world (kit.data.synthetic): its cues, mixture
components and size. A leaf of kit.data, so that the dataset kinds can type the `synthetic`
section without importing the data settings that name the kinds. Free of torch."""

from __future__ import annotations

from pydantic import Field, model_validator

from kit.params import bounds
from kit.params.params import Strict

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
    cues: list[str] = Field(min_length=1, max_length=len(CUES))
    #: cues this component does not show (grey, unstriped, round or centred), so that its images
    #: can be told apart from other components' without a second label-carrying cue
    absent: list[str] = Field(default_factory=list, max_length=len(CUES))

    @model_validator(mode="after")
    def _known_cues(self) -> ComponentSettings:
        for key, named in (("cues", self.cues), ("absent", self.absent)):
            unknown = sorted(set(named) - set(CUES))
            if unknown:
                raise ValueError(
                    f"{key}: {', '.join(unknown)} not among the cues ({', '.join(CUES)})"
                )
        both = sorted(set(self.cues) & set(self.absent))
        if both:
            raise ValueError(f"absent: {', '.join(both)} cannot both carry the label and be absent")
        return self


class SyntheticSettings(Strict):
    """The offline synthetic world. Its seed is separate from the run's, so seeds share a world."""

    #: images in the training pool (a run drawing more repeats them)
    num_train: int = Field(ge=1, le=bounds.ROWS)
    #: images in the evaluation split
    num_eval: int = Field(ge=1, le=bounds.ROWS)
    #: the mixture: which cues carry the label, in what share of the images
    components: list[ComponentSettings] = Field(min_length=1, max_length=bounds.ENTRIES)
    #: per cue, the probability that a carrying cue shows the sample's label (else a random class)
    strength: dict[str, float] = Field(
        default_factory=lambda: dict.fromkeys(CUES, 1.0), max_length=len(CUES)
    )
    #: standard deviation of the Gaussian pixel noise added to every image (pixels in [0, 1])
    noise: float = Field(default=0.1, ge=0.0, le=1.0)
    #: the world's seed: it draws every image (labels, cues, nuisances), apart from the runs' seeds
    seed: int = Field(default=0, ge=0, le=bounds.SEED)

    @model_validator(mode="after")
    def _known_strengths(self) -> SyntheticSettings:
        for cue, value in self.strength.items():
            if cue not in CUES:
                raise ValueError(f"strength: unknown cue '{cue}' (known: {', '.join(CUES)})")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"strength: {cue}={value} is not in [0, 1]")
        return self
