"""Notebook 04's sweep: notebook 03's experiment at every (world seed, budget) cell, trained in
one launch, probed cell by cell, and judged per cell and over the budget (paper Section 5).

Each cell's probe results are kept in <output_dir>/<run_root>/results/, named by the hash of the
cell's settings, so a second run of the notebook probes only what is new; runs are skipped once
finished (notebook 03's own, for the cell that has its settings).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from kit.core import files
from kit.core.paths import resolve, shown
from kit.core.progress import Stage
from kit.experiments.timecat import (
    claims,
    comparisons,
    jobs,
    measure,
    paper,
    planning,
    regime,
)
from kit.experiments.timecat.sweep_settings import (
    SWEPT_NOTEBOOK,
    Cell,
    SweepSettings,
    swept_notebook,
)
from kit.report import crossover, outcomes, outputs
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
    their seeded runs, and with a width-matched model of cat1's compute its runs too)."""
    plans = {(cell.world_seed, cell.budget): planning.plan(cell.settings) for cell in cells}
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
        f"{len(cells)} cell(s): ",
    )
    planning.initialise(merged.initial)
    return len(skipped), len(merged.trainings) - len(skipped)


#: seconds on 2 cores of a fresh sweep's units of work, measured by benchmarks/sweep_cost.py on
#: world 0 at budgets 60 and 120 (docs: Benchmarks, "The budget sweep"), with other jobs
#: sharing the cores (load average 3): an iteration of cat1's compute (the runs of one launch
#: side by side), one checkpoint's features on one task (its probe rows and evaluation split),
#: one L-BFGS probe of a representation on a task
SECONDS_PER = {"iteration": 29 / 990, "extraction": 214 / 144, "probe": 143 / 72}
#: the conditions SECONDS_PER was measured in, for the estimate's line
MEASURED_ON = "2 cores shared with other jobs (load average 3)"


@dataclass(frozen=True)
class SweepCost:
    """A fresh sweep's work: iterations of cat1's compute (an iteration of a model `w` times
    wider weighs w², a ResNet's multiply-adds), checkpoints whose features are extracted on
    one task (each file once, whatever cells read it), and probes (representations x tasks)."""

    iterations: float
    extractions: int
    probes: int

    def seconds(self, per: dict[str, float]) -> dict[str, float]:
        """The wall time of each kind of work at `per` (seconds per unit, SECONDS_PER)."""
        return {
            "training": self.iterations * per["iteration"],
            "extraction": self.extractions * per["extraction"],
            "probes": self.probes * per["probe"],
        }


def cost(cells: list[Cell]) -> SweepCost:
    """The work of `cells` run from scratch (nothing finished, nothing reused from notebook 03):
    the merged plan's training (sweep.plan_cells), each distinct checkpoint file's features
    on each task, and every cell's probes."""
    merged = plan_cells(cells)
    width = cells[0].settings.train.width if cells and cells[0].settings.train else 1.0
    files, probes = set(), 0
    for cell in cells:
        for rep in merged.representations[cell.world_seed, cell.budget]:
            tasks = [t.name for t in cell.settings.tasks if rep.task in (None, t.name)]
            files |= {(path, task) for path in rep.checkpoints for task in tasks}
            probes += len(tasks)
    return SweepCost(
        sum(run.iterations * (run.width / width) ** 2 for run in merged.trainings),
        len(files),
        probes,
    )


def cost_line(found: SweepCost, per: dict[str, float] = SECONDS_PER) -> str:
    """The sweep's work and its expected wall time (minutes) at `per`, in one line."""
    times = found.seconds(per)
    return (
        f"{found.iterations:,.0f} iterations of cat1's compute, {found.extractions:,} "
        f"checkpoint extractions (checkpoint x task), {found.probes:,} probes: about "
        + ", ".join(f"{kind} {seconds / 60:.0f}" for kind, seconds in times.items())
        + f", in all {sum(times.values()) / 60:.0f} minutes at the rates measured on "
        + MEASURED_ON
    )


