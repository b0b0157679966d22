"""The time-concat experiment (paper Section 5, Table 3): plan, pretrain, probe, tabulate.

At a fixed budget, n models trained for budget/n each are concatenated and linearly probed
against one model trained for the whole budget (cat1), on the pretraining distribution and on
other tasks. Notebook 03 drives the steps below; each is resumable: finished runs (their DONE
marker) are skipped, interrupted ones resume from their checkpoint, and features are cached.

Training goes through kit.launch: in the kernel, as pinned worker processes, one torchrun per
run, or a Slurm array.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import polars as pl
import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from kit import data, evidence, features, plan, probe, train
from kit import launch as kit_launch
from kit.config import LaunchParams, TimecatParams, TrainConfig
from kit.paths import resolve


@dataclass(frozen=True)
class Representation:
    """One probed representation: the models concatenated for a method and replicate."""

    method: str  # "cat<n>" or "direct"
    n: int
    replicate: int
    iterations_per_model: int | None
    checkpoints: tuple[Path, ...]
    task: str | None = None  # direct training: the task it was trained on


@dataclass(frozen=True)
class PlannedTraining:
    config: TrainConfig
    config_file: Path


def runs_dir(params: TimecatParams) -> Path:
    """Where runs, logs and cached features go: run_root, relative to the output folder."""
    return resolve(params.output_dir) / params.run_root


def plan_training(params: TimecatParams) -> tuple[list[PlannedTraining], list[Representation]]:
    """Every training run of the experiment, and the representations built from them."""
    root = runs_dir(params)
    base = params.base_train()
    runs: dict[Path, TrainConfig] = {}
    representations = []
    for replicate in range(params.replicates):
        seeds = params.seeds(replicate)
        for n in params.ns:
            iterations = params.iterations_per_model(n)
            planned = plan.time_concat(n, seeds, root / f"rep{replicate}", iterations=iterations)
            for run in planned:
                runs[run.output_dir] = plan.configure(run, base)
            representations.append(Representation(
                f"cat{n}", n, replicate, iterations,
                tuple(run.output_dir / train.CHECKPOINT for run in planned)))
        budget = params.iterations_per_model(params.ns[0]) * params.ns[0]
        for task in params.tasks:
            if not task.direct:
                continue
            task_data, num_classes = params.task_data(task)
            folder = root / f"rep{replicate}" / f"direct-{task.name}" / f"seed{seeds[0]}"
            runs[folder] = base.model_copy(update={
                "data": task_data, "num_classes": num_classes, "seed": seeds[0],
                "iterations": budget, "output_dir": str(folder)})
            representations.append(Representation("direct", 1, replicate, budget,
                                                  (folder / train.CHECKPOINT,), task.name))
    configs_dir = root / "configs"
    trainings = [PlannedTraining(cfg, configs_dir / f"{folder.relative_to(root)}.yaml"
                                 .replace(os.sep, "__")) for folder, cfg in runs.items()]
    return trainings, representations


def checkpoint_representations(params: TimecatParams) -> list[Representation]:
    """The representations of `mode: checkpoints`: existing files, probed as they are."""
    assert params.checkpoints is not None
    return [Representation(f"cat{n}", n, replicate, None,
                           tuple(resolve(f) for f in sets[replicate]))
            for n, sets in zip(params.ns, params.checkpoints)
            for replicate in range(params.replicates)]


def is_finished(config: TrainConfig) -> bool:
    return (resolve(config.output_dir) / train.DONE).exists()


def launch(trainings: list[PlannedTraining], params: TimecatParams, wait: bool = True
           ) -> list[str]:
    """Train every unfinished run (finished ones are skipped) with kit.launch; returns what was
    skipped. Runs that failed are named with their logs."""
    skipped = [str(t.config.output_dir) for t in trainings if is_finished(t.config)]
    pending = [t.config for t in trainings if not is_finished(t.config)]
    if pending:
        kit_launch.launch(pending, launch_settings(params.launch), runs_dir(params), wait).check()
    return skipped


def launch_settings(launch: LaunchParams | kit_launch.LaunchConfig) -> kit_launch.LaunchConfig:
    """The launcher's settings for the notebook's `launch` (inline, subprocess x parallel,
    torchrun x nproc_per_node)."""
    if isinstance(launch, kit_launch.LaunchConfig):
        return launch
    if launch.kind == "subprocess":
        return kit_launch.LaunchConfig(backend="local", workers=launch.parallel)
    return kit_launch.LaunchConfig(backend=launch.kind, nproc_per_node=launch.nproc_per_node)


def probe_all(representations: list[Representation], params: TimecatParams
              ) -> pl.DataFrame:
    """Extract (cached) features of every representation on every task, probe them, and return
    one row per (representation, task, rule)."""
    cache = runs_dir(params) / "features"
    config = probe.FastProbe(lrs=tuple(params.probe.lrs),
                             weight_decays=tuple(params.probe.weight_decays),
                             epochs=params.probe.epochs, batch_size=params.probe.batch_size,
                             heldout_fraction=params.probe.heldout_fraction,
                             device=params.device)
    rows = []
    for task in params.tasks:
        task_data, num_classes = params.task_data(task)
        train_set, eval_set = data.probe_datasets(task_data, num_classes)
        train_set = Subset(train_set, range(min(len(train_set), params.probe_train_limit)))
        if task_data.kind == "synthetic":  # render once, read by every representation
            train_set, eval_set = _in_memory(train_set), _in_memory(eval_set)
        described = task_data.model_dump_json()
        for rep in representations:
            if rep.method == "direct" and rep.task != task.name:
                continue
            splits = []
            for split, dataset in ((f"train[:{len(train_set)}]", train_set), ("eval", eval_set)):
                extracted = features.extract(
                    list(rep.checkpoints), dataset, described, split,
                    transform=data.resolved_augment(task_data), cache_dir=cache,
                    batch_size=params.feature_batch_size, dtype=params.feature_dtype,
                    device=params.device, progress=False)
                x, y = extracted.torch()
                splits.append(probe.Split(x, y, split))
            result = probe.fast_probe(splits[0], splits[1], num_classes, config,
                                      progress=False)
            for selected in result.selected.iter_rows(named=True):
                rows.append({"method": rep.method, "n": rep.n, "replicate": rep.replicate,
                             "iterations_per_model": rep.iterations_per_model,
                             "task": task.name, "role": task.role, "rule": selected["rule"],
                             "top1": selected["top1"], "top5": selected["top5"]})
    return pl.DataFrame(rows)


def _in_memory(dataset: Dataset) -> TensorDataset:
    images, labels = zip(*(dataset[i] for i in range(len(dataset))))
    return TensorDataset(torch.stack(images), torch.tensor(labels))


def method_order(results: pl.DataFrame) -> list[str]:
    methods = results.select("method", "n").unique().sort("n")["method"].to_list()
    return [m for m in dict.fromkeys(methods) if m != "direct"] + (
        ["direct"] if "direct" in methods else [])


def table3(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """The paper's layout: one row per method, one column per task, top-1 % as mean ± std over
    replicates (and the number of replicates)."""
    chosen = results.filter(pl.col("rule") == rule)
    stats = chosen.group_by("method", "task").agg(
        (100 * pl.col("top1").mean()).alias("mean"), (100 * pl.col("top1").std()).alias("std"),
        pl.len().alias("replicates"))
    cells = stats.with_columns(pl.format("{} ± {}", pl.col("mean").round(1),
                                         pl.col("std").fill_null(0).round(1)).alias("cell"))
    wide = cells.pivot(on="task", index="method", values="cell")
    budget = chosen.group_by("method").agg(pl.col("n").first(),
                                           pl.col("iterations_per_model").first(),
                                           pl.col("replicate").n_unique().alias("replicates"))
    order = {m: i for i, m in enumerate(method_order(results))}
    tasks = list(dict.fromkeys(results["task"].to_list()))
    return (budget.join(wide, on="method")
            .with_columns((pl.col("n") * pl.col("iterations_per_model")).alias("total_iterations"))
            .sort(pl.col("method").replace_strict(order, return_dtype=pl.Int64))
            .select("method", "iterations_per_model", "total_iterations", "replicates",
                    *[t for t in tasks if t in wide.columns]))


def gains_over_cat1(results: pl.DataFrame, rule: str) -> pl.DataFrame:
    """Per replicate, each catN's accuracy minus cat1's on every task; mean and std over
    replicates, and whether the mean gain exceeds its spread."""
    chosen = results.filter((pl.col("rule") == rule) & (pl.col("method") != "direct"))
    cat1 = chosen.filter(pl.col("n") == 1).select("replicate", "task",
                                                  pl.col("top1").alias("cat1"))
    paired = chosen.filter(pl.col("n") > 1).join(cat1, on=["replicate", "task"])
    return paired.group_by("method", "n", "task", "role").agg(
        (100 * (pl.col("top1") - pl.col("cat1")).mean()).alias("gain_mean"),
        (100 * (pl.col("top1") - pl.col("cat1")).std()).alias("gain_std"),
        pl.len().alias("replicates"),
    ).with_columns(
        (pl.col("gain_mean") > pl.col("gain_std").fill_null(float("inf"))).alias("beats_cat1"),
    ).sort("n", "task")


def paper_side_by_side(results: pl.DataFrame, rule: str, paper_columns: dict[str, str]
                       ) -> pl.DataFrame:
    """The paper's Table 3 next to this run's numbers, for tasks mapped to the paper's datasets."""
    paper = evidence.load("table3").select(
        pl.col("method").str.replace(r" \(baseline\)", "").alias("method"),
        pl.col("eval_dataset").alias("paper_dataset"), pl.col("value").alias("paper_top1"))
    mine = results.filter(pl.col("rule") == rule).group_by("method", "task").agg(
        (100 * pl.col("top1").mean()).round(2).alias("kit_top1_mean"),
        (100 * pl.col("top1").std()).round(2).alias("kit_top1_std"), pl.len().alias("replicates"))
    mapping = pl.DataFrame({"task": list(paper_columns), "paper_dataset":
                            list(paper_columns.values())}, schema={"task": pl.String,
                                                                   "paper_dataset": pl.String})
    return paper.join(mapping, on="paper_dataset", how="left").join(
        mine, on=["method", "task"], how="left").sort("paper_dataset", "method")


