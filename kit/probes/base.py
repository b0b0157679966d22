"""The one contract every probe implements, and the settings every probe's settings extend.

A probe is a `Probe` subclass (the shape of AlgoPerf's `Workload`: everything an experiment asks
of it, in one abstract class) registered with its settings class in `kit.probes.registry`. It
either fits cached feature splits (`FeatureProbe`: the fast and the L-BFGS probe) or runs frozen
backbones on images itself (`ImageProbe`: the authors' probe, given its probes as
`ImageProbeJob`s all at once); both return a `ProbeResult` holding the selection rules' choices.
Besides running, a probe says in one sentence what it does (`describe`) and how many processes
and loader workers its step takes when launched as a job (`processes`, `workers`). The experiment
asks only these, so that adding a probe changes nothing outside its own module and its
registration.

Its settings extend `ProbeSettings`: a `kind` (the name it is registered under), the device, the
checks that depend on the experiment using them (`rules`, `reference`, `problems`), and what the
probe costs in passes over images or cached features (`image_passes`, `feature_passes`: the
plan's estimate, which `kit check` prints without importing torch). This module imports no
torch: parameter validation reads it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from kit.params.params import Strict

if TYPE_CHECKING:
    from kit.data.settings import DataSettings
    from kit.probes.rows import Split
    from kit.probes.selection import ProbeResult


@dataclass(frozen=True)
class ProbeUse:
    """What an experiment asks of its probe, for the checks of the probe's own settings: the
    task names, the device, the training rows per task (None: every row), and the tasks with
    extra evaluation sets."""

    tasks: tuple[str, ...]
    device: str
    train_rows: int | None
    #: the tasks that name extra evaluation sets (scored by probes of cached features)
    extra_evals: tuple[str, ...] = ()


class ProbeSettings(Strict):
    """What every probe's settings hold: the probe's `kind` (each subclass fixes it with a
    Literal default) and the device it runs on. A field typed
    `kit.probes.registry.AnyProbeSettings` holds the settings of whichever probe its `kind`
    names."""

    #: the name the probe is registered under in kit.probes.registry
    kind: str
    #: the device the probe runs on; notebook 03 gives its own `device`
    device: str = Field(default="cpu", min_length=1)

    def rules(self) -> tuple[str, ...]:
        """The selection rules the probe reports with these settings (kit.probes.selection)."""
        return ("paper", "heldout")

    def reference(self) -> ProbeSettings | None:
        """The settings of the converged fit this probe is checked against on the same features
        (`lbfgs_check` of notebook 03), or None when it has none."""
        return None

    def problems(self, use: ProbeUse) -> list[str]:
        """What makes these settings unusable for `use`, each starting with its key."""
        return []

    def image_passes(self, data: DataSettings, models: int) -> ImagePasses | None:
        """The passes over a task's training images that probing `models` concatenated
        backbones takes, or None when the probe reads cached features (`feature_passes`)."""
        return None

    def feature_passes(self) -> FeaturePasses | None:
        """The passes over cached features a fit takes on a GPU, or None when the probe reads
        images or does not run on one (not estimated)."""
        return None


def shared_gpus(settings: ProbeSettings, node: int) -> int:
    """The GPUs a probe of cached features asks for on a node of `node` GPUs: all of them, its
    fits shared over them (kit.probes.devices.fit_devices), or its settings' `devices` where
    fewer."""
    wanted = getattr(settings, "devices", None)
    return max(1, min(node, wanted) if wanted else node)


@dataclass(frozen=True)
class ImagePasses:
    """What a probe that reads images costs on one target: epochs over its training images
    through the frozen backbones, on `processes` GPUs fed by `workers` loader workers each."""

    epochs: int
    processes: int
    workers: int


@dataclass(frozen=True)
class FeaturePasses:
    """What a probe of cached features costs on one target: `epochs` over its training rows,
    for `heads` heads trained side by side."""

    epochs: int
    heads: int


class Probe(ABC):
    """What every probe offers the experiment that runs it."""

    #: the class of its settings; its `kind` is the name the probe is registered under
    settings: ClassVar[type[ProbeSettings]]

    @abstractmethod
    def describe(self, settings: Any, tasks: Mapping[str, DataSettings]) -> str:
        """What the probe does with `settings` on `tasks` (each task's data, by name), in one
        sentence for a report."""

    def processes(self, settings: Any) -> int:
        """The processes (GPUs) the probe step starts."""
        return 1

    def workers(self, settings: Any) -> int | None:
        """Loader workers of each process the probe step starts, None when it reads no
        images."""
        return None


class FeatureProbe(Probe):
    """A probe of cached features: fitted on a training split, scored on an evaluation split
    and on any extra evaluation splits of the same classes."""

    @abstractmethod
    def fit(
        self,
        train: Split,
        evaluation: Split,
        num_classes: int,
        settings: Any,
        progress: bool = True,
        extra: Mapping[str, Split] | None = None,
    ) -> ProbeResult:
        """The probe of one representation on one task; every head it reports is scored on
        each `extra` split too, in the history's and the selected rows'
        `kit.probes.selection.extra_column`."""


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


class ImageProbe(Probe):
    """A probe that runs frozen backbones on images: every probe of a measurement is handed
    over at once (`folder` holds what they share, such as one launch's log), so that a probe
    launched as processes of its own starts them once for all."""

    @abstractmethod
    def job(
        self,
        settings: Any,
        task: str,
        data: DataSettings,
        num_classes: int,
        checkpoints: Sequence[Path],
        output: Path,
    ) -> ImageProbeJob:
        """The probe of `checkpoints` (concatenated) on task `task`, with the settings and
        weight decays of that target."""

    @abstractmethod
    def run_all(
        self, jobs: Sequence[ImageProbeJob], folder: Path, progress: bool = True
    ) -> list[ProbeResult]:
        """Every job's result, in the jobs' order."""
