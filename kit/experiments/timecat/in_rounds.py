"""Notebook 03's training and probing in rounds of replicates (docs: Replicates in rounds): each
round trains its replicates' runs (finished ones are skipped), writes their untrained networks,
probes their representations, and then judges every claim (`claims.judge_round`); the next
round comes while a claim is undecided, up to `rounds.most` and `rounds.wall_s`. A fixed design
(no `rounds`) is one round of `replicates`. A replicate's seeds depend on its index alone
(`TimecatSettings.seeds`), so a resumed run trains nothing it finished and makes the same
looks; only the probes of its finished replicates are fitted again, from cached features."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import polars as pl

from kit.experiments.timecat import claims, jobs, measure, planning
from kit.experiments.timecat.settings import TimecatSettings
from kit.launch.runs import is_finished
from kit.readout import numbers
from kit.stats import rounds
from kit.stats.sequential import Rounds

#: notebook 03's one cell, as the rounds name it
CELL = "03"


@dataclass
class Measured:
    """What the rounds trained and measured: the plan of the last look (every run, for the run
    table and the training curves), how many were reused, trained and written untrained, the probe
    results and diagnostics of every replicate, and the cell's rounds."""

    params: TimecatSettings
    plan: planning.Plan = field(default_factory=lambda: planning.Plan([], [], [], {}))
    skipped: int = 0
    trained: int = 0
    written: int = 0
    results: pl.DataFrame = field(default_factory=pl.DataFrame)
    diagnostics: pl.DataFrame = field(default_factory=pl.DataFrame)
    cell: rounds.CellRounds = field(default_factory=rounds.CellRounds)
    design: Rounds = field(default_factory=lambda: Rounds.fixed(1))

    def runs_line(self) -> str:
        """How many runs were reused, trained and written untrained, in one line."""
        return (
            f"skipped {numbers.counted(self.skipped, 'finished run')}; trained {self.trained}; "
            f"wrote {numbers.counted(self.written, 'untrained network')}"
        )

    def rounds_line(self) -> str:
        """How many rounds and replicates each claim took and why it stopped, in one line."""
        return "; ".join(
            f"{found.claim}: {found.status}{found.how()}" for found in self.cell.claims.values()
        )

    def to_decide(self, command: str) -> str | None:
        """Where the wall budget or the first round stopped a claim undecided, or a flagged
        probe cell left it so: what would decide it (`rounds.to_decide`)."""
        return rounds.to_decide({CELL: self.cell}, self.design, command)

    def stops(self) -> list[rounds.Round]:
        """Each claim's last round, for comparisons.summarize."""
        return list(self.cell.claims.values())


def _train(look: TimecatSettings, span: range, wait: bool, found: Measured) -> planning.Plan:
    """Train the runs of the replicates `span` of `look` and write their untrained networks;
    raises while runs or an extraction job are still going on a cluster."""
    experiment = planning.plan(look, span.start)
    skipped = planning.launch(experiment.trainings, look, wait)
    if unfinished := sum(not is_finished(t) for t in experiment.trainings):
        raise RuntimeError(
            f"still training on the cluster: {numbers.counted(unfinished, 'run')}; run this "
            "notebook again once they finish to probe them"
        )
    found.skipped += len(skipped)
    found.trained += len(experiment.trainings) - len(skipped)
    found.written += planning.initialise(experiment.initial)
    if look.extraction == "job" and not jobs.launch_extraction(look, wait=wait):
        raise RuntimeError(
            "feature extraction is still running on the cluster; run this notebook again "
            "once it finishes to probe"
        )
    return experiment


def run(
    params: TimecatSettings, wait: bool = True, clock: Callable[[], float] = time.monotonic
) -> Measured:
    """Notebook 03's replicates in rounds (see the module docstring); `wait=False` (a Slurm
    launch) raises once runs are submitted, and a later run collects them."""
    found = Measured(params, design=params.design)
    results: list[pl.DataFrame] = []
    diagnostics: list[pl.DataFrame] = []

    def step(pending: Mapping[str, range]) -> bool:
        span = pending[CELL]
        before = found.trained
        look = params.look(span.stop)
        experiment = _train(look, span, wait, found)
        measured = measure.probe_all(experiment.representations, look)
        results.append(measured.results)
        diagnostics.append(measured.diagnostics)
        found.params = look
        return found.trained > before

    def judge(_cell: str, counts: tuple[int, ...], halt: str | None) -> list[rounds.Round]:
        return claims.judge_round(pl.concat(results), params, counts, halt)

    wall_s = None if params.rounds is None else params.rounds.wall_s
    found.cell = rounds.run_rounds([CELL], params.design, wall_s, step, judge, clock)[CELL]
    found.plan = planning.plan(found.params)
    found.results, found.diagnostics = pl.concat(results), pl.concat(diagnostics)
    return found