def summarize(results: pl.DataFrame, rule: str) -> dict[str, object]:
    """Plain statements of what this run measured (also returned as numbers)."""
    gains = gains_over_cat1(results, rule)
    lines = []
    for row in gains.iter_rows(named=True):
        verdict = "beat" if row["beats_cat1"] else "did not beat"
        spread = "n/a" if row["gain_std"] is None else f"{row['gain_std']:.1f}"
        lines.append(f"{row['method']} {verdict} cat1 on {row['task']} ({row['role']}): "
                     f"{row['gain_mean']:+.1f} ± {spread} points over {row['replicates']} "
                     "replicate(s)")
    wins = gains.group_by("method").agg(pl.col("beats_cat1").sum().alias("wins"),
                                        pl.len().alias("tasks")).sort("method")
    for row in wins.iter_rows(named=True):
        lines.append(f"{row['method']} beat cat1 on {row['wins']} of {row['tasks']} tasks "
                     f"(rule {rule})")
    direct = results.filter((pl.col("rule") == rule) & (pl.col("method") == "direct"))
    for row in direct.group_by("task").agg((100 * pl.col("top1").mean()).alias("top1"))\
            .sort("task").iter_rows(named=True):
        cat1 = results.filter((pl.col("rule") == rule) & (pl.col("method") == "cat1")
                              & (pl.col("task") == row["task"]))["top1"].mean()
        lines.append(f"direct training on {row['task']}: {row['top1']:.1f}% against cat1's "
                     f"probe {100 * cat1:.1f}%")
    return {"rule": rule, "gains": gains.to_dicts(), "wins": wins.to_dicts(), "lines": lines}


