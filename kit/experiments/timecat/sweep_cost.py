"""What notebook 04's cells cost before anything runs: the work of their merged plan
(kit.experiments.timecat.sweep.plan_cells) and its wall time, with the share of it that is
notebook 03's own work (its runs, its checkpoints' features, its representations' probes),
which notebook 04 reuses when notebook 03 ran first.

The time is the work at some rates plus a notebook's fixed cost (its kernel, imports, plan,
judging, tables and charts). Where notebook 03 ran from scratch in the same output folder under
`kit run` (its stage records beside it), the rates are the ones it measured there minutes before,
on this machine and load (`measured_rates`): its training seconds per iteration of cat1's
compute, extraction seconds per checkpoint and task, probe seconds per base network's features
probed on a task (a probe of cat4's four networks weighs four of cat1's: an L-BFGS step's
products grow with the features), and its own time outside those stages. Otherwise they are the
ones the recorded main job measured the same way (`recorded_rates`, written with its record by
`python -m kit figures --record cpu`), on the CPU its line names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kit.experiments.timecat import planning, sharing, sweep
from kit.experiments.timecat.planning import Representation
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.sweep_settings import Cell
from kit.files.files import write_text
from kit.files.paths import REPO_ROOT
from kit.readout.progress import stage_spans

#: the file of a recorded main job's rates (`record_rates`), beside its summaries
RATES = "rates.json"
#: the recorded main job's (docs/results/cpu)
RECORDED_RATES = REPO_ROOT / "docs" / "results" / "cpu" / RATES
#: the units of work a rate is per: an iteration of cat1's compute (the runs of one launch side
#: by side), one checkpoint's features on one task (its probe rows and evaluation split), one
#: base network's features probed on one task
UNITS = ("iteration", "extraction", "probe")


@dataclass(frozen=True)
class Rates:
    """Seconds per unit of work (`per`, keyed by UNITS), a notebook's fixed seconds, and where
    they were measured, for the estimate's line."""

    per: dict[str, float]
    fixed: float
    measured_on: str


#: notebook 03's name, whose stage records and provenance `measured_rates` reads
NOTEBOOK_03 = "03_time_concat"


@dataclass(frozen=True)
class SweepCost:
    """A sweep's work: iterations of cat1's compute (an iteration of a model `w` times wider
    weighs w², a ResNet's multiply-adds), checkpoints whose features are extracted on one task
    (each file once, whatever cells read it), and probes (representations x tasks, a
    representation that several cells probe with the same settings once) with the base
    networks' features they read (`features`: cat4's probe reads four, wide1's two)."""

    iterations: float
    extractions: int
    probes: int
    features: float = 0.0

    def seconds(self, per: dict[str, float]) -> dict[str, float]:
        """The wall time of each kind of work at `per` (seconds per unit, keyed by UNITS)."""
        return {
            "training": self.iterations * per["iteration"],
            "extraction": self.extractions * per["extraction"],
            "probes": self.features * per["probe"],
        }


def _features(rep: Representation) -> float:
    """A representation's features in base networks' (n networks of `width` times as many)."""
    return rep.n * rep.width


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
        sum(_features(rep) for _, rep, _ in probes),
    )


def notebook_03_work(notebook: TimecatSettings, replicates: int) -> SweepCost:
    """Notebook 03's own work at `replicates`: its runs' iterations of cat1's compute, each
    checkpoint's features on each of its tasks, and its probes (a representation on each task
    it is probed on), in `cost`'s units."""
    own = planning.plan(notebook.look(replicates))
    width = notebook.train.width if notebook.train is not None else 1.0
    tasks = [t.name for t in notebook.tasks]
    probed = [rep for rep in own.representations for t in tasks if rep.task in (None, t)]
    return SweepCost(
        sum(run.iterations * (run.width / width) ** 2 for run in own.trainings),
        len({(p, t) for rep in own.representations for p in rep.checkpoints for t in tasks}),
        len(probed),
        sum(_features(rep) for rep in probed),
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
            "probe": (probes - extraction) / max(work.features, 1.0),
        },
        max(wall - trained - probes, 0.0),
        "this machine by notebook 03 in this folder",
    )


def record_rates(out: Path, notebook: TimecatSettings, where: str, path: Path) -> Path:
    """Keep the rates notebook 03 measured in the finished main job `out` (run on `where`, a
    CPU's words) in `path`: an estimate uses the recorded main job's before any notebook 03
    has run on a machine."""
    found = measured_rates(out, notebook)
    if found is None:
        raise ValueError(
            f"{out}: no rates to record (notebook 03 did not train every run of its plan there "
            "under `kit run`)"
        )
    kept = {"per": found.per, "fixed": found.fixed, "measured_on": f"{where}, by the main job"}
    write_text(path, json.dumps(kept, indent=1) + "\n")
    return path


def recorded_rates() -> Rates:
    """The recorded main job's rates (`record_rates`)."""
    kept = json.loads(RECORDED_RATES.read_text())
    return Rates(kept["per"], kept["fixed"], kept["measured_on"])


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def cost_line(found: SweepCost, rates: Rates | None = None) -> str:
    """The work `found` and its expected wall time at `rates`, with a notebook's fixed cost, in
    one line (seconds below two minutes, else minutes); by default at the recorded rates."""
    rates = rates or recorded_rates()
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
    rates = found or recorded_rates()
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
