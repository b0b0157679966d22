"""What notebook 04's cells cost before anything runs: the work of their merged plan
(kit.experiments.timecat.sweep.plan_cells) and its wall time, with the share of it that is
notebook 03's own work (its runs, its checkpoints' features, its representations' probes),
which notebook 04 reuses when notebook 03 ran first.

The time is the work at some rates plus a notebook's fixed cost (its kernel, imports, plan,
judging, tables and charts). Where notebook 03 ran from scratch in the same output folder under
`kit run` (its stage records beside it), the rates are the ones it measured there minutes before,
on this machine and load (`measured_rates`): its training seconds per iteration of cat1's
compute, extraction seconds per checkpoint and task, probe seconds per probe, and its own time
outside those stages. Otherwise they are the ones `benchmarks/sweep_cost.py` measured on 2 idle
cores (`BENCHMARKED`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kit.experiments.timecat import planning, sharing, sweep
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.sweep_settings import Cell
from kit.readout.progress import stage_spans

#: seconds on 2 cores of a fresh sweep's units of work, measured by benchmarks/sweep_cost.py on
#: world 0 at budgets 60 and 120 (docs: Benchmarks, "The budget sweep"), nothing else running:
#: an iteration of cat1's compute (the runs of one launch side by side), one checkpoint's
#: features on one task (its probe rows and evaluation split), one L-BFGS probe of a
#: representation on a task
SECONDS_PER = {"iteration": 16 / 990, "extraction": 41 / 144, "probe": 38 / 72}
#: the conditions SECONDS_PER was measured in, for the estimate's line
MEASURED_ON = "2 idle cores (load average 1.8, the benchmark's own)"
#: a notebook's seconds outside its training, extraction and probe stages (kernel start,
#: imports, plan, judging, tables, charts) when no notebook 03 of the same folder measured them:
#: notebook 03's on 2 idle cores of an Intel Xeon (docs/data/replicate_cost.json's "the rest")
FIXED_S = 16.0


@dataclass(frozen=True)
class Rates:
    """Seconds per unit of work (`per`, keyed as SECONDS_PER), a notebook's fixed seconds, and
    where they were measured, for the estimate's line."""

    per: dict[str, float]
    fixed: float
    measured_on: str


BENCHMARKED = Rates(SECONDS_PER, FIXED_S, MEASURED_ON)
#: notebook 03's name, whose stage records and provenance `measured_rates` reads
NOTEBOOK_03 = "03_time_concat"


@dataclass(frozen=True)
class SweepCost:
    """A sweep's work: iterations of cat1's compute (an iteration of a model `w` times wider
    weighs w², a ResNet's multiply-adds), checkpoints whose features are extracted on one task
    (each file once, whatever cells read it), and probes (representations x tasks, a
    representation that several cells probe with the same settings once)."""

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


def cost(cells: list[Cell], beyond_notebook_03: bool = False) -> SweepCost:
    """The work of `cells` run from scratch (nothing finished): the merged plan's training, each
    distinct checkpoint file's features on each task, and every distinct probe. With
    `beyond_notebook_03`, less what notebook 03 does itself for the same models (its runs, its
    checkpoints' features on its tasks, its representations' probes where the cell probes as
    notebook 03 does): what notebook 04 adds after notebook 03 in one `kit run`."""
    merged = sweep.plan_cells(cells)
    notebook = cells[0].notebook if cells and beyond_notebook_03 else None
    own = (
        planning.plan(notebook.look(max(c.settings.replicates for c in cells)))
        if notebook is not None
        else planning.Plan([], [], [], {})
    )
    runs = {run.output_dir for run in own.trainings}
    tasks = [] if notebook is None else [t.name for t in notebook.tasks]
    extracted = {
        (path, t) for rep in own.representations for path in rep.checkpoints for t in tasks
    }
    probed = set(own.representations)
    width = cells[0].settings.train.width if cells and cells[0].settings.train else 1.0
    files, probes = set(), set()
    for cell in cells:
        as_03 = notebook is not None and sharing.probes_as_notebook_03(cell.settings, notebook)
        for rep in merged.representations[cell.key]:
            names = [t.name for t in cell.settings.tasks if rep.task in (None, t.name)]
            files |= {(path, task) for path in rep.checkpoints for task in names} - extracted
            if not (as_03 and rep in probed):
                probes |= {(sharing.probing(cell.settings), rep, task) for task in names}
    return SweepCost(
        sum(
            run.iterations * (run.width / width) ** 2
            for run in merged.trainings
            if run.output_dir not in runs
        ),
        len(files),
        len(probes),
    )


