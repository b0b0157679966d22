"""Notebook 04's parameters: notebook 03's experiment swept over the total budget and the
synthetic world's seed (no torch).

The sweep does not restate notebook 03's parameters: it loads them for the same profile, layers
`overrides` on top, and varies only the budget (`budgets`), the world (`world_seeds`), the number
of replicates and the variants kept. A cell (one world seed, one budget) whose settings are
notebook 03's own trains into notebook 03's run folder, so the runs both notebooks share are
trained once (their folders are keyed by variant and seed, and a folder holding other settings is
refused, never reused). With `catn_models: snapshots` in `overrides`, every cell of a world reads
snapshots of the same seeded runs (paper Section 5.1).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from kit.experiments.timecat.settings import NOTEBOOK as SWEPT_NOTEBOOK
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.variants import VARIANT_KINDS
from kit.files.paths import SAFE_NAME
from kit.params import bounds
from kit.params import params as kit_params
from kit.params.params import NotebookSettings
from kit.stats.settings import RoundsSettings


@dataclass(frozen=True)
class Cell:
    """One point of the sweep: notebook 03's settings at one world seed and total budget (with
    `replicates` those of its first round, or of a later look), whether its runs are notebook
    03's own (same folders, trained once), the first replicate its look adds (`start`), and
    notebook 03's parameters."""

    world_seed: int
    budget: int
    settings: TimecatSettings
    shared: bool
    start: int = 0
    #: notebook 03's parameters, whose runs a cell reads where it plans the same ones
    #: (kit.experiments.timecat.sharing.share_runs)
    notebook: TimecatSettings | None = None

    @property
    def key(self) -> tuple[int, int]:
        """The cell's (world seed, budget)."""
        return self.world_seed, self.budget

    def look(self, span: range) -> Cell:
        """This cell at the look that adds the replicates `span` (kit.stats.rounds)."""
        return replace(self, settings=self.settings.look(span.stop), start=span.start)