# ---------------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------------

def training_chart(curves: pl.DataFrame) -> alt.Chart:
    return alt.Chart(curves.filter(pl.col("loss").is_not_null())).mark_line().encode(
        x=alt.X("step:Q"), y=alt.Y("loss:Q", title="training loss"),
        detail="run:N", color=alt.Color("run:N", legend=None), tooltip=["run", "step", "loss"],
    ).properties(width=420, height=200, title="training loss of every run")


def _mean_std(results: pl.DataFrame, rule: str, by: list[str]) -> pl.DataFrame:
    stats = results.filter(pl.col("rule") == rule).group_by(by).agg(
        (100 * pl.col("top1").mean()).alias("mean"),
        (100 * pl.col("top1").std()).fill_null(0).alias("std"), pl.len().alias("count"))
    return stats.with_columns((pl.col("mean") - pl.col("std")).alias("low"),
                              (pl.col("mean") + pl.col("std")).alias("high"))


def accuracy_chart(results: pl.DataFrame, rule: str) -> alt.FacetChart:
    """Top-1 against n for every task (mean ± std over replicates); direct training as a rule."""
    stats = _mean_std(results.filter(pl.col("method") != "direct"), rule, ["task", "n"])
    base = alt.Chart().encode(x=alt.X("n:O", title="n models (same budget)"))
    layers = [base.mark_line(point=True).encode(y=alt.Y("mean:Q", title="top-1 (%)",
                                                        scale=alt.Scale(zero=False)),
                                                tooltip=["task", "n", "mean", "std", "count"]),
              base.mark_errorbar().encode(y=alt.Y("low:Q", title="top-1 (%)"), y2="high:Q")]
    direct = _mean_std(results.filter(pl.col("method") == "direct"), rule, ["task"])
    data = stats.with_columns(pl.lit("catN").alias("kind"))
    if direct.height:
        layers.append(alt.Chart().mark_rule(strokeDash=[4, 3], color="grey").encode(
            y=alt.Y("direct:Q", title="top-1 (%)")))
        data = data.join(direct.select("task", pl.col("mean").alias("direct")), on="task",
                         how="left")
    return alt.layer(*layers, data=data).properties(width=150, height=160).facet(
        column=alt.Column("task:N", title=None)).resolve_scale(y="independent")


def role_chart(results: pl.DataFrame, rule: str) -> alt.LayerChart:
    """In distribution vs in the mixture vs unseen: mean over the tasks of each role."""
    per_task = results.filter((pl.col("rule") == rule) & (pl.col("method") != "direct"))
    per_role = per_task.group_by("role", "n", "replicate").agg(pl.col("top1").mean())
    stats = _mean_std(per_role.with_columns(pl.lit(rule).alias("rule")), rule, ["role", "n"])
    title = "mean top-1 over the role's tasks (%)"
    base = alt.Chart(stats).encode(x=alt.X("n:O", title="models concatenated"),
                                   color=alt.Color("role:N", title="task role"))
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title=title, scale=alt.Scale(zero=False)),
        tooltip=["role", "n", "mean", "std"])
    bars = base.mark_errorbar().encode(y=alt.Y("low:Q", title=title), y2="high:Q")
    return (line + bars).properties(width=320, height=220)