def _cell_file(params: SweepSettings, cell: Cell) -> Path:
    digest = hashlib.sha256(cell.settings.model_dump_json().encode()).hexdigest()[:16]
    return (
        sweep_dir(params)
        / "results"
        / f"world{cell.world_seed}-budget{cell.budget}-{digest}.parquet"
    )


def notebook03_results(params: SweepSettings, cell: Cell) -> pl.DataFrame | None:
    """Notebook 03's own probe results for the variants its cell shares with it (same name and
    settings), when `kit run` recorded that notebook 03 ran with exactly these parameters (its
    executed parameters file in the same output folder) and the cell's other settings are
    notebook 03's (a refit check, `lbfgs_check`, changes no result); else None."""
    recorded = resolve(params.output_dir) / f"{SWEPT_NOTEBOOK}.parameters.yaml"
    found = resolve(params.output_dir) / jobs.RESULTS
    if not (cell.shared and recorded.exists() and found.exists()):
        return None
    notebook = swept_notebook(params)
    if (
        yaml.safe_load(recorded.read_text()) != notebook.model_dump()
        or cell.settings.model_copy(
            update={
                "variants": notebook.variants,
                "replicates": notebook.replicates,
                "total_iterations": notebook.total_iterations,
                "lbfgs_check": notebook.lbfgs_check,
            }
        )
        != notebook
    ):
        return None
    same = [v.name for v in cell.settings.variants if v in notebook.variants]
    return outputs.read_parquet(found).filter(
        pl.col("variant").is_in(same) & (pl.col("replicate") < cell.settings.replicates)
    )


def _probe_cell(
    params: SweepSettings, cell: Cell, representations: list[planning.Representation]
) -> tuple[pl.DataFrame, bool]:
    """A cell's probe results: notebook 03's where they apply, the other variants probed; and
    whether notebook 03's were reused."""
    reused = notebook03_results(params, cell)
    done = set() if reused is None else set(reused["variant"])
    pending = [rep for rep in representations if rep.variant not in done]
    frames = [] if reused is None else [reused]
    if pending:
        frames.append(measure.probe_all(pending, cell.settings, diagnose=False).results)
    return (
        pl.concat(frames, how="diagonal_relaxed").with_columns(cell_columns(cell)),
        reused is not None,
    )


def probe_cells(params: SweepSettings, cells: list[Cell]) -> pl.DataFrame:
    """Every cell's probe results (notebook 03's table with `world_seed` and `budget`), read
    from the cell's results file when these settings were probed before, else probed now
    (reusing notebook 03's own results where they apply, `notebook03_results`)."""
    stored = sum(_cell_file(params, cell).exists() for cell in cells)
    stage = Stage(
        "cells",
        len(cells),
        "cell",
        f"{len(cells)} cell(s): {stored} probed before "
        f"(read back from {shown(sweep_dir(params) / 'results')}), probing "
        f"{len(cells) - stored}",
    )
    frames, reused = [], 0
    merged = plan_cells(cells)
    for cell in cells:
        path = _cell_file(params, cell)
        if not path.exists():
            measured, from03 = _probe_cell(
                params, cell, merged.representations[cell.world_seed, cell.budget]
            )
            reused += from03
            path.parent.mkdir(parents=True, exist_ok=True)
            with files.atomic_write(path) as handle:
                measured.write_parquet(handle)
        frames.append(outputs.read_parquet(path))
        stage.advance()
    stage.finish(
        f"read back {stored}, probed {len(cells) - stored} cell(s) ({reused} of them "
        "with notebook 03's probe results for the variants it shares)"
    )
    return pl.concat(frames, how="diagonal_relaxed")


def own_accuracy(cells: list[Cell]) -> pl.DataFrame:
    """Each trained model's own in-distribution accuracy: its head's top-1 on the pretraining
    data's evaluation split at the step the cell reads (metrics.jsonl: a run's last step, or a
    snapshot's, evaluated where it is written), per cell, variant and replicate."""
    rows = []
    merged = plan_cells(cells)
    for cell in cells:
        for rep in merged.representations[cell.world_seed, cell.budget]:
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