class SweepSettings(NotebookSettings):
    """Notebook 04: when does time-concat help? Notebook 03 over budgets and world seeds."""

    #: runs of cells that are not notebook 03's own, inside output_dir: <run_root>/world<w>
    #: under `catn_models: snapshots` (every cell of a world reads the same seeded runs),
    #: else <run_root>/world<w>/budget<b>
    run_root: str = Field(default="sweep", min_length=1, pattern=SAFE_NAME)
    #: total budgets in iterations (each trained variant's, split in n for catN), ascending; empty:
    #: this profile does not sweep (notebook 04 says so and states no claim)
    budgets: list[bounds.Step] = Field(default_factory=list, max_length=bounds.SWEPT)
    #: seeds of the synthetic world (train.data.synthetic.seed of notebook 03); empty: notebook
    #: 03's own world only
    world_seeds: list[bounds.Seed] = Field(default_factory=list, max_length=bounds.SWEPT)
    #: replicates per cell, a fixed design (default: notebook 03's design)
    replicates: int | None = Field(default=None, ge=1, le=bounds.REPLICATES)
    #: replicates per cell in rounds, the cells judged after every round and the decided ones
    #: stopped (docs: Replicates in rounds; default: notebook 03's design)
    rounds: RoundsSettings | None = None
    #: notebook 03's variants the sweep trains and probes, by name (default: every variant but
    #: per-task direct training, whose cost grows with the number of tasks)
    variants: list[str] = Field(default_factory=list, max_length=bounds.ENTRIES)
    #: how notebook 03's `wide` variants are trained in the sweep: `equal` (renamed <name>-eq and
    #: trained budget / width^2 iterations, since a ResNet's multiply-adds grow with the square
    #: of its width: cat1's compute, the width-matched single model at equal compute) or
    #: `notebook 03` (the whole budget, as there: about width^2 times cat1's compute)
    wide_compute: Literal["equal", "notebook 03"] = "equal"
    #: values layered over notebook 03's parameters for every cell (same keys as its schema)
    overrides: dict[str, Any] = Field(default_factory=dict, max_length=bounds.ENTRIES)
    #: a sub-model has learned the pretraining task once its own in-distribution accuracy reaches
    #: this share of cat1's best over the sweep (in the same world); cat1 saturates at the
    #: smallest budget where its own accuracy does
    saturation: float = Field(default=0.95, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _consistent(self) -> SweepSettings:
        if self.replicates is not None and self.rounds is not None:
            raise ValueError("replicates: give a fixed design or rounds, not both")
        if self.budgets != sorted(set(self.budgets)) or any(b < 1 for b in self.budgets):
            raise ValueError(
                f"budgets: give distinct positive budgets in ascending order, got {self.budgets}"
            )
        if len(set(self.world_seeds)) != len(self.world_seeds) or any(
            s < 0 for s in self.world_seeds
        ):
            raise ValueError(f"world_seeds: give distinct seeds >= 0, got {self.world_seeds}")
        cells(self)  # every cell validates as notebook 03's parameters, before any compute
        return self

    def input_problems(self) -> list[str]:
        """What the cells read (data roots, checkpoints), checked as notebook 03 checks its own,
        each problem once."""
        return list(
            dict.fromkeys(
                problem for cell in cells(self) for problem in cell.settings.input_problems()
            )
        )

    def live_views(self) -> list[str]:
        """What follows the cells' training runs live, each command once."""
        return list(
            dict.fromkeys(line for cell in cells(self) for line in cell.settings.live_views())
        )


def swept_notebook(params: SweepSettings) -> TimecatSettings:
    """Notebook 03's parameters for this profile and output folder."""
    loaded, _ = kit_params.load(SWEPT_NOTEBOOK, params.profile, output_dir=params.output_dir)
    assert isinstance(loaded, TimecatSettings)
    return loaded


def _base_values(params: SweepSettings, notebook: TimecatSettings) -> dict[str, Any]:
    """Notebook 03's values with the sweep's overrides, design and variants."""
    values = notebook.model_dump(mode="json", exclude_unset=False)
    sources: kit_params.Sources = {}
    kit_params.merge(values, sources, params.overrides, "overrides")
    names = [v["name"] for v in values["variants"]]
    kept = params.variants or [
        v["name"] for v in values["variants"] if not VARIANT_KINDS.get(v["kind"]).per_task
    ]
    unknown = sorted(set(kept) - set(names))
    if unknown:
        raise ValueError(
            f"variants: {', '.join(unknown)} not among notebook 03's variants ({', '.join(names)})"
        )
    if values["baseline"] not in kept:
        raise ValueError(f"variants: keep notebook 03's baseline {values['baseline']}")
    values["variants"] = [v for v in values["variants"] if v["name"] in kept]
    if params.replicates is not None:
        values |= {"replicates": params.replicates, "rounds": None}
    if params.rounds is not None:
        values["rounds"] = params.rounds.model_dump()
    return values


def _at_equal_compute(variant: dict[str, Any], budget: int) -> dict[str, Any]:
    """A widened variant (kind `wide`) as the model of its width that spends `budget`
    iterations of cat1's compute (budget / width^2 iterations, at least one); other variants
    unchanged."""
    if not VARIANT_KINDS.get(variant["kind"]).widened:
        return variant
    return variant | {
        "name": f"{variant['name']}-eq",
        "iterations": max(1, round(budget / variant["width"] ** 2)),
    }


def cells(params: SweepSettings) -> list[Cell]:
    """Every (world seed, budget) cell as validated notebook 03 settings, world by world. A
    cell's synthetic pool holds at least as many images as its longest run draws (no image seen
    twice, as in notebook 03). Under `catn_models: snapshots` the cells of a world share one run
    folder, one horizon (train.step_hint, the top budget when not given) and one pool (sized
    for the horizon), so that their runs are the same runs, trained once (sweep.plan_cells).
    Each cell plans its first round's replicates (all of the fixed design's). No cells for a
    profile that sweeps no budget. Raises ValueError naming the key when a cell does not
    validate."""
    if not params.budgets:
        return []
    notebook = swept_notebook(params)
    train = notebook.train
    if train is None or train.data.synthetic is None:
        raise ValueError(
            "budgets: the sweep varies the synthetic world, but notebook 03's "
            "profile pretrains on "
            + (train.data.kind if train else "nothing")
            + "; leave budgets empty for this profile"
        )
    base = _base_values(params, notebook)
    if base.get("feature_cache") is None:
        # one cache for every cell, notebook 03's: a checkpoint both read is extracted once
        base["feature_cache"] = f"{notebook.run_root}/features"
    snapshots = base["catn_models"] == "snapshots"
    if snapshots and base["train"]["step_hint"] is None:
        base["train"]["step_hint"] = params.budgets[-1]  # one horizon for every cell
    found = []
    for world in params.world_seeds or [train.data.synthetic.seed]:
        for budget in params.budgets:
            values = copy.deepcopy(base) | {"total_iterations": budget}
            if params.wide_compute == "equal":
                values["variants"] = [_at_equal_compute(v, budget) for v in values["variants"]]
            world_values = values["train"]["data"]["synthetic"]
            world_values["seed"] = world
            # snapshots: one pool for every cell of the world, sized for the horizon (the top
            # budget unless given), so that a cell added or dropped changes no run
            drawn = base["train"]["step_hint"] if snapshots else budget
            world_values["num_train"] = max(
                world_values["num_train"], drawn * values["train"]["batch_size"]
            )
            shared = (
                world == train.data.synthetic.seed
                and budget == notebook.budget()
                and values["train"] == train.model_dump(mode="json")
            )
            values["run_root"] = (
                notebook.run_root
                if shared
                else f"{params.run_root}/world{world}" + ("" if snapshots else f"/budget{budget}")
            )
            try:
                settings = TimecatSettings(**values)
            except ValidationError as error:
                problems = "; ".join(
                    ".".join(map(str, e["loc"]))
                    + (": " if e["loc"] else "")
                    + e["msg"].removeprefix("Value error, ")
                    for e in error.errors()
                )
                raise ValueError(
                    f"budgets: the cell world {world}, budget {budget} is not a "
                    f"valid notebook 03 experiment: {problems}"
                ) from None
            found.append(
                Cell(world, budget, settings.look(settings.design.first), shared, notebook=notebook)
            )
    return found


kit_params.register_schema("04_when_concat_helps", SweepSettings)
