"""Tiny stand-ins for the paper's released checkpoints under `TIMECAT_CHECKPOINTS`, at every
path the paper-checkpoints profile reads (resnet50_sfadamw_imagenet1k_supervised/
checkpoints_<step>/checkpoint_run<i>.pth, as the authors' configs/pretrained_checkpoints.yaml
names them, each with its size and hash beside it), so that `kit check` and `kit run` of that
profile can be tried on any machine (`python -m kit fixtures DIR` writes them to DIR/checkpoints).

They are kit checkpoints of untrained ResNet-50s at width 1/16, not AlgoPerf files: a full-width
ResNet-50 weighs 100 MB, and the numbers they give mean nothing either way. Run i is seeded with
the profile's i-th seed, as the authors' configs/pretrained_checkpoints.yaml maps run0-run4 to
seeds 2, 550, 23, 477, 8529.
"""

from __future__ import annotations

import re
from pathlib import Path

from kit.experiments.timecat.settings import NOTEBOOK
from kit.params import params
from kit.params.params import ParameterError
from kit.train.network import write_untrained
from kit.train.settings import TrainSettings

#: what the profile's checkpoint paths start with
PREFIX = "${TIMECAT_CHECKPOINTS}/"
#: the stand-ins' width: a ResNet-50 of 1/16 the channels, about 200 kB a file
WIDTH = 0.0625


def released_files(profile: str = "paper-checkpoints") -> dict[str, TrainSettings]:
    """The checkpoint files a profile's variants read under `TIMECAT_CHECKPOINTS`, relative to
    it and named as the profile lists them, each with the settings of a stand-in: the
    profile's pretraining at WIDTH, the variant's iterations and the seed of its run (run<i>:
    the replicate's i-th seed)."""
    merged, _ = params.resolve_layers(NOTEBOOK, profile)
    stand_ins = {}
    for variant in merged["variants"]:
        for replicate, group in enumerate(variant.get("checkpoints") or []):
            for path in group:
                if not str(path).startswith(PREFIX):
                    raise ParameterError(
                        f"variants: {variant['name']} reads {path}, not a file "
                        f"under {PREFIX.rstrip('/')}"
                    )
                relative = str(path).removeprefix(PREFIX)
                seed = _run_seed(merged, replicate, relative)
                stand_ins[relative] = TrainSettings(
                    **merged["train"]
                    | {
                        "width": WIDTH,
                        "iterations": variant["iterations"],
                        "seed": seed,
                        "output_dir": str(Path(relative).parent),
                    }
                )
    return stand_ins


def _run_seed(merged: dict, replicate: int, relative: str) -> int:
    """The seed of the run a released file belongs to: run<i> is the replicate's i-th seed
    (seed_sets), as the authors' config maps their runs."""
    found = re.search(r"run(\d+)", Path(relative).name)
    if found is None:
        raise ParameterError(f"variants: {relative} names no run<i> (checkpoint_run<i>.pth)")
    seeds = (merged.get("seed_sets") or [[]])[replicate]
    index = int(found.group(1))
    if index >= len(seeds):
        raise ParameterError(
            f"seed_sets: {relative} is run {index}, but replicate {replicate} has "
            f"{len(seeds)} seeds ({seeds})"
        )
    return seeds[index]


def write_released(root: Path, profile: str = "paper-checkpoints") -> list[Path]:
    """An untrained stand-in (seeded by its file) at every path `released_files` names, under
    root as `TIMECAT_CHECKPOINTS`, each written hashed and atomically; returns the files."""
    written = []
    for relative, settings in released_files(profile).items():
        path = Path(root) / relative
        write_untrained(path, settings, settings.model_dump())
        written.append(path)
    return written
