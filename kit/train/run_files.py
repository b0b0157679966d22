"""A training run's folder and the names of its files, in one place: its settings
(`config.yaml`), its metrics (`metrics.jsonl`), its checkpoint (`checkpoint.pt`, hashed beside
it), its snapshots (`snapshot-<step>.pt`), an untrained network (`initial.pt`), the record of
each start (`provenance.jsonl`) and the `DONE` marker of a finished run, with the atomic writes
of the small ones. The trainer, the launchers and the readers ask a RunFolder for a file rather
than joining a folder with its name. No torch: the command line and the launchers read runs
without it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kit.files import files
from kit.files.paths import resolve

if TYPE_CHECKING:
    from kit.train.settings import TrainSettings


@dataclass(frozen=True)
class RunFolder:
    """One run's folder (`path` as given: resolved by `of`, kept relative where a caller shows
    or records it) and its files."""

    path: Path

    #: the run's settings, written at every start (kit.train.settings.TrainSettings)
    CONFIG = "config.yaml"
    #: one JSON record per logging step (kit.train.metrics)
    METRICS = "metrics.jsonl"
    #: the last checkpoint, replaced at every save (kit.train.checkpoint)
    CHECKPOINT = "checkpoint.pt"
    #: an untrained network, in the checkpoint's format (random-init variants)
    INITIAL = "initial.pt"
    #: one provenance record per start of the run (kit.runtime.provenance)
    PROVENANCE = "provenance.jsonl"
    #: the marker a finished run leaves: {"step": N, "ranks": R}
    DONE = "DONE"

    @classmethod
    def of(cls, settings: TrainSettings) -> RunFolder:
        """The folder of a run's settings (`output_dir`, resolved)."""
        return cls(resolve(settings.output_dir))

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def checkpoint(self) -> Path:
        return self.path / self.CHECKPOINT

    @property
    def initial(self) -> Path:
        return self.path / self.INITIAL

    @property
    def provenance(self) -> Path:
        return self.path / self.PROVENANCE

    @property
    def done(self) -> Path:
        return self.path / self.DONE

    def snapshot(self, step: int) -> Path:
        """The model at `step` (kit.train.settings.TrainSettings.snapshot_steps)."""
        return self.path / f"snapshot-{step}.pt"

    def read_config(self) -> dict[str, Any] | None:
        """The settings the run last started with (None before its first start)."""
        if not self.config.exists():
            return None
        return dict(yaml.safe_load(self.config.read_text()))

    def write_config(self, settings: TrainSettings) -> None:
        """The run's settings, replaced atomically (other ranks may be reading them)."""
        files.write_text(self.config, yaml.safe_dump(settings.model_dump(), sort_keys=False))

    def finished_through(self, iterations: int) -> bool:
        """Whether the run has finished `iterations` steps: its DONE marker exists and records at
        least that step (a marker without a step counts as finished). A marker of fewer steps is a
        run to extend (kit.train's `step_hint` fixed, settings.differing_settings)."""
        if not self.done.exists():
            return False
        try:
            step = json.loads(self.done.read_text()).get("step")
        except (ValueError, AttributeError):
            return True
        return not isinstance(step, int) or step >= iterations

    def mark_done(self, step: int, ranks: int) -> None:
        """The DONE marker of a run finished at `step` on `ranks` ranks (written atomically)."""
        files.write_text(self.done, json.dumps({"step": step, "ranks": ranks}) + "\n")
