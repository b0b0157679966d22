"""Notebook 04's sweep: notebook 03's experiment at every (world seed, budget) cell, trained in
one launch and probed cell by cell; `kit.experiments.timecat.sweep_outcome` judges the cells and the
budget (paper Section 5.1) and holds the views notebook 04 prints.

Each cell's probe results are kept in <output_dir>/<run_root>/results/, named by the hash of the
cell's settings, so a second run of the notebook probes only what is new; runs are skipped once
finished (notebook 03's own, for the cell that has its settings). The plan and its cost import
no torch (`kit check 04` says them before anything runs); probing imports it where it probes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from kit.experiments.timecat import claims, paper, planning, sharing, sweep_outcome
from kit.experiments.timecat.result_files import SWEEP, TIME_CONCAT
from kit.experiments.timecat.sweep_settings import (
    SWEPT_NOTEBOOK,
    Cell,
    SweepSettings,
    swept_notebook,
)
from kit.files import files
from kit.files.paths import resolve, shown
from kit.readout.numbers import counted
from kit.readout.progress import Stage
from kit.report import outputs
from kit.stats import rounds
from kit.train import metrics
from kit.train.settings import TrainSettings


def sweep_dir(params: SweepSettings) -> Path:
    """Where the sweep's own runs, logs and per-cell results go."""
    return resolve(params.output_dir) / params.run_root


def cell_columns(cell: Cell) -> list[pl.Expr]:
    return [pl.lit(cell.world_seed).alias("world_seed"), pl.lit(cell.budget).alias("budget")]


@dataclass(frozen=True)
class SweepPlan:
    """The cells' plans merged: every run folder trained once (`planning.merge_runs`: to the
    longest step any cell reads from it, with the union of their snapshots), the untrained
    networks, and each cell's representations as read from those runs, by (world seed,
    budget)."""

    trainings: list[TrainSettings]
    initial: list[TrainSettings]
    representations: dict[tuple[int, int], list[planning.Representation]]


def plan_cells(cells: list[Cell]) -> SweepPlan:
    """The merged plan of `cells` (under `catn_models: snapshots` the cells of a world share
    their seeded runs, and with a width-matched model of cat1's compute its runs too; under
    notebook 03's design a run of the same settings as notebook 03's, or as another cell's, is
    trained once, in notebook 03's folder where it is one of its runs: `sharing.share_runs`)."""
    ordered = sorted(cells, key=lambda cell: not cell.shared)  # notebook 03's own cell first
    notebook = [
        planning.plan(
            cell.notebook.look(max(c.settings.replicates for c in cells)),
            min(c.start for c in cells),
        )
        for cell in cells[:1]
        if cell.notebook is not None
    ]
    found = sharing.share_runs(
        notebook + [planning.plan(cell.settings, cell.start) for cell in ordered]
    )[len(notebook) :]
    plans = dict(zip([cell.key for cell in ordered], found, strict=True))
    trainings = planning.merge_runs([t for found in plans.values() for t in found.trainings])
    initial = {t.output_dir: t for found in plans.values() for t in found.initial}
    return SweepPlan(
        trainings,
        list(initial.values()),
        {
            key: [planning.read_from(rep, trainings) for rep in found.representations]
            for key, found in plans.items()
        },
    )


def train_all(params: SweepSettings, cells: list[Cell], wait: bool = True) -> tuple[int, int]:
    """Train every unfinished run of every cell in one launch, each run folder once to the
    longest step any cell reads (finished ones, notebook 03's included, are skipped; a folder
    holding other settings is refused first) and write the untrained networks; returns (runs
    skipped, runs trained)."""
    merged = plan_cells(cells)
    skipped = planning.launch_for(
        merged.trainings,
        [cell.settings for cell in cells],
        sweep_dir(params),
        wait,
        f"{counted(len(cells), 'cell')}: ",
    )
    planning.initialise(merged.initial)
    return len(skipped), len(merged.trainings) - len(skipped)


def _cell_file(params: SweepSettings, cell: Cell) -> Path:
    """A cell's probe results at its look: by its settings, and the replicates the look adds.
    The plan of rounds is left out of the key (the look's replicates are in the settings): a
    run that goes on with another wall budget or spending reads back the cells probed before."""
    settings = cell.settings.model_dump_json(exclude={"rounds"})
    digest = hashlib.sha256(settings.encode()).hexdigest()[:16]
    added = f"-from{cell.start}" if cell.start else ""
    return (
        sweep_dir(params)
        / "results"
        / f"world{cell.world_seed}-budget{cell.budget}-{digest}{added}.parquet"
    )


