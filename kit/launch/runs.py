"""A launch's runs: their names, configs on disk, finished markers and what a launch did."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kit.files.files import atomic_write
from kit.files.paths import resolve
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings

CONFIGS = "configs"
LOGS = "logs"


@dataclass
class Launched:
    """What a launch did: runs finished now, runs that failed (with their logs), Slurm jobs."""

    finished: list[str] = field(default_factory=list)
    failed: dict[str, Path] = field(default_factory=dict)
    #: run name -> job id of the jobs submitted or still queued/running (slurm)
    submitted: dict[str, str] = field(default_factory=dict)
    #: failed run name -> why, where the launcher knows it (a worker killed by a signal); runs
    #: sharing a cause (a chain's runs in one worker) are said once
    causes: dict[str, str] = field(default_factory=dict)

    def check(self) -> Launched:
        """Raise naming the log of every run that failed with the cause its log gives last (a
        full disk, say), or the cause it shares with others."""
        if self.failed:
            said = [
                self.causes.get(name) or f"{name}{log_cause(log)} (see {log})"
                for name, log in self.failed.items()
            ]
            raise RuntimeError("training failed: " + "; ".join(dict.fromkeys(said)))
        return self


#: the bytes of a log's end read for the cause of a failure
LOG_TAIL_BYTES = 64_000
#: a line saying why a process ended: the trainer's `error: ...`, or a traceback's last line
_CAUSE = re.compile(r"^(?:error|[A-Za-z_][\w.]*(?:Error|Exception)): (?P<cause>\S.*)$")


def log_cause(log: Path, most: int = 400) -> str:
    """Why a run failed, as its log's last error line says (a full disk, a non-finite loss, a
    traceback's exception), as `: <cause>` to follow its name; empty when the log says none."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if found := _CAUSE.match(line.strip()):
            cause = found["cause"]
            return f": {cause[:most]}{'...' if len(cause) > most else ''}"
    return ""


def run_name(settings: TrainSettings, work_dir: Path) -> str:
    """A run's name: its folder relative to the work folder (or absolute), `/` as `__`."""
    out = resolve(settings.output_dir)
    try:
        relative = out.relative_to(work_dir)
    except ValueError:
        relative = Path(str(out).lstrip(os.sep))
    return str(relative).replace(os.sep, "__")


def is_finished(settings: TrainSettings) -> bool:
    """Whether a run has finished its iterations (its DONE marker records them), whatever
    launched it; a run finished at fewer steps is extended by its next launch."""
    return RunFolder.of(settings).finished_through(settings.iterations)


def write_configs(trainings: Sequence[TrainSettings], work_dir: Path) -> dict[str, Path]:
    """Each run's YAML under work_dir/configs, by run name (replaced atomically)."""
    folder = work_dir / CONFIGS
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for settings in trainings:
        name = run_name(settings, work_dir)
        path = folder / f"{name}.yaml"
        with atomic_write(path) as handle:
            handle.write(yaml.safe_dump(settings.model_dump(), sort_keys=False).encode())
        files[name] = path
    return files


def train_args(config_file: Path) -> list[str]:
    """`python -m` arguments training one run."""
    return ["kit.train", "--config", str(config_file)]