def cells_table(cells: list[Cell]) -> pl.DataFrame | str:
    """The sweep's cells as a reader sees them: world seed, total budget, each trained variant's
    iterations per model in words, replicates, whether notebook 03's runs are reused, the run
    folder; a sentence when the profile sweeps no budget."""
    if not cells:
        return not_swept("no cell to run")
    return pl.DataFrame(
        [
            {
                "world seed": cell.world_seed,
                "total budget (iterations)": cell.budget,
                "iterations per model": ", ".join(
                    f"{v.name} {cell.settings.iterations_for(v)}"
                    for v in cell.settings.variants
                    if v.trained
                ),
                "replicates": cell.settings.replicates,
                "notebook 03's runs": "reused" if cell.shared else "its own",
                "run folder": cell.settings.run_root,
            }
            for cell in cells
        ]
    )


def learned_budgets(own: pl.DataFrame, baseline: str, share: float) -> pl.DataFrame:
    """Per world seed and variant, the smallest budget at which its models' mean own accuracy
    reaches `share` of the baseline's best over the sweep in that world (null: never in
    range), that reference, and whether the budget is `located` (above the smallest budget
    swept: reached there, it is only an upper bound). For the baseline this is where it
    saturates."""
    means = own.group_by("world_seed", "budget", "variant", "n").agg(
        pl.col("own_accuracy").mean(), pl.col("iterations_per_model").first()
    )
    best = (
        means.filter(pl.col("variant") == baseline)
        .group_by("world_seed")
        .agg(pl.col("own_accuracy").max().alias("baseline_best"))
    )
    reached = means.join(best, on="world_seed").with_columns(
        (pl.col("own_accuracy") >= share * pl.col("baseline_best")).alias("reached")
    )
    return (
        reached.group_by("world_seed", "variant", "n")
        .agg(
            pl.col("budget").filter(pl.col("reached")).min().alias("learned_at"),
            pl.col("budget").min().alias("smallest"),
            pl.col("baseline_best").first(),
        )
        .with_columns((pl.col("learned_at") > pl.col("smallest")).fill_null(False).alias("located"))
        .drop("smallest")
        .sort("world_seed", "n", "variant")
    )


@dataclass(frozen=True)
class CellVerdicts:
    """Per cell: its claim's outcome (`cells`, one row each, the input of kit.report.crossover),
    the claim's conditions as stored verdict rows (`verdicts`: catN against the baseline and each
    control on the primary endpoint, with their intervals), and its probes' train/eval gaps
    (`gaps`)."""

    cells: pl.DataFrame
    verdicts: pl.DataFrame
    gaps: pl.DataFrame


def judge_cells(
    results: pl.DataFrame, rule: str, baseline: str, max_gap: float | None, smallest: float
) -> CellVerdicts:
    """Notebook 03's time-concat claim (comparisons.summarize: the primary endpoint and its
    controls, three outcomes) in every cell of `results` (one per distinct world_seed and
    budget): the same computation as notebook 03's, so a cell both notebooks run has one set
    of numbers."""
    claims, rows, gaps = [], [], []
    cells = results.select("world_seed", "budget").n_unique()
    stage = Stage(
        "verdicts",
        cells,
        "cell",
        f"judging {cells} cell(s): the primary endpoint "
        "against the baseline and the controls, probe gaps per cell",
    )
    for (world, budget), mine in results.sort("world_seed", "budget").group_by(
        "world_seed", "budget", maintain_order=True
    ):
        summary = comparisons.summarize(mine, rule, baseline, max_gap, smallest)
        found = summary["claim"]
        claims.append(
            {
                "world_seed": world,
                "budget": budget,
                "variant": found["variant"],
                "status": found["status"],
                "flagged_cells": len(found["flagged_cells"]),
                "line": found["line"],
            }
        )
        where = [pl.lit(world).alias("world_seed"), pl.lit(budget).alias("budget")]
        rows.append(
            comparisons.verdict_table(summary)
            .filter(pl.col("claim") == found["claim"])
            .with_columns(where)
        )
        gaps.append(comparisons.probe_gaps(mine, rule, max_gap).with_columns(where))
        stage.advance()
    stage.finish(f"judged {cells} cell(s)")
    return CellVerdicts(
        pl.DataFrame(claims),
        pl.concat(rows, how="diagonal_relaxed"),
        pl.concat(gaps, how="diagonal_relaxed"),
    )


