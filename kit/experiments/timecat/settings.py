"""Notebook 03's parameters: the time-concat experiment as typed variants (no torch).

A *variant* is one kind of representation probed in every replicate: n models concatenated, and
how they are made (time-concat runs sharing a budget, one wider model, untrained networks, direct
training on a task, or existing checkpoints). Tables key on the variant's name, and the baseline
is named (`baseline: cat1`), never inferred from n. Values whose right size depends on the machine
and data (probe rows, feature batch, dtype, workers, intervals, devices) have no small default.
A variant and a probe task, the entries of its lists, are kit.experiments.timecat.entries'.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from kit.data.settings import DataSettings
from kit.data.synthetic_settings import ComponentSettings
from kit.experiments.timecat import inputs, shifted
from kit.experiments.timecat.entries import ProbeTask, Variant
from kit.files.paths import escapes, resolve
from kit.launch.settings import LaunchSettings
from kit.params import bounds, params
from kit.params.params import NotebookSettings
from kit.probes.base import ProbeSettings, ProbeUse
from kit.probes.registry import PROBES, AnyProbeSettings, default_settings
from kit.stats.sequential import Rounds
from kit.stats.settings import RoundsSettings, design
from kit.train.settings import RunSettings, TrainSettings, budget_problem

#: the notebook these are the parameters of
NOTEBOOK = "03_time_concat"
#: training settings whose right value depends on scale: each profile must give them
SCALE_TRAIN_KEYS = ("device", "num_workers", "eval_every", "checkpoint_every", "log_every")


class TimecatSettings(NotebookSettings):
    """Notebook 03: variants of a representation at a fixed budget, probed on every task."""

    #: runs, logs and feature caches: a folder inside output_dir
    run_root: str = Field(default="time_concat", min_length=1)
    #: the feature cache's folder inside output_dir (default: <run_root>/features); entries are
    #: keyed by checkpoint contents, data and split, so experiments may share one
    feature_cache: str | None = Field(default=None, min_length=1)
    base_seed: int = Field(default=0, ge=0, le=bounds.SEED)
    #: replicates of the fixed design (with `rounds`, each round plans its own count)
    replicates: int = Field(ge=1, le=bounds.REPLICATES)
    #: replicates in rounds, each claim judged after every round (docs: Replicates in rounds);
    #: absent: the fixed design of `replicates`
    rounds: RoundsSettings | None = None
    seed_sets: list[bounds.Seeds] | None = Field(default=None, max_length=bounds.REPLICATES)
    #: the budget in iterations that each trained variant shares (per model: budget / n)
    total_iterations: int | None = Field(default=None, ge=1, le=bounds.ITERATIONS)
    #: how the models of time-concat variants are made (paper Section 5.1; docs: Training, "Two
    #: designs for catN"). `snapshots`, as the authors' released checkpoints were: per replicate
    #: each seed trains once, to the largest step any variant reads from it, warmed up against
    #: one horizon (`horizon()`: train.step_hint, else the budget), and saves its model at every
    #: step a variant reads; model j of catN is seed j's snapshot at budget / N. `independent`:
    #: every model of every variant is its own run of budget / N iterations, warmed up against
    #: its own length. Wide, direct and random-init variants are unchanged by it
    catn_models: Literal["snapshots", "independent"]
    variants: list[Variant] = Field(min_length=1, max_length=bounds.ENTRIES)
    #: the variant every other one is compared with, by name
    baseline: str = Field(min_length=1)
    train: RunSettings | None = None
    tasks: list[ProbeTask] = Field(min_length=1, max_length=bounds.ENTRIES)
    #: which probe measures the results, by name: `fast` (the kit's, on cached features),
    #: `lbfgs` (full-batch L-BFGS on the same features, run to convergence, one pass over the
    #: fit rows per evaluation) or `faithful` (the authors', on augmented images every epoch);
    #: its settings are `probes.<name>`
    probe_kind: str = "fast"
    #: settings of each probe, by name (`probes.fast.epochs`); the one probe_kind names is used,
    #: its defaults where not given. A profile may hold several, so that another profile or
    #: `--set probe_kind=...` switches probes without rewriting a section
    probes: dict[str, AnyProbeSettings] = Field(default_factory=dict, max_length=bounds.ENTRIES)
    #: training rows per task for the probes: None = every row; else a seeded, class-balanced
    #: subset of that size
    probe_train_rows: int | None = Field(default=None, ge=16, le=bounds.ROWS)
    #: the selection rule tables and claims read: `paper`, `heldout` or `bounded` (held-out
    #: choice among heads within the probe's `max_gap` of their fit rows; `kit.probes.selection`)
    probe_rule: Literal["paper", "heldout", "bounded"] = "heldout"
    #: also fit the first replicate's probes by full-batch L-BFGS (converged, same weight
    #: decays and held-out rows) and record its top-1 beside the probe's: the check that the
    #: fast probe has converged
    lbfgs_check: bool = False
    #: feature probes (fast or lbfgs) fitted at once, each on one intra-op thread, with results
    #: identical to fitting them one by one (`kit.probes.parallel`), and on the CPU the
    #: backbones a feature extraction runs at once, one intra-op thread each: up to the cores
    side_by_side: int = Field(default=1, ge=1, le=bounds.PER_NODE)
    feature_batch_size: int = Field(ge=1, le=bounds.BATCH)
    #: DataLoader workers decoding images for feature extraction
    feature_workers: int = Field(ge=0, le=bounds.PER_NODE)
    #: seconds a feature-extraction loader may take for one batch (its first includes starting
    #: the workers) before extraction fails naming the checkpoints and the batch: a stuck or
    #: dead loader worker (as the trainer's train.loader_timeout_s)
    feature_loader_timeout_s: int = Field(default=300, ge=1, le=bounds.SECONDS)
    feature_dtype: Literal["float16", "float32"]
    #: where notebook 03 extracts features: in its kernel, or as a job launched with `launch`
    #: (torchrun on the node's GPUs, a Slurm job) that fills the cache the kernel then probes from
    extraction: Literal["kernel", "job"] = "kernel"
    device: str = Field(min_length=1)
    launch: LaunchSettings
    paper_columns: dict[str, str] = Field(default_factory=dict, max_length=bounds.ENTRIES)
    #: points of selection optimism (the chosen heads' held-out top-1 over their evaluation
    #: top-1, mean over replicates at 97.5% one-sided confidence) above which a probe cell is
    #: flagged and no comparison rests on it (kit.experiments.timecat.cells; docs: Concepts,
    #: "Flagged cells"); null: never flag. Default: the default smallest effect of interest
    max_probe_optimism: float | None = Field(default=2.9, gt=0.0, le=100.0)
    #: the smallest effect of interest, in points of top-1, of each claim's primary endpoint
    #: (kit.stats.outcomes): a claim is contradicted when its interval excludes a gain this
    #: large. Default 2.9: half of the paper's cat4 gain in mean transfer accuracy over cat1
    #: (Table 3: iNat18, CIFAR-100, CIFAR-10, 70.8 against 65.0), and below cat2's 3.6
    smallest_effect: float = Field(default=2.9, gt=0.0, le=100.0)

    @field_validator("probe_kind")
    @classmethod
    def _known_probe(cls, kind: str) -> str:
        return PROBES.checked(kind)

    @field_validator("probes", mode="before")
    @classmethod
    def _keyed_by_kind(cls, sections: object) -> object:
        """Each section validated as the settings of the probe its key names."""
        if not isinstance(sections, dict):
            return sections  # the field's own check refuses it
        for name, section in sections.items():
            PROBES.checked(name)
            if isinstance(section, dict) and section.get("kind", name) != name:
                raise ValueError(f"{name}: the key names the probe; drop its kind")
        return {
            name: {**section, "kind": name} if isinstance(section, dict) else section
            for name, section in sections.items()
        }

    @property
    def probe(self) -> ProbeSettings:
        """The settings of the probe probe_kind names: its section, else its defaults."""
        given = self.probes.get(self.probe_kind)
        return given if given is not None else default_settings(self.probe_kind)

    @model_validator(mode="after")
    def _consistent(self) -> TimecatSettings:
        for key, folder in (("run_root", self.run_root), ("feature_cache", self.feature_cache)):
            if folder is not None and escapes(resolve(self.output_dir), folder):
                raise ValueError(
                    f"{key}: {folder!r} lands outside output_dir "
                    f"{self.output_dir}; give a folder inside it"
                )
        names = [variant.name for variant in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variants: names must be unique, got {names}")
        if self.baseline not in names:
            raise ValueError(f"baseline: '{self.baseline}' is not a variant ({', '.join(names)})")
        task_names = [task.name for task in self.tasks]
        if len(set(task_names)) != len(task_names):
            raise ValueError(f"tasks: names must be unique, got {task_names}")
        for variant in self.variants:
            unknown = sorted(set(variant.tasks or []) - set(task_names))
            if unknown:
                raise ValueError(
                    f"variants: {variant.name} trains on {', '.join(unknown)}, not among the tasks "
                    f"({', '.join(task_names)})"
                )
            if variant.checkpoints is not None and len(variant.checkpoints) < self.design.most:
                raise ValueError(
                    f"variants: {variant.name} lists checkpoints for "
                    f"{len(variant.checkpoints)} of {self.design.most} replicates"
                )
        models, most = max(variant.n for variant in self.variants), self.design.most
        if self.seed_sets is not None:
            if len(self.seed_sets) < most:
                raise ValueError(f"seed_sets: {len(self.seed_sets)} sets for {most} replicates")
            for seeds in self.seed_sets:
                if len(set(seeds)) < models:
                    raise ValueError(f"seed_sets: {seeds} has fewer than {models} distinct seeds")
        self._check_training()
        self._check_probe()
        if any(task.components for task in self.tasks) and self.train is None:
            raise ValueError(
                "tasks: components describe the synthetic world of the train "
                "section, which is not given"
            )
        for task in self.tasks:  # a task reading the pretraining data needs a train section
            shifted.check_host(task.name, task.extra_evals, *self.task_data(task))
        return self

    def _check_probe(self) -> None:
        """The chosen probe's settings against what this experiment asks of them."""
        kind = self.probe_kind
        if kind not in self.probes:
            try:
                default_settings(kind)
            except ValidationError as error:
                needed = ", ".join(str(e["loc"][0]) for e in error.errors() if e["loc"])
                raise ValueError(
                    f"probes: probe_kind {kind} needs a probes.{kind} section (at least "
                    f"{needed}, which have no default)"
                ) from None
        settings = self.probe
        if self.probe_rule not in settings.rules():
            raise ValueError(
                f"probe_rule: {self.probe_rule} is not reported by the {kind} probe with these "
                f"settings (it reports {', '.join(settings.rules())}; bounded needs a "
                f"probes.{kind}.max_gap)"
            )
        if self.lbfgs_check and settings.reference() is None:
            raise ValueError(
                f"lbfgs_check: the {kind} probe has no L-BFGS fit to be checked against"
            )
        use = ProbeUse(
            tuple(task.name for task in self.tasks),
            self.device,
            self.probe_train_rows,
            tuple(task.name for task in self.tasks if task.extra_evals),
        )
        problems = settings.problems(use)
        if problems:
            raise ValueError(problems[0])

    def _check_training(self) -> None:
        trained = [variant for variant in self.variants if variant.trained or variant.initialised]
        if not trained:
            return
        if self.train is None:
            raise ValueError(
                f"train: the training settings are needed by what is trained here: "
                f"{', '.join(v.name for v in trained)}"
            )
        unset = [key for key in SCALE_TRAIN_KEYS if key not in self.train.model_fields_set]
        if unset:
            raise ValueError(
                f"train: set {', '.join(unset)} for this profile (their right "
                "value depends on the machine and the data, so there is no default)"
            )
        for variant in trained:  # the width each model is built with (run_config)
            if (width := self.train.width * variant.width) > bounds.WIDTH:
                raise ValueError(
                    f"train.width: {self.train.width:g} x variant {variant.name}'s width "
                    f"{variant.width:g} builds models of width {width:g}, above the bound "
                    f"{bounds.WIDTH:g} (kit/params/bounds.py); lower train.width"
                )
        widths = {v.width for v in trained if v.trained and v.spec.concatenated}
        if self.catn_models == "snapshots" and len(widths) > 1:
            raise ValueError(
                "catn_models: snapshots reads every time-concat variant from the same seeded "
                f"runs, but their widths differ ({', '.join(map(str, sorted(widths)))})"
            )
        for variant in trained:
            if variant.trained:  # iterations_for raises when the budget does not split
                problem = budget_problem(self.iterations_for(variant), self.train.batch_size)
                if problem:
                    raise ValueError(f"total_iterations: variant {variant.name} trains {problem}")
        if self.train.data.kind != "synthetic" and any(t.components for t in self.tasks):
            raise ValueError(
                "tasks: components describe the synthetic world, but pretraining "
                f"reads {self.train.data.kind}"
            )

    def input_problems(self) -> list[str]:
        """Every problem of what the values name, one line per key: data roots (pretraining's,
        the tasks' and their extra evaluation sets'), the variants' checkpoints (found, then
        opened: imports torch) and the training's optional packages (timecat.inputs: it reads the
        disk, so no validator does it), before compute (kit.params.params.check_inputs)."""
        datas = {
            "tasks": [self.task_data(task)[0] for task in self.tasks]
            + [extra.data for task in self.tasks for extra in task.extra_evals]
        }
        if self.train is not None and any(v.trained or v.initialised for v in self.variants):
            datas = {"train": [self.train.data]} | datas
        problems = inputs.data_problems(datas) + inputs.checkpoint_problems(self.reads())
        if self.train is not None:
            problems += [f"train.{problem}" for problem in self.train.input_problems()]
        return problems

    @property
    def design(self) -> Rounds:
        """The plan of looks: `rounds`, or one look at `replicates`."""
        return design(self.rounds, self.replicates)

    def look(self, count: int) -> TimecatSettings:
        """These settings planning `count` replicates: one look of the rounds."""
        return self.model_copy(update={"replicates": count})

    def input_notes(self) -> list[str]:
        """The checkpoints read: the release layout found, each file's variant, step and run."""
        return inputs.checkpoint_notes(self.reads())

    def live_views(self) -> list[str]:
        """What follows the runs it trains under run_root live (train.trackers)."""
        return self.train.live_views(resolve(self.output_dir) / self.run_root) if self.train else []

    def reads(self) -> list[inputs.Read]:
        """The checkpoint files the variants read at this many replicates."""
        return [
            inputs.Read(variant.name, file, variant.iterations, self.seeds(replicate))
            for variant in self.variants
            for replicate, group in enumerate((variant.checkpoints or [])[: self.replicates])
            for file in group
        ]

    def budget(self) -> int:
        """Total iterations each trained variant spends: total_iterations, or the baseline's."""
        if self.total_iterations is not None:
            return self.total_iterations
        baseline = self.variant(self.baseline)
        if baseline.iterations is None:
            raise ValueError(
                "total_iterations: give the budget, or iterations for the baseline "
                f"variant {baseline.name}"
            )
        return baseline.n * baseline.iterations

    def iterations_for(self, variant: Variant) -> int:
        """Iterations per model of a trained variant."""
        if variant.iterations is not None:
            return variant.iterations
        budget = self.budget()
        if budget % variant.n:
            raise ValueError(
                f"total_iterations: {budget} does not split into {variant.n} equal "
                f"runs for variant {variant.name}; give its iterations explicitly"
            )
        return budget // variant.n

    def horizon(self) -> int:
        """The seeded runs' step_hint under `catn_models: snapshots`: train.step_hint, else the
        budget (cat1's iterations), whichever variants are listed (a run's warmup stays)."""
        assert self.train is not None
        return self.train.step_hint or self.budget()

    def variant(self, name: str) -> Variant:
        return next(variant for variant in self.variants if variant.name == name)

    def run_config(
        self, variant: Variant, seed: int, output_dir: str, task: ProbeTask | None = None
    ) -> TrainSettings:
        """The full configuration of one model of a variant (trained or initialised)."""
        assert self.train is not None
        settings = self.train.model_dump()
        settings["width"] = self.train.width * variant.width
        if task is not None:
            task_data, num_classes = self.task_data(task)
            settings |= {"data": task_data.model_dump(), "num_classes": num_classes}
        iterations = self.iterations_for(variant) if variant.spec.trained else 1
        return TrainSettings(**settings, seed=seed, iterations=iterations, output_dir=output_dir)

    def task_data(self, task: ProbeTask) -> tuple[DataSettings, int]:
        """A task's data and class count (a synthetic task is the pretraining world with the
        task's components, equally weighted)."""
        if task.data is not None:
            assert task.num_classes is not None
            return task.data, task.num_classes
        if task.pretraining:
            if self.train is None:
                raise ValueError(
                    f"tasks: {task.name} probes the pretraining data, but no train section gives it"
                )
            return self.train.data, self.train.num_classes
        assert self.train is not None and self.train.data.synthetic is not None
        assert task.components is not None
        world = self.train.data.synthetic.model_copy(
            update={
                "components": [ComponentSettings(weight=1.0, cues=cues) for cues in task.components]
            }
        )
        return self.train.data.model_copy(update={"synthetic": world}), self.train.num_classes

    def seeds(self, replicate: int) -> list[int]:
        """The seed set of a replicate: given, or base_seed + 1000 * replicate + 0, 1, 2, ..."""
        if self.seed_sets is not None:
            return self.seed_sets[replicate]
        most = max(variant.n for variant in self.variants)
        return [self.base_seed + 1000 * replicate + i for i in range(most)]


params.register_schema(NOTEBOOK, TimecatSettings)
