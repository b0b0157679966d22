"""The time-concat experiment (paper Section 5, Table 3): plan, pretrain, probe, tabulate.

At a fixed budget, n models trained for budget/n each are concatenated and linearly probed
against one model trained for the whole budget (cat1), on the pretraining distribution and on
other tasks, beside controls (one wider model, untrained networks, direct training). Each is a
variant of kit.timecat_params; results key on the variant's name and compare with the named
baseline. Notebook 03 drives the steps below; each is resumable: finished runs (their DONE
marker) are skipped, interrupted ones resume from their checkpoint, and features are cached.

Training goes through kit.launch: in the kernel, as pinned worker processes, one torchrun per
run, or a Slurm array. Feature extraction and probing are also steps of their own, run as jobs
(`python -m kit.timecat extract|probe --profile P`, alone or under torchrun or srun, or launched
with the profile's launch settings by `launch_extraction` and `python -m kit.launch extract|probe`);
they go through the same cache as the notebook, which then finds the features and only probes.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import altair as alt
import polars as pl
import scipy.stats
import torch
import torch.distributed as dist
import yaml
from torch.utils.data import Dataset, Subset

from kit import features, models
from kit.core import distributed, files, processes
from kit.core import params as kit_params
from kit.core.params import ParameterError
from kit.core.paths import resolve
from kit.core.progress import KeptBar
from kit.data import datasets as data
from kit.experiments import evidence
from kit.experiments.timecat.settings import ProbeTask, TimecatSettings
from kit.launch import backends as kit_launch
from kit.launch import sbatch as kit_sbatch
from kit.launch.runs import (
    Launched,
    is_finished,  # also timecat.is_finished, for the notebook and tests
)
from kit.launch.settings import LaunchSettings
from kit.probes import probe
from kit.report import diagnostics
from kit.report import render as report
from kit.train import trainer as train
from kit.train.checkpoint import CHECKPOINT
from kit.train.settings import TrainSettings


@dataclass(frozen=True)
class Representation:
    """One probed representation: a variant's models in one replicate, concatenated."""

    variant: str
    kind: str
    n: int
    width: float
    replicate: int
    iterations_per_model: int | None
    checkpoints: tuple[Path, ...]
    task: str | None = None  # direct training: the only task it is probed on


@dataclass(frozen=True)
class PlannedTraining:
    config: TrainSettings


def runs_dir(params: TimecatSettings) -> Path:
    """Where runs, logs and cached features go: run_root, relative to the output folder."""
    return resolve(params.output_dir) / params.run_root


@dataclass(frozen=True)
class Plan:
    """What the experiment trains, initialises and probes."""

    trainings: list[PlannedTraining]
    #: untrained networks of random-init variants, written by `initialise`
    initial: list[TrainSettings]
    representations: list[Representation]


def plan(params: TimecatSettings) -> Plan:
    """Every run, untrained network and representation of the experiment. Folders are
    rep<r>/<variant>/seed<s> (direct: rep<r>/<variant>-<task>/seed<s>)."""
    root = runs_dir(params)
    runs: dict[Path, TrainSettings] = {}
    initial: list[TrainSettings] = []
    representations = []
    for replicate in range(params.replicates):
        seeds = params.seeds(replicate)
        for variant in params.variants:
            if variant.checkpoints is not None:
                representations.append(Representation(
                    variant.name, variant.kind, variant.n, variant.width, replicate,
                    variant.iterations, tuple(resolve(f) for f in
                                              variant.checkpoints[replicate])))
                continue
            tasks = ([params.tasks[[t.name for t in params.tasks].index(name)]
                      for name in variant.tasks] if variant.tasks else [None])
            for task in tasks:
                label = variant.name if task is None else f"{variant.name}-{task.name}"
                folders = [root / f"rep{replicate}" / label / f"seed{seed}"
                           for seed in seeds[:variant.n]]
                configs = [params.run_config(variant, seed, str(folder), task)
                           for seed, folder in zip(seeds, folders)]
                if variant.kind == "random-init":
                    initial += configs
                    files = tuple(folder / INITIAL for folder in folders)
                    iterations = None
                else:
                    runs.update(zip(folders, configs))
                    files = tuple(folder / CHECKPOINT for folder in folders)
                    iterations = configs[0].iterations
                representations.append(Representation(
                    variant.name, variant.kind, variant.n, variant.width, replicate, iterations,
                    files, None if task is None else task.name))
    return Plan([PlannedTraining(cfg) for cfg in runs.values()], initial, representations)


#: the file holding an untrained network (random-init variants), in the kit's checkpoint format
INITIAL = "initial.pt"


