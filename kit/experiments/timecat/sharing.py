"""What notebook 04's cells share instead of computing it again: runs of the same settings in
different folders (`share_runs`), and the probe results of a representation that another cell, or
notebook 03, probed with the same settings (`probing`, `probes_as_notebook_03`).

A model is a pure function of its run's settings (seed, data, schedule; the reproducible CPU
numerics give the same bits wherever it runs), and a probe of a pure function of the features it
reads, so whatever a cell reads from a shared run or a shared probe is what it would have
computed itself.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import polars as pl

from kit.experiments.timecat import planning
from kit.experiments.timecat.settings import TimecatSettings
from kit.train.settings import TrainSettings


def _run_key(settings: TrainSettings, trained: bool) -> str:
    """What a run computes (or an untrained network is): every setting but its folder."""
    values = settings.model_dump(mode="json", exclude={"output_dir"})
    return json.dumps({"trained": trained, **values}, sort_keys=True)


def share_runs(plans: list[planning.Plan]) -> list[planning.Plan]:
    """`plans` with every run (and untrained network) that an earlier plan holds with the same
    settings in another folder trained and read in that folder: the same seed, data and schedule
    compute the same model, so it is trained and extracted once. Under notebook 03's design
    (`catn_models: independent`) cat1 at a budget B is model 0 of catN at N x B in the same world
    and replicate, notebook 03's width-matched model of fixed iterations is the same at every
    budget, and the untrained networks are the same in every cell of a world; notebook 03's own
    plan, given first, keeps its folders. Each representation reads the kept folder's files and
    expects the identity its run records there."""
    kept: dict[str, str] = {}  # run settings -> the folder that keeps them
    moved: dict[Path, Path] = {}  # a folder planned again -> the one kept
    names: dict[Path, str | None] = {}  # each folder's `run` in the identities it expects
    for found in plans:
        runs = [(t, True) for t in found.trainings] + [(t, False) for t in found.initial]
        for settings, trained in runs:
            folder = kept.setdefault(_run_key(settings, trained), settings.output_dir)
            if folder != settings.output_dir:
                moved[Path(settings.output_dir)] = Path(folder)
        for rep in found.representations:
            for path, expected in rep.expected().items():
                names.setdefault(path.parent, expected.get("run"))

    def kept_in(settings: TrainSettings) -> TrainSettings:
        folder = moved.get(Path(settings.output_dir))
        if folder is None:
            return settings
        return settings.model_copy(update={"output_dir": str(folder)})

    def read(rep: planning.Representation) -> planning.Representation:
        files = tuple(moved.get(p.parent, p.parent) / p.name for p in rep.checkpoints)
        identities = tuple(
            expected | {"run": names.get(moved[p.parent], expected.get("run"))}
            if p.parent in moved and expected.get("run") != planning.UNTRAINED_FOLDER
            else expected
            for p, expected in zip(rep.checkpoints, rep.identities, strict=False)
        )
        return replace(rep, checkpoints=files, identities=identities)

    return [
        replace(
            found,
            trainings=[kept_in(t) for t in found.trainings],
            initial=[kept_in(t) for t in found.initial],
            representations=[read(rep) for rep in found.representations],
        )
        for found in plans
    ]


#: settings that change no probe result of a representation read from the same checkpoints
NOT_PROBED = frozenset(
    {"variants", "replicates", "rounds", "total_iterations", "run_root", "feature_cache"}
)


def probing(settings: TimecatSettings) -> str:
    """What a cell's probe results depend on beside each representation's checkpoints: its
    tasks, data, probe and probe rows (every setting but NOT_PROBED)."""
    return settings.model_dump_json(exclude=set(NOT_PROBED))


#: the probe results of representations probed by earlier cells of one sweep, by what the cell
#: probes (`probing`) and the representation
Probed = dict[tuple[str, planning.Representation], pl.DataFrame]


def probes_as_notebook_03(settings: TimecatSettings, notebook: TimecatSettings) -> bool:
    """Whether a cell of `settings` probes a representation as notebook 03 (`notebook`) does:
    the same tasks, data, probe and probe rows (every setting but NOT_PROBED, and the refit
    check `lbfgs_check`, which changes no result)."""
    same = NOT_PROBED | {"lbfgs_check"}
    return settings.model_copy(update={k: getattr(notebook, k) for k in same}) == notebook