def notebook03_results(
    params: SweepSettings,
    cell: Cell,
    representations: list[planning.Representation] | None = None,
) -> pl.DataFrame | None:
    """Notebook 03's own probe results for the cell's `representations` (by default its plan's)
    that are notebook 03's (the same variant read from the same checkpoints: its own cell's, and
    under notebook 03's design those another cell shares with it, `share_runs`), when `kit run`
    recorded that notebook 03 ran with exactly these parameters (its executed parameters file in
    the same output folder) and the cell probes as notebook 03 does (`probes_as_notebook_03`);
    else None. Their `lbfgs_top1` is the cell's own: null where the cell's lbfgs_check is off,
    and a cell that fits the reference where notebook 03 did not is probed again, so that the
    column never depends on which notebook probed the cell."""
    recorded = resolve(params.output_dir) / f"{SWEPT_NOTEBOOK}.parameters.yaml"
    found = resolve(params.output_dir) / TIME_CONCAT.results
    if not (recorded.exists() and found.exists()):
        return None
    notebook = swept_notebook(params)
    if yaml.safe_load(recorded.read_text()) != notebook.model_dump() or not (
        sharing.probes_as_notebook_03(cell.settings, notebook)
    ):
        return None
    if cell.settings.lbfgs_check and not notebook.lbfgs_check:
        return None  # its table lacks the L-BFGS reference this cell fits: probed again
    if representations is None:
        representations = plan_cells([cell]).representations[cell.key]
    theirs = set(planning.plan(notebook.look(cell.settings.replicates), cell.start).representations)
    same = [(rep.variant, rep.replicate) for rep in representations if rep in theirs]
    keys = pl.DataFrame(same, schema={"variant": pl.String, "replicate": pl.Int64}, orient="row")
    table = outputs.read_parquet(found).join(keys, on=["variant", "replicate"], how="semi")
    if not table.height:
        return None  # none shared, or notebook 03 stopped its rounds before this look's
    # `lbfgs_top1` is the cell's own lbfgs_check's, whoever probed: never notebook 03's
    # reference in a cell that fits none
    return (
        table
        if cell.settings.lbfgs_check
        else table.with_columns(pl.lit(None, dtype=pl.Float64).alias("lbfgs_top1"))
    )


def _probe_cell(
    params: SweepSettings,
    cell: Cell,
    representations: list[planning.Representation],
    earlier: sharing.Probed,
) -> tuple[pl.DataFrame, bool, int]:
    """A cell's probe results: notebook 03's where they apply, those of an earlier cell that
    probed the same representation with the same settings (the untrained networks of a world,
    read by every cell of it), the other representations (variant and replicate) probed; and
    whether notebook 03's were reused, and how many representations an earlier cell's."""
    reused = notebook03_results(params, cell, representations)
    done = set() if reused is None else set(reused.select("variant", "replicate").iter_rows())
    left = [rep for rep in representations if (rep.variant, rep.replicate) not in done]
    probing = sharing.probing(cell.settings)
    shared = [earlier[probing, rep] for rep in left if (probing, rep) in earlier]
    pending = [rep for rep in left if (probing, rep) not in earlier]
    frames = ([] if reused is None else [reused]) + shared
    if pending:
        from kit.experiments.timecat import measure  # torch: only to probe (module docstring)

        frames.append(measure.probe_all(pending, cell.settings, diagnose=False).results)
    return (
        pl.concat(frames, how="diagonal_relaxed").with_columns(cell_columns(cell)),
        reused is not None,
        len(shared),
    )


def probe_cells(params: SweepSettings, cells: list[Cell]) -> pl.DataFrame:
    """Every cell's probe results (notebook 03's table with `world_seed` and `budget`), read
    from the cell's results file when these settings were probed before, else probed now
    (reusing notebook 03's own results where they apply, `notebook03_results`, and an earlier
    cell's where it probed the same representation, `_probe_cell`)."""
    stored = sum(_cell_file(params, cell).exists() for cell in cells)
    stage = Stage(
        "cells",
        len(cells),
        "cell",
        f"{counted(len(cells), 'cell')}: {stored} probed before "
        f"(read back from {shown(sweep_dir(params) / 'results')}), probing "
        f"{len(cells) - stored}",
    )
    frames, reused, shared = [], 0, 0
    merged = plan_cells(cells)
    earlier: sharing.Probed = {}
    for cell in cells:
        path = _cell_file(params, cell)
        representations = merged.representations[cell.key]
        if not path.exists():
            measured, from03, taken = _probe_cell(params, cell, representations, earlier)
            reused, shared = reused + from03, shared + taken
            path.parent.mkdir(parents=True, exist_ok=True)
            with files.atomic_write(path) as handle:
                measured.write_parquet(handle)
        frames.append(outputs.read_parquet(path))
        mine = frames[-1].drop("world_seed", "budget", strict=False)
        for rep in representations:
            earlier.setdefault(
                (sharing.probing(cell.settings), rep),
                mine.filter(
                    (pl.col("variant") == rep.variant) & (pl.col("replicate") == rep.replicate)
                ),
            )
        stage.advance()
    stage.finish(
        f"read back {stored}, probed {counted(len(cells) - stored, 'cell')} ({reused} of them "
        f"with notebook 03's probe results for the variants it shares; "
        f"{counted(shared, 'representation')} probed by an earlier cell)"
    )
    return pl.concat(frames, how="diagonal_relaxed")


