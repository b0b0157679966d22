"""A run's checkpoint: written hashed and only when finite, read verified, its RNG states.

Each checkpoint has its size and SHA-256 beside it (`checkpoint.pt.sha256`), checked when a run
resumes (one pass over its bytes, kit.files.files); weights or BN statistics holding NaN or
infinity are never saved, so a diverging run keeps its last finite checkpoint.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kit import models
from kit.files import files
from kit.params.params import ParameterError
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings


def missing_snapshots(settings: TrainSettings, out: Path, reached: int) -> list[int]:
    """Snapshot steps the run in `out` has passed (up to `reached`) whose file or hash is
    missing: a run cannot go back to write them."""
    folder = RunFolder(out)
    return [
        step
        for step in settings.snapshot_steps
        if step <= reached
        and not (folder.snapshot(step).is_file() and files.sidecar(folder.snapshot(step)).is_file())
    ]


def refuse_missing_snapshots(settings: TrainSettings, reached: int, where: Path) -> None:
    """Refuse a run whose snapshots before `reached` are missing, naming the steps."""
    missing = missing_snapshots(settings, where, reached)
    if missing:
        raise ParameterError(
            f"{where}: has trained past the snapshot steps {', '.join(map(str, missing))} "
            "without saving them (snapshot_steps asks for them now, or their files were removed); "
            "delete the run folder to train it again with them, or use another output_dir"
        )


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the last good checkpoint is kept."""


def rng_states() -> dict[str, Any]:
    """The generators' states; of CUDA only the current device's, so that a run resumes under
    any number of visible GPUs (each rank drives one device)."""
    states = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda_device"] = torch.cuda.get_rng_state()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Put the generators back as `rng_states` saw them."""
    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if "cuda_device" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda_device"])


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A run's checkpoint, checked against its hash (said on stderr when it has none); a damaged
    one is refused naming it."""
    return models.read_checkpoint(
        path,
        rebuild=(
            f"Delete {path.name} and {files.sidecar(path).name} in {path.parent} to train this run "
            "again from the start."
        ),
    )


def write_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Replace the checkpoint atomically, its size and hash beside it."""
    with files.hashed_write(path) as handle:
        torch.save(state, handle)


def write_snapshot(
    module: nn.Module, settings: TrainSettings, step: int, out: Path, kept: str, main: bool
) -> None:
    """The model at x at `step` as snapshot-<step>.pt in `out` (the `main` rank writes it, hashed
    and atomically), with the run's identity: its settings (seed and step_hint among them) and
    the step; refused when not finite (on every rank: replicas are identical)."""
    state = {"model": module.state_dict(), "config": settings.model_dump(), "step": step}
    check_finite(state, out, kept)
    if main:
        write_checkpoint(RunFolder(out).snapshot(step), state)


def kept_message(path: Path, last_saved: int | None) -> str:
    """What a run that stops on a non-finite value keeps, for its message."""
    return (
        f"the last good checkpoint (step {last_saved}) is kept in {path}"
        if last_saved is not None
        else "no checkpoint had been written yet"
    )


def check_finite(state: dict[str, Any], where: Path, kept: str) -> None:
    """Refuse to save weights or BN statistics holding NaN or infinity as a good checkpoint."""
    bad = models.non_finite(state["model"])
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise NonFiniteLossError(
            f"{where}: non-finite weights or BatchNorm statistics at step "
            f"{state['step']} ({', '.join(bad[:5])}{more}); training "
            f"stopped and {kept}"
        )


def check_same_run(saved: dict[str, Any], settings: TrainSettings, where: Path) -> None:
    """Refuse to resume a run folder whose saved settings differ from `settings`'s."""
    differing = settings.differing_settings(saved)
    if differing:
        raise ParameterError(
            f"{where}: holds a run with different settings "
            f"({', '.join(differing)}); use another output_dir or restore "
            "those settings to resume it"
        )
