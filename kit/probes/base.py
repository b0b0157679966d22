"""The interface every probe implements: its settings class, a description, and how it runs.

A probe either fits on cached feature splits (`FeatureProbe`: the fast and the L-BFGS probe) or
runs frozen backbones on images itself (`ImageProbe`: the authors' probe, given its probes as
`ImageProbeJob`s all at once); both return a `ProbeResult` holding the two selection rules'
choices. `kit.probes.registry` names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:  # at run time this module imports no torch: the registry imports it
    from kit.core.params import Strict
    from kit.data.settings import DataSettings
    from kit.probes.rows import Split
    from kit.probes.selection import ProbeResult


class Probe(Protocol):
    """What every probe offers: the class of its settings, and a sentence saying what it does
    with them (for a report)."""

    settings: ClassVar[type[Strict]]

    def describe(self, settings: Any) -> str: ...


@runtime_checkable
class FeatureProbe(Probe, Protocol):
    """A probe of cached features: fitted on a training split, scored on an evaluation split."""

    def fit(
        self,
        train: Split,
        evaluation: Split,
        num_classes: int,
        settings: Any,
        progress: bool = True,
    ) -> ProbeResult: ...


@dataclass(frozen=True)
class ImageProbeJob:
    """One probe of frozen backbones (checkpoints, concatenated) on a dataset's images, one head
    per weight decay, writing its result and resumable state to `output`."""

    checkpoints: Sequence[Path]
    data_config: DataSettings
    num_classes: int
    output: Path
    settings: Any
    weight_decays: Sequence[float]


@runtime_checkable
class ImageProbe(Probe, Protocol):
    """A probe that runs frozen backbones on images: every probe of a measurement is handed
    over at once (`folder` holds what they share, such as one launch's log), so that a probe
    launched as processes of its own starts them once for all."""

    def run_all(
        self, jobs: Sequence[ImageProbeJob], folder: Path, progress: bool = True
    ) -> list[ProbeResult]: ...