def own_accuracy(cells: list[Cell]) -> pl.DataFrame:
    """Each trained model's own in-distribution accuracy: its head's top-1 on the pretraining
    data's evaluation split at the step the cell reads (metrics.jsonl: a run's last step, or a
    snapshot's, evaluated where it is written), per cell, variant and replicate."""
    rows = []
    merged = plan_cells(cells)
    for cell in cells:
        for rep in merged.representations[cell.key]:
            if rep.iterations_per_model is None or rep.task is not None:
                continue
            for checkpoint in rep.checkpoints:
                evaluated = metrics.read_metrics(checkpoint.parent).filter(
                    pl.col("eval_accuracy").is_not_null()
                    & (pl.col("step") == rep.iterations_per_model)
                )
                rows.append(
                    {
                        "world_seed": cell.world_seed,
                        "budget": cell.budget,
                        "variant": rep.variant,
                        "kind": rep.kind,
                        "n": rep.n,
                        "replicate": rep.replicate,
                        "iterations_per_model": rep.iterations_per_model,
                        "own_accuracy": 100 * float(evaluated["eval_accuracy"][-1]),
                    }
                )
    return pl.DataFrame(rows)


def _write(frame: pl.DataFrame, path: Path) -> None:
    with files.atomic_write(path) as handle:
        frame.write_parquet(handle)


def run(params: SweepSettings, cells: list[Cell], out: Path) -> sweep_outcome.Swept:
    """Notebook 04's measurement, in rounds of replicates (kit.stats.rounds; a fixed design is
    one round): every round trains the unfinished runs of the cells still going in one launch
    (`train_all`), probes them (`probe_cells`) and reads each model's own accuracy, then judges
    every such cell's time-concat claim; a decided cell takes no more replicates. Then where
    each variant learns the task (`sweep_outcome.learned_budgets`), every cell judged on the
    replicates of its last look (`sweep_outcome.judge_cells`), the sweep beside the paper's
    Table 3, and the results, own accuracies, verdicts and that table written into `out` (that
    table not where the sweep is notebook 03's own cell alone: it would repeat notebook 03's). No
    cells (a profile that sweeps no budget): nothing is trained, probed or written, and the
    result has empty frames."""
    if not cells:
        empty = pl.DataFrame()
        return sweep_outcome.Swept(
            params, [], 0, 0, empty, empty, sweep_outcome.CellVerdicts(empty, empty, empty), empty
        )
    first = cells[0].settings
    by_key = {cell.key: cell for cell in cells}
    counted, results, own = [0, 0], [], []

    def step(pending: Mapping[tuple[int, int], range]) -> bool:
        looks = [by_key[key].look(span) for key, span in pending.items()]
        skipped, trained = train_all(params, looks)
        counted[0], counted[1] = counted[0] + skipped, counted[1] + trained
        results.append(probe_cells(params, looks))
        own.append(own_accuracy(looks))
        return trained > 0

    def judge(
        key: tuple[int, int], counts: tuple[int, ...], halt: str | None
    ) -> list[rounds.Round]:
        mine = pl.concat(results, how="diagonal_relaxed").filter(
            (pl.col("world_seed") == key[0]) & (pl.col("budget") == key[1])
        )
        return claims.judge_round(mine, by_key[key].settings, counts, halt, [claims.TIME_CONCAT])

    wall_s = None if first.rounds is None else first.rounds.wall_s
    looked = rounds.run_rounds(list(by_key), first.design, wall_s, step, judge)
    measured = pl.concat(results, how="diagonal_relaxed")
    owned = pl.concat(own, how="diagonal_relaxed")
    judged = sweep_outcome.judge_cells(
        measured,
        first.probe_rule,
        first.baseline,
        first.max_probe_optimism,
        first.smallest_effect,
        {key: cell.claims[claims.TIME_CONCAT] for key, cell in looked.items()},
    )
    vs_paper = paper.paper_vs_kit(measured, first.probe_rule, by=["budget"])
    key = "rounds.wall_s" if params.rounds is not None else "overrides.rounds.wall_s"
    command = f"python -m kit run 04 --profile {params.profile}"
    for frame, name in (
        (measured, SWEEP.results),
        (owned, SWEEP.own_accuracy),
        (judged.verdicts, SWEEP.verdicts),
        (vs_paper, SWEEP.vs_paper),
    ):
        if name == SWEEP.vs_paper and sweep_outcome.repeats_notebook_03(cells):
            (out / name).unlink(missing_ok=True)  # notebook 03's table, not repeated
            continue
        _write(frame, out / name)
    return sweep_outcome.Swept(
        params,
        cells,
        counted[0],
        counted[1],
        measured,
        sweep_outcome.learned_budgets(owned, first.baseline, params.saturation),
        judged,
        vs_paper,
        rounds.to_decide(looked, first.design, command, key),
    )