def overall(judged: CellVerdicts, baseline: str) -> crossover.BudgetClaim:
    """The sweep's statement (kit.report.crossover) from the cells' outcomes."""
    variants = [v for v in judged.cells["variant"].unique(maintain_order=True) if v]
    what = (
        f"{'/'.join(variants) or 'catN'} transfers better than {baseline} beyond the "
        "controls (paper Section 5)"
    )
    return crossover.budget_claim(
        judged.cells.select("world_seed", "budget", "status", "line"), what
    )


def what_ran(params: SweepSettings, cells: list[Cell], wall_s: float, machine: str) -> str:
    """The sweep's what-ran line: world seeds, budgets, model, replicates, machine, wall time."""
    first = cells[0].settings
    train = first.train
    model = claims.model_words(train) if train is not None else "no model"
    worlds = sorted({c.world_seed for c in cells})
    budgets = sorted({c.budget for c in cells})
    return (
        f"What ran: profile {params.profile}; the kit's synthetic world, seeds "
        f"{', '.join(map(str, worlds))}; {model}; budgets {', '.join(map(str, budgets))} "
        f"iterations; {first.replicates} replicates per cell; {first.probe_kind} probe, rule "
        f"{first.probe_rule}; {machine}; {wall_s / 60:.1f} min of wall time"
    )


def not_swept(what: str) -> str:
    """The sentence a view gives, in place of its table or chart, for a profile that sweeps no
    budget."""
    return f"This profile sweeps no budget: {what}."


#: the files `run` writes into the output folder (the docs' page "The budget sweep" names them)
RESULTS = "sweep_results.parquet"
OWN_ACCURACY = "sweep_own_accuracy.parquet"
VERDICTS = "sweep_verdicts.parquet"
VS_PAPER = "sweep_vs_paper.parquet"


@dataclass(frozen=True)
class Swept:
    """What notebook 04 measured: the cells, the runs skipped and trained, every cell's probe
    results, where each variant's models learn the pretraining task (`learned_budgets`), the
    cells' verdicts and probe gaps, and the sweep beside the paper's Table 3. A profile that
    sweeps no budget has no cells and empty frames, and each view then gives one sentence
    saying so instead of a table, so that the notebook reads the same for every profile."""

    params: SweepSettings
    cells: list[Cell]
    skipped: int
    trained: int
    results: pl.DataFrame
    learned: pl.DataFrame
    judged: CellVerdicts
    vs_paper: pl.DataFrame

    def runs_line(self) -> str:
        """How many runs were skipped (finished before) and trained."""
        return f"skipped {self.skipped} finished run(s), trained {self.trained}"

    def learned_table(self) -> pl.DataFrame | str:
        """Per world seed and variant, the smallest budget where its models learn the
        pretraining task (`learned_budgets`)."""
        return self.learned if self.cells else not_swept("no model trained")

    def gaps_line(self) -> str:
        """How many probe cells (variant, task, cell) are flagged: a train/eval gap above
        notebook 03's `max_probe_gap`."""
        gaps = self.judged.gaps
        if not self.cells:
            return "0 probe cells judged"
        flagged = gaps.filter(pl.col("flagged")).height
        limit = self.cells[0].settings.max_probe_gap
        return f"{flagged} of {gaps.height} probe cells flagged " + (
            "(no max_probe_gap set)" if limit is None else f"(gap above {limit} points)"
        )

    def gaps_table(self) -> pl.DataFrame | str:
        """The flagged probe cells, or when none is flagged the five largest gaps."""
        if not self.cells:
            return not_swept("no probe to judge")
        gaps = self.judged.gaps
        flagged = gaps.filter(pl.col("flagged"))
        return flagged if flagged.height else gaps.sort("gap").tail(5)

    def paper_table(self) -> pl.DataFrame | str:
        """The paper's Table 3 and the sweep row for row, per budget (paper.paper_vs_kit)."""
        return self.vs_paper if self.cells else not_swept("no row to set beside the paper's")

    def regime_table(self) -> pl.DataFrame | str:
        """The paper's rows beside the sweep's time-concat rows, each with its regime against
        the budget where cat1 saturates in its world, where that is located
        (regime.paper_beside_kit)."""
        if not self.cells:
            return not_swept("no regime measured")
        first = self.cells[0].settings
        saturated = {
            row["world_seed"]: row["learned_at"]
            for row in self.learned.filter(
                (pl.col("variant") == first.baseline) & pl.col("located")
            ).iter_rows(named=True)
        }
        return regime.paper_beside_kit(
            self.results, first.probe_rule, saturated, f"kit, profile {self.params.profile}"
        )

    def verdicts_table(self) -> pl.DataFrame | str:
        """Every cell's conditions of the time-concat claim, as notebook 03 shows its own
        (outcomes.view)."""
        if not self.cells:
            return not_swept("no claim judged")
        return outcomes.view(self.judged.verdicts)


