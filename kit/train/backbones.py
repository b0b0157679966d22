"""Checkpoints read back as frozen backbones: a kit run's checkpoint (its config rebuilds the
network) or one of the paper's released AlgoPerf checkpoints, for feature extraction
(kit.features), the authors' probe and the checks before compute.

A kit checkpoint records which run wrote it (model, width, seed, iterations, folder) and at
which step; a caller that knows which run's file it expects passes that identity, and a file
recording another (copied or renamed from another run) is refused naming both, whatever its hash
file says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kit import models
from kit.files.paths import resolve
from kit.train.network import network
from kit.train.settings import TrainSettings


def load_backbone(path: Path, expected: Mapping[str, Any] | None = None) -> models.KitResNet:
    """A network from a kit checkpoint (its config rebuilds the architecture) or from one of
    the paper's AlgoPerf checkpoints (ResNet-50, 1000 classes, at the width its stem has: 1 for
    the released files). With `expected` (what the run expects the file to be:
    `identity_problem`), a kit checkpoint recording another identity is refused naming both."""
    state = models.read_checkpoint(path)
    if isinstance(state, dict) and "model_params" in state:
        model = models.build("resnet50", 1000, models.algoperf_width(state["model_params"]))
        models.load_algoperf_checkpoint(model, path, state)
    elif isinstance(state, dict) and "model" in state and "config" in state:
        problem = identity_problem(path, state, expected)
        if problem is not None:
            raise models.CheckpointError(problem)
        model = network(TrainSettings(**state["config"]))
        models.load_state(model, state["model"], str(path))
    else:
        keys = ", ".join(list(state)[:5]) if isinstance(state, dict) else type(state).__name__
        raise models.CheckpointError(
            f"{path}: neither a kit checkpoint ('model' and 'config') "
            f"nor an AlgoPerf one ('model_params'); has {keys}"
        )
    return model.eval()


def recorded_identity(state: dict[str, Any]) -> dict[str, Any]:
    """What a kit checkpoint records of itself: its run's model, width, seed, iterations and
    folder (`run`), and the step it was saved at (None for an untrained network)."""
    found = state.get("config")
    config: dict[str, Any] = found if isinstance(found, dict) else {}
    return {
        "model": config.get("model"),
        "width": config.get("width"),
        "seed": config.get("seed"),
        "iterations": config.get("iterations"),
        "run": config.get("output_dir"),
        "step": state.get("step"),
    }


def _same(key: str, recorded: Any, wanted: Any) -> bool:
    """`run` names the run's folder relative to where the runs are: the recorded folder ends
    with it (an output folder moved elsewhere still matches)."""
    if key != "run":
        return bool(recorded == wanted)
    wanted_parts = Path(str(wanted)).parts
    return recorded is not None and Path(str(recorded)).parts[-len(wanted_parts) :] == wanted_parts


def _described(identity: Mapping[str, Any], keys: Sequence[str], tail: int = 0) -> str:
    """`identity`'s `keys` as `run rep0/cat1/seed0, width 0.125, ...` (a recorded run folder
    cut to its last `tail` parts, as the expected one is named)."""
    shown_values = []
    for key in keys:
        value = identity.get(key)
        if key == "run" and value is not None and tail:
            value = "/".join(Path(str(value)).parts[-tail:])
        shown_values.append(f"{key} {value if value is not None else 'none'}")
    return ", ".join(shown_values)


def identity_problem(
    path: Path, state: dict[str, Any], expected: Mapping[str, Any] | None
) -> str | None:
    """Why a kit checkpoint is not the one the run expects at `path` (None when it is, or when
    nothing is expected): each key of `expected` (model, width, seed, iterations, run, step) must
    equal what the file records (`recorded_identity`), so that a checkpoint copied or renamed from
    another run is never taken for this one's, whatever its hash file says."""
    if not expected:
        return None
    recorded = recorded_identity(state)
    differing = [
        key for key, wanted in expected.items() if not _same(key, recorded.get(key), wanted)
    ]
    if not differing:
        return None
    keys = list(expected)
    tail = len(Path(str(expected.get("run", ""))).parts)
    return (
        f"{path}: this checkpoint records {_described(recorded, keys, tail)}, but this run "
        f"expects {_described(expected, keys)} ({', '.join(differing)} differ): a file copied or "
        "renamed from another run is not used. Put this run's own file back, or delete this one "
        "and its .sha256 (for a run the kit trained, delete the run's folder and run again to "
        "retrain it)."
    )


def checkpoint_problems(
    paths: list[str], identities: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """Open every checkpoint and load it into the architecture it describes (hash checked when
    recorded, and its identity when `identities` gives the one expected of it), so that a bad
    last file is found before the first is used. Reads each file once: about a second per paper
    (ResNet-50) checkpoint."""
    problems = []
    for path in dict.fromkeys(paths):
        try:
            load_backbone(resolve(path), (identities or {}).get(path))
        except models.CheckpointError as error:
            problems.append(str(error))
    return problems
