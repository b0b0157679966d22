"""The time-concat experiment's measurements: each representation probed on each task (and its
heads scored on the task's extra evaluation sets), and its label-free diagnostics (RankMe,
alpha-ReQ, the CKA of its models)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import torch
from torch.utils.data import Dataset, Subset

from kit import feature_cache, features
from kit.data import kinds, pipeline
from kit.data.kinds.base import split_size
from kit.data.kinds.imagenet_shifts import ShiftedImageNetKind
from kit.data.kinds.images import ImageList
from kit.data.settings import DataSettings
from kit.experiments.timecat.entries import ProbeTask
from kit.experiments.timecat.planning import Representation, features_dir, runs_dir
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.shifted import ExtraEval
from kit.probes import parallel, registry
from kit.probes.base import FeatureProbe, ImageProbe, Probe, ProbeSettings
from kit.probes.rows import Split
from kit.probes.selection import ProbeResult, extra_column
from kit.readout.progress import KeptBar, Stage
from kit.stats import diagnostics

#: rows of the evaluation split the label-free diagnostics use (a seeded sample beyond that)
DIAGNOSTIC_ROWS = 4096


@dataclass(frozen=True)
class Measurements:
    """What notebook 03 measures: probe accuracies, and label-free diagnostics of each
    representation on each task's evaluation split."""

    results: pl.DataFrame
    diagnostics: pl.DataFrame


@dataclass(frozen=True)
class ShiftedFeatures:
    """An extra evaluation set's features of each representation, its labels' indices among the
    task's classes, and the classes its predictions are taken among (None: all)."""

    name: str
    sets: list[feature_cache.FeatureSet]
    indices: torch.Tensor
    classes: tuple[int, ...] | None

    def split(self, index: int) -> Split:
        """The set as the probe of representation `index` scores it, labelled as its task."""
        features, labels = self.sets[index].torch()
        return Split(features, self.indices[labels.long()], self.name, self.classes)


@dataclass(frozen=True)
class TaskFeatures:
    """A task's cached features: its representations' training and evaluation splits (and extra
    evaluation sets), and each of their checkpoints alone on the evaluation split (for the
    diagnostics)."""

    num_classes: int
    probed: list[Representation]
    train: list[feature_cache.FeatureSet]
    eval: list[feature_cache.FeatureSet]
    single: dict[Path, feature_cache.FeatureSet]
    eval_rows: int
    extra: list[ShiftedFeatures] = field(default_factory=list)

    def splits(self) -> list[tuple[Split, Split, dict[str, Split]]]:
        """Each representation's training, evaluation and extra evaluation splits, as a probe of
        cached features fits and scores them."""
        return [
            (
                Split(*train.torch(), train.record["split"]),
                Split(*test.torch(), test.record["split"]),
                {shift.name: shift.split(index) for shift in self.extra},
            )
            for index, (train, test) in enumerate(zip(self.train, self.eval, strict=True))
        ]


#: each task's probe rows (the seeded, class-balanced subset) by its data, classes, row count
#: and seed: notebook 04's cells of a world share their tasks' data, and drawing every label of
#: a pool of 61,440 synthetic images takes seconds
_PROBE_ROWS: dict[tuple[str, int, int, int], np.ndarray] = {}


def task_features(
    task: ProbeTask,
    representations: list[Representation],
    params: TimecatSettings,
    progress: bool = False,
) -> TaskFeatures:
    """Extract (or find cached) every feature probe_all reads for one task: the one path to
    the cache, so that an extraction job and the notebook's probes meet the same entries.
    Under torchrun each rank extracts its shard. The authors' probe reads images, so for it
    only the diagnostics' features are extracted (`train` and `eval` stay empty)."""
    cache = features_dir(params)
    on_features = isinstance(registry.get(params.probe_kind), FeatureProbe)
    task_data, num_classes = params.task_data(task)
    train_set, eval_set = pipeline.probe_datasets(task_data, num_classes)
    split_name = "train"
    if params.probe_train_rows is not None and params.probe_train_rows < split_size(train_set):
        key = (task_data.model_dump_json(), num_classes, params.probe_train_rows, params.base_seed)
        if key not in _PROBE_ROWS:  # every label of the pool is drawn: once per process
            _PROBE_ROWS[key] = pipeline.balanced_subset(
                pipeline.labels_of(train_set), params.probe_train_rows, seed=params.base_seed
            )
        chosen = _PROBE_ROWS[key]
        train_set = Subset(train_set, chosen.tolist())
        split_name = f"train[balanced {len(chosen)}, seed {params.base_seed}]"
    probed = [rep for rep in representations if rep.task in (None, task.name)]
    members = list(dict.fromkeys(c for rep in probed for c in rep.checkpoints))
    identities = {path: found for rep in probed for path, found in rep.expected().items()}

    def extract(
        groups: list[list[Path]], split: str, dataset: Dataset, data: DataSettings = task_data
    ) -> list[feature_cache.FeatureSet]:
        return features.extract_many(
            groups,
            dataset,
            data.model_dump_json(),
            split,
            transform=pipeline.resolved_augment(data),
            cache_dir=cache,
            batch_size=params.feature_batch_size,
            dtype=params.feature_dtype,
            device=params.device,
            num_workers=params.feature_workers,
            progress=progress,
            loader_timeout_s=params.feature_loader_timeout_s,
            side_by_side=params.side_by_side,
            identities=identities,
        )

    groups = [list(rep.checkpoints) for rep in probed]
    return TaskFeatures(
        num_classes,
        probed,
        extract(groups, split_name, train_set) if on_features else [],
        extract(groups, "eval", eval_set) if on_features else [],
        dict(zip(members, extract([[c] for c in members], "eval", eval_set), strict=True)),
        split_size(eval_set),
        [shifted_features(e, eval_set, groups, extract) for e in task.extra_evals]
        if on_features
        else [],
    )