def notebook_03_work(notebook: TimecatSettings, replicates: int) -> SweepCost:
    """Notebook 03's own work at `replicates`: its runs' iterations of cat1's compute, each
    checkpoint's features on each of its tasks, and its probes (a representation on each task
    it is probed on), in `cost`'s units."""
    own = planning.plan(notebook.look(replicates))
    width = notebook.train.width if notebook.train is not None else 1.0
    tasks = [t.name for t in notebook.tasks]
    return SweepCost(
        sum(run.iterations * (run.width / width) ** 2 for run in own.trainings),
        len({(p, t) for rep in own.representations for p in rep.checkpoints for t in tasks}),
        sum(rep.task in (None, t) for rep in own.representations for t in tasks),
    )


def measured_rates(out: Path, notebook: TimecatSettings | None) -> Rates | None:
    """The rates notebook 03 measured in the output folder `out` (see the module docstring):
    None where it did not run there under `kit run`, or did not train every run of its plan
    (a run resumed or read back measures no rate)."""
    stages = stage_spans(out / f".{NOTEBOOK_03}.stages.jsonl")
    provenance = out / f"{NOTEBOOK_03}.provenance.json"
    if notebook is None or "training" not in stages or not provenance.is_file():
        return None
    trained, runs = stages["training"]
    extraction = sum(s for name, (s, _) in stages.items() if name.startswith("features"))
    probes, count = stages.get("probes", (0.0, 0))
    per_replicate = len(planning.plan(notebook.look(1)).trainings)
    if not (runs and count and per_replicate) or runs % per_replicate:
        return None
    work = notebook_03_work(notebook, runs // per_replicate)
    wall = float(json.loads(provenance.read_text()).get("wall_s") or 0.0)
    return Rates(
        {
            "iteration": trained / work.iterations,
            "extraction": extraction / max(work.extractions, 1),
            "probe": (probes - extraction) / count,
        },
        max(wall - trained - probes, 0.0),
        "this machine by notebook 03 in this folder",
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def cost_line(found: SweepCost, rates: Rates = BENCHMARKED) -> str:
    """The work `found` and its expected wall time at `rates`, with a notebook's fixed cost, in
    one line (seconds below two minutes, else minutes)."""
    times = found.seconds(rates.per) | {"the notebook's fixed cost": rates.fixed}
    return (
        f"{found.iterations:,.0f} iterations of cat1's compute, {found.extractions:,} "
        f"checkpoint extractions (checkpoint x task), {found.probes:,} probes: about "
        + ", ".join(f"{kind} {_duration(seconds)}" for kind, seconds in times.items())
        + f", in all {_duration(sum(times.values()))} at the rates measured on "
        + rates.measured_on
    )


def cost_lines(cells: list[Cell], out: Path | None = None) -> list[str]:
    """Notebook 04's cost lines: the work of its cells from scratch and, where some of it is
    notebook 03's (its own cell, or runs other cells share with it), what notebook 04 adds
    after notebook 03; a sentence for a profile that sweeps no budget. With `out`, the output
    folder, at the rates notebook 03 measured there where it did (`measured_rates`)."""
    if not cells:
        return ["This profile sweeps no budget: nothing to run."]
    found = None if out is None else measured_rates(out, cells[0].notebook)
    rates = found or BENCHMARKED
    total, added = cost(cells), cost(cells, beyond_notebook_03=True)
    lines = [f"From scratch: {cost_line(total, rates)}."]
    if added == SweepCost(0, 0, 0):
        lines.append(
            "After notebook 03 in the same output folder: nothing more (every run, feature and "
            "probe is notebook 03's, reused)."
        )
    elif added != total:
        lines.append(
            "After notebook 03 in the same output folder (its runs, features and probes "
            f"reused): {cost_line(added, rates)}."
        )
    return lines