def _write(frame: pl.DataFrame, path: Path) -> None:
    with files.atomic_write(path) as handle:
        frame.write_parquet(handle)


def run(params: SweepSettings, cells: list[Cell], out: Path) -> Swept:
    """Notebook 04's measurement: train every unfinished run of `cells` in one launch
    (`train_all`), probe every cell (`probe_cells`), read each model's own accuracy and where
    each variant learns the task (`learned_budgets`), judge every cell (`judge_cells`), set the
    sweep beside the paper's Table 3, and write the results, own accuracies, verdicts and that
    table into `out`. No cells (a profile that sweeps no budget): nothing is trained, probed or
    written, and the result has empty frames."""
    if not cells:
        empty = pl.DataFrame()
        return Swept(params, [], 0, 0, empty, empty, CellVerdicts(empty, empty, empty), empty)
    first = cells[0].settings
    skipped, trained = train_all(params, cells)
    results = probe_cells(params, cells)
    own = own_accuracy(cells)
    judged = judge_cells(
        results, first.probe_rule, first.baseline, first.max_probe_gap, first.smallest_effect
    )
    vs_paper = paper.paper_vs_kit(results, first.probe_rule, by=["budget"])
    for frame, name in (
        (results, RESULTS),
        (own, OWN_ACCURACY),
        (judged.verdicts, VERDICTS),
        (vs_paper, VS_PAPER),
    ):
        _write(frame, out / name)
    return Swept(
        params,
        cells,
        skipped,
        trained,
        results,
        learned_budgets(own, first.baseline, params.saturation),
        judged,
        vs_paper,
    )


def summary(swept: Swept, wall_s: float, machine: str) -> dict:
    """What notebook 04 writes to its summary JSON; "claim" has notebook 03's shape (status,
    line, what ran) plus the crossover interval per world seed and the cells it rests on;
    "verdicts" is the stored verdict table's rows. A profile that sweeps no budget states the
    claim untested."""
    params = swept.params
    if not swept.cells:
        line = (
            f"Over the budget sweep: untested (profile {params.profile} sweeps no budget; "
            "see notebook 04 for why)"
        )
        return {"claim": {"status": "untested", "line": line}, "budgets": [], "cells": []}
    found = overall(swept.judged, swept.cells[0].settings.baseline)
    return {
        "claim": {
            "status": found.status,
            "line": found.line,
            "ran": what_ran(params, swept.cells, wall_s, machine),
            "patterns": {str(k): v for k, v in found.patterns.items()},
            "crossovers": {str(k): list(v) if v else None for k, v in found.crossovers.items()},
            "evidence": found.evidence,
        },
        "budgets": params.budgets,
        "cells": swept.judged.cells.to_dicts(),
        "verdicts": swept.judged.verdicts.to_dicts(),
        "learned": swept.learned.to_dicts(),
        "flagged_cells": swept.judged.gaps.filter(pl.col("flagged")).height,
    }


def summary_lines(summary: dict) -> list[str]:
    """The summary in words: the statement over the budget, what ran, and each cell's claim
    line."""
    claim = summary["claim"]
    return [
        claim["line"],
        claim.get("ran", ""),
        "",
        *(
            f"world {cell['world_seed']}, budget {cell['budget']}: {cell['line']}"
            for cell in summary["cells"]
        ),
    ]