def shifted_features(
    entry: ExtraEval,
    task_eval: Dataset,
    groups: list[list[Path]],
    extract: Callable[..., list[feature_cache.FeatureSet]],
) -> ShiftedFeatures:
    """An extra evaluation set's features of each group of checkpoints (through `extract`, the
    task's path to the cache, with the set's own data and transform), its classes mapped into
    those of the task's evaluation split `task_eval` (ImageNet-1k's wnids), and, for a set that
    holds fewer of them (ImageNet-R, -A), its own classes as the ones predictions are taken
    among, as their authors score them."""
    kind = kinds.get(entry.data.kind)
    assert isinstance(kind, ShiftedImageNetKind), entry.data.kind  # ExtraEval's validator
    images = kind.open_split(entry.data, "eval", kind.num_classes)
    imagenet = task_eval.base if isinstance(task_eval, pipeline.Transformed) else task_eval
    assert isinstance(imagenet, ImageList), "a task of ImageNet's classes reads image folders"
    indices = kind.imagenet_indices(images.classes, imagenet.classes)
    restricted = tuple(sorted(indices)) if kind.holds_classes < kind.num_classes else None
    found = extract(groups, "eval", pipeline.evaluated(entry.data, images), entry.data)
    return ShiftedFeatures(entry.name, found, torch.tensor(indices), restricted)


def probe_settings(params: TimecatSettings) -> ProbeSettings:
    """The settings of the probe `probe_kind` names, on the experiment's device."""
    return params.probe.model_copy(update={"device": params.device})