def initialise(configs: list[TrainSettings]) -> int:
    """Write the untrained networks of random-init variants as kit.train would start them (same
    seed, same architecture), in the kit's checkpoint format; returns how many were written
    (existing files are kept)."""
    written = 0
    for config in configs:
        path = resolve(config.output_dir) / INITIAL
        if path.exists():
            continue
        torch.manual_seed(config.seed)
        network = models.build(config.model, config.num_classes, config.width, config.stem,
                               config.data.image_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        with files.atomic_write(path) as handle:
            torch.save({"model": network.state_dict(), "config": config.model_dump()}, handle)
        written += 1
    return written


def changed_runs(trainings: list[PlannedTraining]) -> list[str]:
    """Run folders that already hold a run with other settings, and the settings that differ."""
    changed = []
    for planned in trainings:
        saved = resolve(planned.config.output_dir) / "config.yaml"
        if saved.exists():
            differing = planned.config.differing_settings(yaml.safe_load(saved.read_text()))
            if differing:
                changed.append(f"{saved.parent} ({', '.join(differing)})")
    return changed


def _refuse_changed_runs(trainings: list[PlannedTraining]) -> None:
    changed = changed_runs(trainings)
    if changed:
        raise ParameterError(
            f"{len(changed)} run folder(s) hold runs with other settings than these parameters: "
            + "; ".join(changed[:5]) + ("; ..." if len(changed) > 5 else "")
            + ". Keep them by choosing another run_root (e.g. --set run_root=time_concat_v2), "
            "or delete those folders to retrain them.")


def launch(trainings: list[PlannedTraining], params: TimecatSettings, wait: bool = True
           ) -> list[str]:
    """Train every unfinished run (finished ones are skipped) with kit.launch; returns what was
    skipped. A folder holding a run with other settings is refused before anything starts, never
    reused; runs that failed are named with their logs."""
    _refuse_changed_runs(trainings)
    skipped = [str(t.config.output_dir) for t in trainings if is_finished(t.config)]
    pending = [t.config for t in trainings if not is_finished(t.config)]
    if pending:
        kit_launch.launch(pending, params.launch, runs_dir(params), wait).check()
    return skipped


#: rows of the evaluation split the label-free diagnostics use (a seeded sample beyond that)
DIAGNOSTIC_ROWS = 4096


@dataclass(frozen=True)
class Measurements:
    """What notebook 03 measures: probe accuracies, and label-free diagnostics of each
    representation on each task's evaluation split."""

    results: pl.DataFrame
    diagnostics: pl.DataFrame


@dataclass(frozen=True)
class TaskFeatures:
    """A task's cached features: its representations' training and evaluation splits, and each
    of their checkpoints alone on the evaluation split (for the diagnostics)."""

    num_classes: int
    probed: list[Representation]
    train: list[features.FeatureSet]
    eval: list[features.FeatureSet]
    single: dict[Path, features.FeatureSet]
    eval_rows: int


def task_features(task: ProbeTask, representations: list[Representation],
                  params: TimecatSettings, progress: bool = False) -> TaskFeatures:
    """Extract (or find cached) every feature probe_all reads for one task: the one path to
    the cache, so that an extraction job and the notebook's probes meet the same entries.
    Under torchrun each rank extracts its shard. The authors' probe reads images, so for it
    only the diagnostics' features are extracted (`train` and `eval` stay empty)."""
    cache = runs_dir(params) / "features"
    on_features = params.probe_kind != "faithful"  # the fast and the L-BFGS probe
    task_data, num_classes = params.task_data(task)
    train_set, eval_set = data.probe_datasets(task_data, num_classes)
    split_name = "train"
    if params.probe_train_rows is not None and params.probe_train_rows < len(train_set):
        chosen = data.balanced_subset(data.labels_of(train_set), params.probe_train_rows,
                                      seed=params.base_seed)
        train_set = Subset(train_set, chosen.tolist())
        split_name = f"train[balanced {len(chosen)}, seed {params.base_seed}]"
    probed = [rep for rep in representations if rep.task in (None, task.name)]
    members = list(dict.fromkeys(c for rep in probed for c in rep.checkpoints))

    def extract(groups: list[list[Path]], split: str, dataset: Dataset
                ) -> list[features.FeatureSet]:
        return features.extract_many(
            groups, dataset, task_data.model_dump_json(), split,
            transform=data.resolved_augment(task_data), cache_dir=cache,
            batch_size=params.feature_batch_size, dtype=params.feature_dtype,
            device=params.device, num_workers=params.feature_workers, progress=progress)

    groups = [list(rep.checkpoints) for rep in probed]
    return TaskFeatures(
        num_classes, probed, extract(groups, split_name, train_set) if on_features else [],
        extract(groups, "eval", eval_set) if on_features else [],
        dict(zip(members, extract([[c] for c in members], "eval", eval_set))), len(eval_set))


def probe_all(representations: list[Representation], params: TimecatSettings) -> Measurements:
    """Probe every representation on every task with the probe `probe_kind` names (one row per
    representation, task and rule): the fast probe on (cached) extracted features, or the
    authors' probe on images (`faithful_result`). Also measure each representation's richness
    (RankMe, alpha-ReQ) and how alike its n models are (mean pairwise linear CKA) on features of
    the evaluation split, extracted for both probes."""
    on_features = params.probe_kind != "faithful"
    config = params.probe.model_copy(update={"device": params.device})
    rows, diagnosed = [], []
    bar = KeptBar(total=sum(rep.task in (None, task.name) for task in params.tasks
                         for rep in representations),
               desc=f"{params.probe_kind} probes", unit="probe")
    for task in params.tasks:
        extracted = task_features(task, representations, params)
        num_classes, single = extracted.num_classes, extracted.single
        sample = _diagnostic_sample(extracted.eval_rows, params.base_seed)
        for index, rep in enumerate(extracted.probed):
            bar.set_postfix_str(f"{task.name}: {rep.variant} (replicate {rep.replicate})",
                                refresh=False)  # update() redraws, at most every mininterval
            parts = [single[c].torch()[0][sample] for c in rep.checkpoints]
            exact = None
            if on_features:
                splits = [probe.Split(*found.torch(), found.record["split"])
                          for found in (extracted.train[index], extracted.eval[index])]
                converged = functools.partial(
                    probe.lbfgs_probe, splits[0], splits[1], num_classes, config.weight_decays,
                    config.heldout_fraction, seed=config.seed, device=params.device)
                if params.probe_kind == "lbfgs":
                    result = converged()
                else:  # the first replicate refitted by L-BFGS, as a check of the fast probe
                    exact = converged() if params.lbfgs_check and rep.replicate == 0 else None
                    result = probe.fast_probe(splits[0], splits[1], num_classes, config,
                                              progress=False)
                concatenated = splits[1].features[sample]
            else:
                result = faithful_result(rep, task, params)
                concatenated = torch.cat(parts, 1)
            described = {"variant": rep.variant, "kind": rep.kind, "n": rep.n,
                         "width": rep.width, "replicate": rep.replicate,
                         "iterations_per_model": rep.iterations_per_model,
                         "task": task.name, "role": task.role}
            for selected in result.selected.iter_rows(named=True):
                rows.append(described | {"rule": selected["rule"], "top1": selected["top1"],
                                         "top5": selected["top5"],
                                         "train_top1": selected["train_top1"],
                                         "lbfgs_top1": exact and exact.top1(selected["rule"])})
            diagnosed.append(described | _diagnose(concatenated, parts))
            bar.update()
    bar.close()
    return Measurements(
        pl.DataFrame(rows, schema_overrides={"iterations_per_model": pl.Int64,
                                             "top5": pl.Float64, "lbfgs_top1": pl.Float64}),
        pl.DataFrame(diagnosed, schema_overrides={"iterations_per_model": pl.Int64,
                                                  "seed_cka": pl.Float64}))


def faithful_result(rep: Representation, task: ProbeTask, params: TimecatSettings
                    ) -> probe.ProbeResult:
    """The authors' probe of one representation on one task, in
    run_root/faithful/<task>/rep<r>/<variant>: read back when it has finished, resumed when it
    was interrupted, under torchrun with `faithful.processes` processes."""
    settings = params.faithful
    assert settings is not None  # the schema requires it for probe_kind faithful
    task_data, num_classes = params.task_data(task)
    config = probe.FaithfulProbe(
        weight_decays=tuple(settings.grid(task.name, task_data.kind)), epochs=settings.epochs,
        milestones=tuple(settings.milestones), lr=settings.lr, batch_size=settings.batch_size,
        bn_batch=settings.bn_batch, heldout_fraction=settings.heldout_fraction,
        seed=settings.seed, precision=settings.precision, device=params.device)
    output = runs_dir(params) / "faithful" / task.name / f"rep{rep.replicate}" / rep.variant
    return probe.launch_faithful(list(rep.checkpoints), task_data, num_classes, output, config,
                                 settings.workers, settings.processes)


def probe_description(params: TimecatSettings) -> str:
    """Which probe measured the results, and with what settings, in one sentence."""
    if params.probe_kind == "lbfgs":
        return (f"full-batch L-BFGS on cached features (multinomial logistic regression, "
                f"converged), one fit per weight decay {params.probe.weight_decays}, chosen on "
                f"{params.probe.heldout_fraction:.0%} held-out training rows or on the "
                "evaluation split")
    if params.probe_kind == "fast":
        fast = params.probe
        finish = ("; each weight decay's lowest-objective head then finished by float64 "
                  "L-BFGS to its tolerance" if fast.select_from == "converged" else "")
        return (f"the kit's fast probe on cached features: one head per learning rate "
                f"{fast.lrs} x weight decay {fast.weight_decays}, {fast.epochs} epochs "
                f"(SGD, Nesterov, cosine decay, standardised features){finish}")
    settings = params.faithful
    assert settings is not None
    grids = "; ".join(f"{task.name} {settings.grid(task.name, params.task_data(task)[0].kind)}"
                      for task in params.tasks)
    return (f"the authors' probe on images: BatchNorm1d + linear heads on the frozen backbones "
            f"({settings.precision}), SGD lr {settings.lr} Nesterov, {settings.epochs} epochs "
            f"(x0.1 after epochs {settings.milestones}), global batch {settings.batch_size} "
            f"over {settings.processes} process(es); weight decays {grids}")


def _diagnostic_sample(rows: int, seed: int) -> torch.Tensor:
    if rows <= DIAGNOSTIC_ROWS:
        return torch.arange(rows)
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(rows, generator=generator)[:DIAGNOSTIC_ROWS].sort().values


def _diagnose(concatenated: torch.Tensor, models: list[torch.Tensor]) -> dict[str, float | None]:
    """Richness of a representation and the similarity of its models' features."""
    pairs = [diagnostics.linear_cka(a, b) for a, b in itertools.combinations(models, 2)]
    return {"features": int(concatenated.shape[1]),
            "rankme": diagnostics.rankme(concatenated.float()),
            "alpha_req": diagnostics.alpha_req(concatenated.float()),
            "seed_cka": sum(pairs) / len(pairs) if pairs else None}


def diagnostics_table(measured: pl.DataFrame) -> pl.DataFrame:
    """Mean and std over replicates of each variant's diagnostics, task by task."""
    order = {v: i for i, v in enumerate(variant_order(measured))}
    stats = measured.group_by("task", "variant").agg(
        pl.col("features").first(),
        *[aggregate for column in ("rankme", "alpha_req", "seed_cka")
          for aggregate in (pl.col(column).mean().alias(f"{column}_mean"),
                            pl.col(column).std().alias(f"{column}_std"))],
        pl.len().alias("replicates"))
    return stats.sort("task", pl.col("variant").replace_strict(order, return_dtype=pl.Int64))


def variant_order(results: pl.DataFrame) -> list[str]:
    """Variants in the order the parameters list them (the order results were recorded in)."""
    return list(dict.fromkeys(results["variant"].to_list()))


def table3(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """The paper's layout: one row per variant, for every task its top-1 % as mean and std over
    replicates (number columns '<task> mean', '<task> std'), and the number of replicates."""
    chosen = results.filter(pl.col("rule") == rule)
    stats = chosen.group_by("variant", "task", maintain_order=True).agg(
        (100 * pl.col("top1").mean()).alias("mean"), (100 * pl.col("top1").std()).alias("std"))
    wide = report.wide_mean_std(stats, ["variant"], "task")
    budget = chosen.group_by("variant").agg(
        pl.col("kind").first(), pl.col("n").first(), pl.col("width").first(),
        pl.col("iterations_per_model").first(),
        pl.col("replicate").n_unique().alias("replicates"))
    order = {v: i for i, v in enumerate(variant_order(results))}
    return (budget.join(wide, on="variant")
            .with_columns((pl.col("n") * pl.col("iterations_per_model")).alias("total_iterations"))
            .sort(pl.col("variant").replace_strict(order, return_dtype=pl.Int64))
            .select("variant", "kind", "n", "width", "iterations_per_model", "total_iterations",
                    "replicates", *[c for c in wide.columns if c != "variant"]))


def gains(results: pl.DataFrame, rule: str, baseline: str, confidence: float = 0.95
          ) -> pl.DataFrame:
    """Per replicate, each variant's accuracy minus the baseline variant's on every task they
    share; the mean gain, its std and a two-sided t interval over replicates (paired), and the
    verdict the interval supports."""
    chosen = results.filter(pl.col("rule") == rule)
    reference = chosen.filter(pl.col("variant") == baseline).select(
        "replicate", "task", pl.col("top1").alias("baseline_top1"))
    paired = chosen.filter(pl.col("variant") != baseline).join(reference,
                                                               on=["replicate", "task"])
    stats = paired.group_by("variant", "kind", "n", "task", "role").agg(
        (100 * (pl.col("top1") - pl.col("baseline_top1")).mean()).alias("gain_mean"),
        (100 * (pl.col("top1") - pl.col("baseline_top1")).std()).alias("gain_std"),
        pl.len().alias("replicates"))
    half = [float(scipy.stats.t.ppf(0.5 + confidence / 2, count - 1) * std / math.sqrt(count))
            if count > 1 and std is not None else None
            for count, std in zip(stats["replicates"], stats["gain_std"])]
    stats = stats.with_columns(pl.Series("half_width", half, dtype=pl.Float64)).with_columns(
        (pl.col("gain_mean") - pl.col("half_width")).alias("low"),
        (pl.col("gain_mean") + pl.col("half_width")).alias("high"))
    verdict = (pl.when(pl.col("half_width").is_null()).then(pl.lit("untested (one replicate)"))
               .when(pl.col("low") > 0).then(pl.lit("better"))
               .when(pl.col("high") < 0).then(pl.lit("worse"))
               .otherwise(pl.lit("no clear difference")))
    order = {v: i for i, v in enumerate(variant_order(results))}
    return (stats.with_columns(pl.lit(baseline).alias("baseline"), verdict.alias("verdict"))
            .drop("half_width")
            .sort(pl.col("variant").replace_strict(order, return_dtype=pl.Int64), "task"))


def probe_agreement(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """The fast probe beside a converged L-BFGS fit of the same features (where `lbfgs_check`
    recorded one): top-1 % of both and their difference, largest first."""
    return (results.filter((pl.col("rule") == rule) & pl.col("lbfgs_top1").is_not_null())
            .select("variant", "replicate", "task", (100 * pl.col("top1")).alias("fast %"),
                    (100 * pl.col("lbfgs_top1")).alias("L-BFGS %"))
            .with_columns((pl.col("fast %") - pl.col("L-BFGS %")).alias("difference"))
            .sort(pl.col("difference").abs(), descending=True))


def train_eval_gap(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """Each variant's probe top-1 % on its training rows and on the evaluation split (means
    over replicates): a large gap says the probe fits its rows more than the task, which more
    features make easier."""
    return (results.filter(pl.col("rule") == rule)
            .group_by("variant", "task", maintain_order=True)
            .agg((100 * pl.col("train_top1").mean()).alias("train %"),
                 (100 * pl.col("top1").mean()).alias("eval %"))
            .with_columns((pl.col("train %") - pl.col("eval %")).alias("gap")))


def pretraining_passes(params: TimecatSettings) -> float | None:
    """How many times the longest pretraining run goes through its pool of synthetic images
    (at most 1: no image is seen twice, data streamed as the paper assumes); None on real
    data, where the budget sets the epochs."""
    if params.train is None or params.train.data.synthetic is None:
        return None
    most = max((params.iterations_for(v) for v in params.variants if v.trained), default=0)
    return most * params.train.batch_size / params.train.data.synthetic.num_train


def paper_side_by_side(results: pl.DataFrame, rule: str, paper_columns: dict[str, str]
                       ) -> pl.DataFrame:
    """The paper's Table 3 next to this run's numbers, for tasks mapped to the paper's datasets
    and variants named as the paper's methods."""
    paper = evidence.load("table3").select(
        pl.col("method").str.replace(r" \(baseline\)", "").alias("variant"),
        pl.col("eval_dataset").alias("paper_dataset"), pl.col("value").alias("paper_top1"))
    mine = results.filter(pl.col("rule") == rule).group_by("variant", "task").agg(
        (100 * pl.col("top1").mean()).round(2).alias("kit_top1_mean"),
        (100 * pl.col("top1").std()).round(2).alias("kit_top1_std"), pl.len().alias("replicates"))
    mapping = pl.DataFrame({"task": list(paper_columns), "paper_dataset":
                            list(paper_columns.values())}, schema={"task": pl.String,
                                                                   "paper_dataset": pl.String})
    return paper.join(mapping, on="paper_dataset", how="left").join(
        mine, on=["variant", "task"], how="left").sort("paper_dataset", "variant")


def control_gains(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """Each time-concat variant of several models against the controls a reviewer asks for, in
    `gains`' layout: every `wide` variant (one model with as many or more features) and the
    `random-init` variant of the same n (the same architecture without learning)."""
    variants = results.select("variant", "kind", "n").unique()
    concat = variants.filter((pl.col("kind") == "time-concat") & (pl.col("n") > 1))
    frames = []
    for control in variants.filter(pl.col("kind").is_in(["wide", "random-init"])).iter_rows(
            named=True):
        against = concat if control["kind"] == "wide" else concat.filter(
            pl.col("n") == control["n"])
        if against.height:
            frames.append(gains(results, rule, control["variant"]).filter(
                pl.col("variant").is_in(against["variant"].to_list())))
    return pl.concat(frames) if frames else gains(results, rule, "").clear()


def _verdict_line(row: dict[str, object]) -> str:
    spread = ("" if row["low"] is None else
              f", 95% interval [{row['low']:+.1f}, {row['high']:+.1f}]")
    return (f"{row['variant']} vs {row['baseline']} on {row['task']} ({row['role']}): "
            f"{row['gain_mean']:+.1f} points over {row['replicates']} replicate(s)"
            f"{spread}: {row['verdict']}")


def summarize(results: pl.DataFrame, rule: str, baseline: str) -> dict[str, object]:
    """Plain statements of what this run measured (also returned as numbers): every variant
    against the baseline, then catN against the controls on the same tasks."""
    table = gains(results, rule, baseline)
    controls = control_gains(results, rule)
    lines = [_verdict_line(row) for row in table.iter_rows(named=True)]
    tally = table.group_by("variant").agg(
        (pl.col("verdict") == "better").sum().alias("better"),
        (pl.col("verdict") == "worse").sum().alias("worse"), pl.len().alias("tasks"))
    order = {v: i for i, v in enumerate(variant_order(results))}
    tally = tally.sort(pl.col("variant").replace_strict(order, return_dtype=pl.Int64))
    for row in tally.iter_rows(named=True):
        lines.append(f"{row['variant']}: better than {baseline} on {row['better']} of "
                     f"{row['tasks']} tasks, worse on {row['worse']} (rule {rule})")
    lines += [_verdict_line(row) for row in controls.iter_rows(named=True)]
    return {"rule": rule, "baseline": baseline, "gains": table.to_dicts(),
            "tally": tally.to_dicts(), "controls": controls.to_dicts(), "lines": lines}


# ---------------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------------

def training_chart(curves: pl.DataFrame) -> alt.FacetChart:
    """Training loss of every run: one panel per variant, every run named in its legend."""
    named = curves.filter(pl.col("loss").is_not_null()).with_columns(
        pl.Series("run", report.short_names(curves.filter(pl.col("loss").is_not_null())["run"])))
    named = named.with_columns(pl.col("run").str.split("/").list.get(1).alias("variant"))
    return report.series_lines(named, "step", "loss", "run", facet="variant",
                               y_title="training loss")


def _mean_std(results: pl.DataFrame, rule: str, by: list[str]) -> pl.DataFrame:
    stats = results.filter(pl.col("rule") == rule).group_by(by).agg(
        (100 * pl.col("top1").mean()).alias("mean"),
        (100 * pl.col("top1").std()).fill_null(0).alias("std"), pl.len().alias("count"))
    return stats.with_columns((pl.col("mean") - pl.col("std")).alias("low"),
                              (pl.col("mean") + pl.col("std")).alias("high"))


def ceilings(params: TimecatSettings) -> dict[str, float]:
    """Top-1 % a perfect reader of every cue reaches on each synthetic task (the Bayes ceiling,
    kit.data.bayes_ceiling); tasks on real data have none."""
    levels = {}
    for task in params.tasks:
        task_data, classes = params.task_data(task)
        if task_data.synthetic is not None:
            levels[task.name] = 100 * data.bayes_ceiling(task_data.synthetic, classes)
    return levels


def chance_levels(params: TimecatSettings) -> dict[str, float]:
    """Top-1 % of guessing on each task (its classes are balanced: the synthetic world draws
    labels uniformly, the paper's datasets are close to it)."""
    return {task.name: 100 / params.task_data(task)[1] for task in params.tasks}


def accuracy_chart(results: pl.DataFrame, rule: str, chance: dict[str, float],
                   ceiling: dict[str, float] | None = None) -> alt.FacetChart:
    """Top-1 of every variant on every task (mean ± std over replicates), on one 0-100 scale
    for all panels, with each task's chance level (`chance`: task -> top-1 % of guessing) and,
    where known, its Bayes ceiling (`ceiling`) drawn and labelled."""
    ceiling = ceiling or {}
    stats = _mean_std(results, rule, ["task", "variant"]).with_columns(
        pl.col("task").replace_strict(chance, return_dtype=pl.Float64).alias("chance"),
        pl.col("task").replace_strict(ceiling, default=None, return_dtype=pl.Float64)
        .alias("ceiling"))
    order = variant_order(results)
    y = alt.Y("mean:Q", title="top-1 (%)", scale=alt.Scale(domain=[0, 100]))
    base = alt.Chart().encode(x=alt.X("variant:N", sort=order, title=None))
    layers = [base.mark_point(filled=True, size=50).encode(
                  y=y, color=alt.Color("variant:N", sort=order, legend=None),
                  tooltip=["task", "variant", "mean", "std", "count"]),
              base.mark_errorbar().encode(y=alt.Y("low:Q", title="top-1 (%)"), y2="high:Q"),
              report.chance_lines("chance"),
              report.reference_lines("ceiling", "Bayes ceiling", dash=(1, 0))]
    return alt.layer(*layers, data=stats).properties(width=150, height=160).facet(
        column=alt.Column("task:N", title=None))


def task_table(params: TimecatSettings) -> pl.DataFrame:
    """What each probe task is: its role, classes, chance level and Bayes ceiling (synthetic
    tasks), and the rows its probe trains on."""
    chance, ceiling = chance_levels(params), ceilings(params)
    rows = []
    for task in params.tasks:
        task_data, classes = params.task_data(task)
        every = task_data.synthetic.num_train if task_data.synthetic else None
        rows.append({"task": task.name, "role": task.role, "classes": classes,
                     "chance %": chance[task.name], "Bayes ceiling %": ceiling.get(task.name),
                     "probe train rows": params.probe_train_rows or every})
    return pl.DataFrame(rows, schema={
        "task": pl.String, "role": pl.String, "classes": pl.Int64, "chance %": pl.Float64,
        "Bayes ceiling %": pl.Float64, "probe train rows": pl.Int64})


def role_chart(results: pl.DataFrame, rule: str) -> alt.LayerChart:
    """In distribution vs in the mixture vs unseen: mean over the tasks of each role, for the
    variants probed on every task."""
    tasks = results["task"].n_unique()
    everywhere = results.group_by("variant").agg(pl.col("task").n_unique().alias("tasks"))\
        .filter(pl.col("tasks") == tasks)["variant"]
    per_task = results.filter((pl.col("rule") == rule) & pl.col("variant").is_in(everywhere))
    per_role = per_task.group_by("role", "variant", "replicate").agg(pl.col("top1").mean())
    stats = _mean_std(per_role.with_columns(pl.lit(rule).alias("rule")), rule,
                      ["role", "variant"])
    title = "mean top-1 over the role's tasks (%)"
    order = [v for v in variant_order(results) if v in set(everywhere)]
    base = alt.Chart(stats).encode(x=alt.X("variant:N", sort=order, title=None),
                                   color=alt.Color("role:N", title="task role"))
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title=title, scale=alt.Scale(zero=False)), detail="role:N",
        tooltip=["role", "variant", "mean", "std"])
    bars = base.mark_errorbar().encode(y=alt.Y("low:Q", title=title), y2="high:Q")
    return (line + bars).properties(width=320, height=220)


# ---------------------------------------------------------------------------------------------
# Extraction and probing as jobs: `python -m kit.timecat extract|probe --profile P`
# ---------------------------------------------------------------------------------------------

NOTEBOOK = "03_time_concat"
#: what the probe step writes into output_dir (the files notebook 03 writes)
RESULTS = "time_concat_results.parquet"
DIAGNOSTICS = "time_concat_diagnostics.parquet"
#: in the feature cache: what the last complete extraction covered
EXTRACTED = "extracted.json"
Step = Literal["extract", "probe"]


def _extraction_record(params: TimecatSettings, representations: list[Representation]
                       ) -> dict[str, object] | None:
    """What the cached features depend on, cheap to compare: tasks, probe rows, seed, dtype,
    training settings, and each checkpoint's path, size and modification time (None while one
    is missing). The cache itself still checks content on every read."""
    checkpoints = sorted({str(c) for rep in representations for c in rep.checkpoints})
    try:
        stats = [[c, os.stat(c).st_size, os.stat(c).st_mtime_ns] for c in checkpoints]
    except FileNotFoundError:
        return None
    return params.model_dump(mode="json", include={"tasks", "train", "probe_train_rows",
                                                   "base_seed", "feature_dtype"}) | {
        "checkpoints": stats}


def extraction_finished(params: TimecatSettings) -> bool:
    """Whether an extraction step completed for exactly these parameters and checkpoints."""
    record = _extraction_record(params, plan(params).representations)
    marker = runs_dir(params) / "features" / EXTRACTED
    return record is not None and marker.exists() and json.loads(marker.read_text()) == record


@contextlib.contextmanager
def _stopped_by_preemption() -> Iterator[None]:
    """A preemption signal (Slurm's notice, SIGTERM) stops the step with train.Preempted, exit
    status 75, on which a Slurm job requeues itself: finished cache entries are kept (each is
    renamed into place complete), the others are extracted by the next run."""
    def stop(number: int, _frame: object) -> None:
        raise train.Preempted(f"{signal.Signals(number).name}: stopped; cache entries finished "
                              "so far are kept, run it again to extract the rest")

    with processes.signal_handlers(processes.PREEMPTION_SIGNALS, stop):
        yield


def extract_step(params: TimecatSettings) -> int:
    """Extract every feature probe_all reads into its cache, as one process or one rank of a
    torchrun/srun group (gloo on CPU, NCCL on GPU; each rank extracts its shard). Unfinished or
    changed training runs are refused before anything is extracted. Returns the number of
    cache entries the probes read (extracted now or found)."""
    process = distributed.start_process(params.device)
    print(f"extracting features: rank {process.rank}/{process.world_size} on {process.device}",
          flush=True)
    try:
        experiment = plan(params)
        _refuse_changed_runs(experiment.trainings)
        unfinished = [str(resolve(t.config.output_dir)) for t in experiment.trainings
                      if not is_finished(t.config)]
        if unfinished:
            raise ParameterError(f"{len(unfinished)} training run(s) have not finished, so there "
                                 f"is nothing to extract from yet: {', '.join(unfinished[:5])}")
        if process.main:
            initialise(experiment.initial)
        if dist.is_initialized():
            dist.barrier()
        with _stopped_by_preemption():
            found = [task_features(task, experiment.representations, params,
                                   progress=process.main) for task in params.tasks]
        if process.main:
            with files.atomic_write(runs_dir(params) / "features" / EXTRACTED) as handle:
                handle.write(json.dumps(_extraction_record(params, experiment.representations),
                                        indent=1).encode())
        return len({entry.path for task in found
                    for entry in [*task.train, *task.eval, *task.single.values()]})
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def probe_step(params: TimecatSettings) -> Path:
    """Probe every representation (features from the cache; missing ones are extracted here)
    and write the results and diagnostics tables notebook 03 writes; returns the results file.
    One process: probing reads cached features and needs no group."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ParameterError("the probe step runs as one process, not under torchrun or srun "
                             "with several tasks")
    measured = probe_all(plan(params).representations, params)
    out = report.output_dir(params.output_dir)
    measured.diagnostics.write_parquet(out / DIAGNOSTICS)
    measured.results.write_parquet(out / RESULTS)
    return out / RESULTS


def write_job_parameters(params: TimecatSettings, path: Path) -> Path:
    """The merged parameters as one file that a job layers over its profile (`-f`), so that it
    sees exactly what the notebook saw, papermill's injected values included."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with files.atomic_write(path) as handle:
        handle.write(yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False).encode())
    return path


def job_args(step: Step, profile: str, parameters_file: Path) -> list[str]:
    """`python -m` arguments of a step."""
    return ["kit", step, "--profile", profile, "-f", str(parameters_file)]


def step_settings(step: Step, settings: LaunchSettings) -> LaunchSettings:
    """The launch settings of a step: extraction uses all of them (every GPU of the node, or
    several nodes); probing is one process on at most one GPU."""
    if step == "extract":
        return settings
    return settings.model_copy(update={"nproc_per_node": 1, "nodes": 1, "workers": 1,
                                       "gpus_per_node": min(settings.gpus_per_node, 1)})


def launch_step(step: Step, params: TimecatSettings,
                settings: LaunchSettings | None = None, wait: bool = True
                ) -> Launched:
    """Run a step as a job with the profile's launch settings (or `settings`): in this process
    (inline), as one process or one torchrun on this node (local, torchrun; log in
    <run_root>/logs/<step>.log), or as a Slurm job (`wait=False` returns once submitted)."""
    folder = runs_dir(params)
    parameters_file = write_job_parameters(params, folder / "jobs" / f"{NOTEBOOK}.parameters.yaml")
    return kit_launch.launch_step(step, job_args(step, params.profile, parameters_file),
                                  step_settings(step, settings or params.launch), folder, wait)


def launch_extraction(params: TimecatSettings, wait: bool = True) -> bool:
    """Extract every feature the probes need as a launched job unless a finished extraction
    covers these parameters and checkpoints; returns whether they are all extracted now (False:
    a Slurm job is still queued or running). A failed job is named with its log."""
    if extraction_finished(params):
        return True
    launch_step("extract", params, wait=wait).check()
    return extraction_finished(params)


def export_jobs(params: TimecatSettings, settings: LaunchSettings, out: str | Path
                ) -> list[Path]:
    """Ready-to-submit Slurm scripts in `out`: train.sbatch (the notebook's training runs, an
    array; absent when nothing is trained), extract.sbatch, probe.sbatch, and submit.sh, which
    submits them in that order, each after the previous one succeeded."""
    out = resolve(out)
    trainings = plan(params).trainings
    scripts = [kit_sbatch.export_plan([t.config for t in trainings], settings, out)
               ] if trainings else []
    parameters_file = write_job_parameters(params, out / f"{NOTEBOOK}.parameters.yaml")
    scripts += [kit_sbatch.export_step(step, job_args(step, params.profile, parameters_file),
                                       step_settings(step, settings), out)
                for step in ("extract", "probe")]
    return [*scripts, kit_sbatch.export_chain(scripts, out)]


def load_settings(profile: str, parameter_files: list[Path], overrides: list[str]
                ) -> TimecatSettings:
    """Notebook 03's parameters for a profile, files and KEY=VALUE overrides."""
    loaded, _ = kit_params.load(NOTEBOOK, profile, parameter_files,
                                kit_params.parse_overrides(overrides))
    assert isinstance(loaded, TimecatSettings)
    return loaded
