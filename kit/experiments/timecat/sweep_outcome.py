"""What notebook 04's sweep found, judged and shown: where each variant's models learn the
pretraining task, notebook 03's time-concat claim judged in every (world seed, budget) cell, the
statement over the budget (paper Section 5.1), and the views and summary the notebook prints.
`kit.experiments.timecat.sweep` measures; this module only reads what it measured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from kit.experiments.timecat import claims, comparisons, regime
from kit.experiments.timecat.cells import probe_cells
from kit.experiments.timecat.sweep_settings import Cell, SweepSettings
from kit.readout import numbers
from kit.readout.progress import Stage
from kit.stats import crossover, outcomes, rounds


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


#: what a cell's row says of its rounds: how many, the replicates, why it stopped
STOP_KEYS = ("rounds", "replicates", "stopped")


@dataclass(frozen=True)
class CellVerdicts:
    """Per cell: its claim's outcome (`cells`, one row each, the input of kit.stats.crossover),
    the claim's conditions as stored verdict rows (`verdicts`: catN against the baseline and each
    control on the primary endpoint, with their intervals), and its probe cells with their
    selection optimism and flags (`gaps`, kit.experiments.timecat.cells)."""

    cells: pl.DataFrame
    verdicts: pl.DataFrame
    gaps: pl.DataFrame


def judge_cells(
    results: pl.DataFrame,
    rule: str,
    baseline: str,
    max_optimism: float | None,
    smallest: float,
    stops: Mapping[tuple[int, int], rounds.Round] | None = None,
) -> CellVerdicts:
    """Notebook 03's time-concat claim (comparisons.summarize: the primary endpoint and its
    controls, three outcomes) in every cell of `results` (one per distinct world_seed and
    budget): the same computation as notebook 03's, so a cell both notebooks run has one set
    of numbers. `stops`, by (world seed, budget): each cell's last round, on whose replicates
    and repeated intervals it is judged, and whose rounds, replicates and reason for stopping
    its row carries."""
    claims, rows, gaps = [], [], []
    cells = results.select("world_seed", "budget").n_unique()
    stage = Stage(
        "verdicts",
        cells,
        "cell",
        f"judging {numbers.counted(cells, 'cell')}: the primary endpoint "
        "against the baseline and the controls, the probes' selection optimism per cell",
    )
    for (world, budget), mine in results.sort("world_seed", "budget").group_by(
        "world_seed", "budget", maintain_order=True
    ):
        stop = (stops or {}).get((world, budget))
        summary = comparisons.summarize(
            mine, rule, baseline, max_optimism, smallest, stops=[] if stop is None else [stop]
        )
        found = summary["claim"]
        claims.append(
            {
                "world_seed": world,
                "budget": budget,
                "variant": found["variant"],
                "status": found["status"],
                **({} if stop is None else {key: found[key] for key in STOP_KEYS}),
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
        gaps.append(probe_cells(mine, rule, max_optimism).with_columns(where))
        stage.advance()
    stage.finish(f"judged {numbers.counted(cells, 'cell')}")
    return CellVerdicts(
        pl.DataFrame(claims),
        pl.concat(rows, how="diagonal_relaxed"),
        pl.concat(gaps, how="diagonal_relaxed"),
    )


def overall(judged: CellVerdicts, baseline: str) -> crossover.BudgetClaim:
    """The sweep's statement (kit.stats.crossover) from the cells' outcomes."""
    return statement(judged.cells, baseline)


def statement(cells: pl.DataFrame, baseline: str) -> crossover.BudgetClaim:
    """The sweep's statement from one row per cell (`world_seed`, `budget`, `status`, the
    claimed `variant`, and the cell's `line`): the one sentence the notebook, the terminal, the
    report and the docs print, computed alike from a run or a recorded summary's cells."""
    variants = [v for v in cells["variant"].unique(maintain_order=True) if v]
    what = (
        f"{'/'.join(variants) or 'catN'} transfers better than {baseline} beyond the "
        "controls (paper Section 5.1)"
    )
    kept = [c for c in ("world_seed", "budget", "status", "line") if c in cells.columns]
    return crossover.budget_claim(cells.select(kept), what)


def what_ran(params: SweepSettings, cells: list[Cell], wall_s: float, machine: str) -> str:
    """The sweep's what-ran line: world seeds, budgets, model, replicates, machine, wall time."""
    first = cells[0].settings
    train = first.train
    model = claims.model_words(train) if train is not None else "no model"
    worlds = sorted({c.world_seed for c in cells})
    budgets = sorted({c.budget for c in cells})
    return (
        f"What ran: profile {params.profile}; the kit's synthetic world, "
        f"{_counted('seed', worlds)}; {model}; {_counted('budget', budgets)} iterations "
        f"({numbers.counted(len(cells), 'cell')}); {claims.design_words(first)} per cell; "
        f"{first.probe_kind} probe, rule {first.probe_rule}; {machine}; "
        f"{wall_s / 60:.1f} min of wall time"
    )