def probe_all(
    representations: list[Representation], params: TimecatSettings, diagnose: bool = True
) -> Measurements:
    """Probe every representation on every task with the probe `probe_kind` names (one row per
    representation, task and rule): a `FeatureProbe` on (cached) extracted features,
    `side_by_side` at a time, or an `ImageProbe` on images (`image_results`, all launched at
    once). With `lbfgs_check`, the first replicate is also fitted by the probe's converged
    reference. With `diagnose`, also measure each representation's richness (RankMe,
    alpha-ReQ) and how alike its n models are (mean pairwise linear CKA) on features of the
    evaluation split; without it (notebook 04 reads the probes only) `diagnostics` is empty."""
    chosen = registry.get(params.probe_kind)
    on_features = isinstance(chosen, FeatureProbe)
    settings = probe_settings(params)
    reference = settings.reference() if params.lbfgs_check else None
    rows, diagnosed = [], []
    shifts = list(dict.fromkeys(extra_column(e.name) for t in params.tasks for e in t.extra_evals))
    total = sum(rep.task in (None, task.name) for task in params.tasks for rep in representations)
    bar = KeptBar(total=total, desc=f"{params.probe_kind} probes", unit="probe")
    stage = Stage("probes", total, "probe", f"fitting {total} {params.probe_kind} probes")
    # an image probe reads the checkpoints itself: the extraction of their features, which
    # checks that each is this run's (kit.train.backbones.identity_problem), comes first
    early = (
        {}
        if on_features
        else {task.name: task_features(task, representations, params) for task in params.tasks}
    )
    on_images = image_results(chosen, representations, params)
    for task in params.tasks:
        extracted = early.get(task.name) or task_features(task, representations, params)
        num_classes, single = extracted.num_classes, extracted.single
        sample = _diagnostic_sample(extracted.eval_rows, params.base_seed)
        splits = extracted.splits()
        fitted = (
            parallel.fit_many(chosen, splits, num_classes, settings, params.side_by_side)
            if isinstance(chosen, FeatureProbe)
            else (on_images[task.name, rep] for rep in extracted.probed)
        )
        for index, (rep, result) in enumerate(zip(extracted.probed, fitted, strict=True)):
            bar.set_postfix_str(
                f"{task.name}: {rep.variant} (replicate {rep.replicate})", refresh=False
            )  # update() redraws, at most every mininterval
            exact = None
            if reference is not None and on_features and rep.replicate == 0:
                exact = registry.reference_probe(reference).fit(
                    *splits[index][:2], num_classes, reference, progress=False
                )
            described = {
                "variant": rep.variant,
                "kind": rep.kind,
                "n": rep.n,
                "width": rep.width,
                "replicate": rep.replicate,
                "iterations_per_model": rep.iterations_per_model,
                "task": task.name,
                "role": task.role,
            }
            for selected in result.selected.iter_rows(named=True):
                rows.append(
                    described
                    | {
                        "rule": selected["rule"],
                        "top1": selected["top1"],
                        "top5": selected["top5"],
                        "train_top1": selected["train_top1"],
                        "heldout_top1": selected["heldout_top1"],
                        "eval_rows": extracted.eval_rows,
                        "lbfgs_top1": exact and exact.top1(selected["rule"]),
                        **{column: selected.get(column) for column in shifts},
                    }
                )
            if diagnose:
                parts = [single[c].torch()[0][sample] for c in rep.checkpoints]
                concatenated = (
                    splits[index][1].features[sample] if on_features else torch.cat(parts, 1)
                )
                diagnosed.append(described | _diagnose(concatenated, parts))
            bar.update()
            stage.advance()
    bar.close()
    stage.finish(f"reused 0, fitted {total} (probes are refitted from the cached features)")
    return Measurements(
        pl.DataFrame(
            rows,
            schema_overrides={
                "iterations_per_model": pl.Int64,
                "top5": pl.Float64,
                "lbfgs_top1": pl.Float64,
            }
            | dict.fromkeys(shifts, pl.Float64),
        ),
        pl.DataFrame(
            diagnosed, schema_overrides={"iterations_per_model": pl.Int64, "seed_cka": pl.Float64}
        ),
    )


def image_results(
    chosen: Probe, representations: list[Representation], params: TimecatSettings
) -> dict[tuple[str, Representation], ProbeResult]:
    """An image probe's results of every representation on every task, by task name and
    representation (none for a probe of cached features), each in
    run_root/<probe_kind>/<task>/rep<r>/<variant>, the probe handed every job at once (the
    authors' probe reads finished ones back, resumes interrupted ones and launches the others in
    groups of the same process count, logging to run_root/<probe_kind>/probe-<processes>.log)."""
    if not isinstance(chosen, ImageProbe):
        return {}
    settings = probe_settings(params)
    folder = runs_dir(params) / params.probe_kind
    keys, jobs = [], []
    for task in params.tasks:
        task_data, num_classes = params.task_data(task)
        for rep in representations:
            if rep.task in (None, task.name):
                keys.append((task.name, rep))
                output = folder / task.name / f"rep{rep.replicate}" / rep.variant
                jobs.append(
                    chosen.job(
                        settings, task.name, task_data, num_classes, list(rep.checkpoints), output
                    )
                )
    return dict(zip(keys, chosen.run_all(jobs, folder), strict=True))


def probe_description(params: TimecatSettings) -> str:
    """Which probe measured the results, and with what settings, in one sentence."""
    tasks = {task.name: params.task_data(task)[0] for task in params.tasks}
    return registry.get(params.probe_kind).describe(params.probe, tasks)


def _diagnostic_sample(rows: int, seed: int) -> torch.Tensor:
    if rows <= DIAGNOSTIC_ROWS:
        return torch.arange(rows)
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(rows, generator=generator)[:DIAGNOSTIC_ROWS].sort().values


def _diagnose(concatenated: torch.Tensor, models: list[torch.Tensor]) -> dict[str, float | None]:
    """Richness of a representation and the similarity of its models' features."""
    pairs = [diagnostics.linear_cka(a, b) for a, b in itertools.combinations(models, 2)]
    return {
        "features": int(concatenated.shape[1]),
        "rankme": diagnostics.rankme(concatenated.float()),
        "alpha_req": diagnostics.alpha_req(concatenated.float()),
        "seed_cka": sum(pairs) / len(pairs) if pairs else None,
    }