def _counted(noun: str, values: list[int]) -> str:
    """`seed 0`, `seeds 0, 1 and 2`, `budgets 60 and 1,920`."""
    shown = [f"{v:,}" for v in values]
    if len(shown) == 1:
        return f"{noun} {shown[0]}"
    return f"{noun}s {', '.join(shown[:-1])} and {shown[-1]}"


def not_swept(what: str) -> str:
    """The sentence a view gives, in place of its table or chart, for a profile that sweeps no
    budget."""
    return f"This profile sweeps no budget: {what}."


def repeats_notebook_03(cells: list[Cell]) -> bool:
    """Whether the sweep is notebook 03's own cell alone (its runs, its table beside the
    paper): notebook 04 then neither shows nor writes that table again."""
    return len(cells) == 1 and cells[0].shared


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
    #: where the wall budget left cells undecided, the command that decides them
    #: (kit.stats.rounds.to_decide)
    to_decide: str | None = None

    def runs_line(self) -> str:
        """How many runs were skipped (finished before) and trained."""
        return f"skipped {numbers.counted(self.skipped, 'finished run')}, trained {self.trained}"

    def learned_table(self) -> pl.DataFrame | str:
        """Per world seed and variant, the smallest budget where its models learn the
        pretraining task (`learned_budgets`)."""
        return self.learned if self.cells else not_swept("no model trained")

    def gaps_line(self) -> str:
        """How many probe cells (variant, task, cell) are flagged: a selection optimism above
        notebook 03's `max_probe_optimism` (kit.experiments.timecat.cells)."""
        gaps = self.judged.gaps
        if not self.cells:
            return "0 probe cells judged"
        flagged = gaps.filter(pl.col("flagged")).height
        limit = self.cells[0].settings.max_probe_optimism
        return f"{flagged} of {gaps.height} probe cells flagged " + (
            "(no max_probe_optimism set)"
            if limit is None
            else f"(held-out rows above the evaluation split by more than {limit:g} points)"
        )

    def gaps_table(self) -> pl.DataFrame | str:
        """The flagged probe cells, or when none is flagged the five with the largest selection
        optimism."""
        if not self.cells:
            return not_swept("no probe to judge")
        gaps = self.judged.gaps
        flagged = gaps.filter(pl.col("flagged"))
        return flagged if flagged.height else gaps.sort("optimism", nulls_last=False).tail(5)

    def one_budget(self) -> int | None:
        """The sweep's total budget when it has only one (so no gain against the budget)."""
        budgets = {cell.budget for cell in self.cells}
        return budgets.pop() if len(budgets) == 1 else None

    def paper_table(self) -> pl.DataFrame | str:
        """The paper's Table 3 and the sweep row for row, per budget (paper.paper_vs_kit); a
        sentence where the sweep is notebook 03's one cell (its runs, its table)."""
        if not self.cells:
            return not_swept("no row to set beside the paper's")
        if repeats_notebook_03(self.cells):
            return (
                f"This run swept one cell, notebook 03's own runs at {self.cells[0].budget:,} "
                "iterations: its rows beside the paper are notebook 03's table."
            )
        return self.vs_paper

    def regime_table(self) -> pl.DataFrame | str:
        """The paper's rows beside the sweep's time-concat rows, each with its regime against
        the budget where cat1 saturates in its world, where that is located
        (regime.paper_beside_kit); a sentence where the sweep is notebook 03's one cell (its
        rows, and no saturation to locate)."""
        if not self.cells:
            return not_swept("no regime measured")
        if repeats_notebook_03(self.cells):
            return (
                "Its time-concat rows are notebook 03's, and one budget cannot locate where cat1 "
                "saturates, so no regime is measured: a smaller second budget locates it (the cpu "
                "profile sweeps 60 and 240 iterations)."
            )
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
        "next": swept.to_decide,
        "cells": swept.judged.cells.to_dicts(),
        "verdicts": swept.judged.verdicts.to_dicts(),
        "learned": swept.learned.to_dicts(),
        "flagged_cells": swept.judged.gaps.filter(pl.col("flagged")).height,
    }


def summary_lines(summary: dict) -> list[str]:
    """The summary in words: the statement over the budget, what ran, and each cell's claim
    line."""
    claim = summary["claim"]
    following = summary.get("next")
    return [
        claim["line"],
        claim.get("ran", ""),
        *([f"to decide: {following}"] if following else []),
        "",
        *(
            f"world {cell['world_seed']}, budget {cell['budget']}: {cell['line']}"
            for cell in summary["cells"]
        ),
    ]
