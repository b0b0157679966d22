"""Typed parameters of notebooks and training runs, validated in one place.

Each notebook has a schema below. Its values come, later winning, from the notebook's own
parameters cell, the runner (profile and output folder), `parameters/base.yaml`,
`parameters/<profile>/profile.yaml`, `parameters/<profile>/<notebook>.yaml` and the command line.
A training run (`TrainConfig`) comes from one YAML file plus dotted command-line overrides.
Every value remembers where it came from, so a refusal names the file and the key before any
compute starts. Schemas are strict: YAML 1.1 reads `1e-3` as a string, and a string is never
silently taken for a number.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kit.paths import PARAMETERS_DIR, resolve


class ParameterError(ValueError):
    """Bad parameters, with the file and key that hold them."""


class _Strict(BaseModel):
    """No unknown keys, no string taken for a number, no mutation after validation."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class NotebookParams(_Strict):
    """Keys every notebook takes."""

    profile: str = Field(min_length=1)
    output_dir: str = Field(min_length=1)
    chart_formats: list[Literal["png", "svg", "html"]]


class ToyParams(NotebookParams):
    """Notebook 01: the XOR counterexample, trained."""

    seed: int = Field(ge=0)
    shares: list[float] = Field(min_length=1)
    replicates: int = Field(ge=2, le=200)
    concat_sizes: list[int] = Field(min_length=1)
    direct_replicates: int = Field(ge=1, le=200)
    weight_decays: list[float] = Field(min_length=1)
    sparsity_share: float = Field(ge=0.25, le=1.0)
    n_train: int = Field(ge=8)
    noise: float = Field(ge=0.0, le=0.4)
    lr: float = Field(gt=0.0, le=10.0)
    weight_decay: float = Field(ge=0.0)
    steps: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    init_scale: float = Field(gt=0.0)
    keep_threshold: float = Field(gt=0.0)
    probe_samples: int = Field(ge=16)
    probe_steps: int = Field(ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> ToyParams:
        for share in self.shares:
            if not 0.25 <= share <= 1.0:
                raise ValueError(f"shares: {share} is not in [0.25, 1] (the dominant component's "
                                 "weight cannot be below the uniform 1/4)")
        for k in self.concat_sizes:
            if not 1 <= k <= self.replicates:
                raise ValueError(f"concat_sizes: {k} is not in [1, replicates={self.replicates}]")
        if any(wd < 0 for wd in self.weight_decays):
            raise ValueError("weight_decays: values must be >= 0")
        if self.batch_size > self.n_train:
            raise ValueError(f"batch_size: {self.batch_size} exceeds n_train={self.n_train}")
        return self


class EvidenceParams(NotebookParams):
    """Notebook 02: the surveyed evidence; it computes from cited data and trains nothing."""


#: notebook (file stem) -> its schema; notebook 03's is at the end (it needs TrainConfig)
SCHEMAS: dict[str, type[NotebookParams]] = {
    "01_toy_counterexample": ToyParams,
    "02_surveyed_evidence": EvidenceParams,
}


def schema_for(notebook: str) -> type[NotebookParams]:
    try:
        return SCHEMAS[notebook]
    except KeyError:
        raise ParameterError(f"notebook '{notebook}' has no parameter schema in kit.config.SCHEMAS "
                             f"(known: {', '.join(sorted(SCHEMAS))})") from None


def read_yaml(path: Path) -> dict[str, Any]:
    """A parameter file as a mapping; an empty file is an empty mapping."""
    try:
        content = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ParameterError(f"{path}: not valid YAML: {error}") from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ParameterError(f"{path}: expected a mapping of parameter names to values, "
                             f"got {type(content).__name__}")
    return content


def profile_files(notebook: str, profile: str, parameters_dir: Path = PARAMETERS_DIR
                  ) -> list[Path]:
    """The parameter files of a notebook under a profile, in the order they apply."""
    profile_dir = parameters_dir / profile
    if not profile_dir.is_dir():
        known = sorted(p.name for p in parameters_dir.iterdir() if p.is_dir())
        raise ParameterError(f"{profile_dir}: unknown profile '{profile}' (known: "
                             f"{', '.join(known)})")
    files = [parameters_dir / "base.yaml", profile_dir / "profile.yaml",
             profile_dir / f"{notebook}.yaml"]
    return [f for f in files if f.exists()]


def layer(layers: list[tuple[str, Mapping[str, Any]]]) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge (source, values) layers, later winning; also return each key's source."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, mapping in layers:
        for key, value in mapping.items():
            values[key] = value
            sources[key] = source
    return values, sources


def validate(notebook: str, values: Mapping[str, Any], sources: Mapping[str, str]
             ) -> NotebookParams:
    """Validate merged values against the notebook's schema, naming file and key on error."""
    schema = schema_for(notebook)
    try:
        return schema(**values)
    except ValidationError as error:
        raise ParameterError(describe_errors(f"invalid parameters for notebook {notebook}:",
                                             schema, error, sources, "the merged parameters")
                             ) from None


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load(notebook: str, profile: str, defaults: Mapping[str, Any],
         overrides: Mapping[str, Any] | None = None, output_dir: str | None = None,
         parameters_dir: Path = PARAMETERS_DIR) -> tuple[NotebookParams, dict[str, str]]:
    """Layer and validate a notebook's parameters for a profile. Returns them and their sources."""
    layers: list[tuple[str, Mapping[str, Any]]] = [
        (f"notebooks/{notebook}.ipynb (parameters cell)", defaults),
        ("the runner", {"profile": profile, "output_dir": output_dir or f"outputs/{profile}"}),
    ]
    layers += [(str(path), read_yaml(path))
                for path in profile_files(notebook, profile, parameters_dir)]
    if overrides:
        layers.append(("the command line", overrides))
    values, sources = layer(layers)
    return validate(notebook, values, sources), sources


def from_namespace(notebook: str, namespace: Mapping[str, Any]) -> NotebookParams:
    """Validate the parameters a notebook holds as variables (set by its cell or papermill)."""
    fields = schema_for(notebook).model_fields
    values = {key: namespace[key] for key in fields if key in namespace}
    source = "the notebook's parameters (its parameters cell or papermill's injected cell)"
    return validate(notebook, values, dict.fromkeys(values, source))


# ---------------------------------------------------------------------------------------------
# Trainer configuration (kit.train): one YAML file per run, plus dotted command-line overrides
# ---------------------------------------------------------------------------------------------

#: visual cues of the synthetic world (kit.data) that can carry the label
CUES = ("colour", "shape", "texture", "position")


class ComponentConfig(_Strict):
    """One mixture component of the synthetic world: the cues that carry the label in it."""

    weight: float = Field(gt=0.0)
    cues: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _known_cues(self) -> ComponentConfig:
        unknown = sorted(set(self.cues) - set(CUES))
        if unknown:
            raise ValueError(f"cues: unknown cue(s) {', '.join(unknown)} "
                             f"(known: {', '.join(CUES)})")
        return self


class SyntheticConfig(_Strict):
    """The offline synthetic world. Its seed is separate from the run's, so seeds share a world."""

    num_train: int = Field(ge=1)
    num_eval: int = Field(ge=1)
    components: list[ComponentConfig] = Field(min_length=1)
    #: per cue, the probability that a carrying cue shows the sample's label (else a random class)
    strength: dict[str, float] = Field(default_factory=lambda: dict.fromkeys(CUES, 1.0))
    noise: float = Field(default=0.1, ge=0.0, le=1.0)
    seed: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _known_strengths(self) -> SyntheticConfig:
        for cue, value in self.strength.items():
            if cue not in CUES:
                raise ValueError(f"strength: unknown cue '{cue}' (known: {', '.join(CUES)})")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"strength: {cue}={value} is not in [0, 1]")
        return self


class DataConfig(_Strict):
    """Where the images come from and how they are augmented ('auto' picks by kind and size)."""

    kind: Literal["synthetic", "imagefolder", "cifar10", "cifar100", "inat18"]
    root: str | None = None
    image_size: int = Field(ge=8)
    augment: Literal["auto", "algoperf", "crop_flip", "none"] = "auto"
    verify_images: bool = True
    synthetic: SyntheticConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DataConfig:
        if (self.kind == "synthetic") != (self.synthetic is not None):
            raise ValueError("synthetic: give this section exactly when kind is synthetic")
        if self.kind != "synthetic" and not self.root:
            raise ValueError(f"root: kind {self.kind} reads images from disk and needs a root")
        return self


class TrainConfig(_Strict):
    """One pretraining run. Optimizer defaults are the AlgoPerf self-tuning schedule-free AdamW
    submission (REFERENCE.md); the budget is in iterations, the paper's unit."""

    model: Literal["resnet10", "resnet18", "resnet34", "resnet50", "resnet101"]
    width: float = Field(default=1.0, gt=0.0)
    stem: Literal["auto", "imagenet", "small"] = "auto"
    num_classes: int = Field(ge=2)
    data: DataConfig
    batch_size: int = Field(ge=1)
    iterations: int = Field(ge=1)
    step_hint: int | None = Field(default=None, ge=1)
    lr: float = Field(default=0.0025, gt=0.0)
    betas: list[float] = Field(default_factory=lambda: [0.9, 0.99552], min_length=2, max_length=2)
    eps: float = Field(default=1.0e-8, gt=0.0)
    weight_decay: float = Field(default=0.08122, ge=0.0)
    label_smoothing: float = Field(default=0.2, ge=0.0, lt=1.0)
    warmup_fraction: float = Field(default=0.02, ge=0.0, le=1.0)
    weight_lr_power: float = Field(default=2.0, ge=0.0)
    r: float = Field(default=0.75, ge=0.0)
    bn_recalibration_batches: int = Field(default=32, ge=0)
    eval_every: int = Field(default=0, ge=0)
    checkpoint_every: int = Field(default=0, ge=0)
    log_every: int = Field(default=50, ge=1)
    seed: int = Field(ge=0)
    output_dir: str = Field(min_length=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    channels_last: bool = True
    compile: bool = False
    num_workers: int = Field(default=4, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ValueError(f"betas: {self.betas} must lie in [0, 1)")
        return self


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`key=value` pairs from the command line; values are read as YAML (`lr=0.25`)."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ParameterError(f"command line: expected key=value, got '{item}'")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def load_train_config(path: Path, overrides: list[str] | None = None) -> TrainConfig:
    """A run's configuration from YAML plus dotted overrides (`data.image_size=32`), validated so
    that a refusal names the file (or the command line) and the key."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"{path}: configuration file not found")
    values = read_yaml(path)
    sources: dict[str, str] = {}
    for dotted, value in parse_overrides(overrides or []).items():
        *parents, leaf = dotted.split(".")
        section = values
        for part in parents:
            child = section.setdefault(part, {})
            if not isinstance(child, dict):
                raise ParameterError(f"command line: '{dotted}': '{part}' is not a section")
            section = child
        section[leaf] = value
        sources[dotted] = "the command line"
    try:
        return TrainConfig(**values)
    except ValidationError as error:
        raise ParameterError(describe_errors(f"invalid training configuration {path}:", TrainConfig,
                                             error, sources, str(path))) from None


def describe_errors(header: str, schema: type[BaseModel], error: ValidationError,
                    sources: Mapping[str, str], default_source: str) -> str:
    """One line per problem naming its source and dotted key (nested sections included)."""
    lines = [header]
    for problem in error.errors():
        loc = [str(part) for part in problem["loc"]]
        key = ".".join(loc)
        where = next((sources[".".join(loc[:n])] for n in range(len(loc), 0, -1)
                      if ".".join(loc[:n]) in sources), default_source)
        value = problem.get("input")
        if problem["type"] == "extra_forbidden":
            known = sorted(_section_schema(schema, loc[:-1]).model_fields)
            close = difflib.get_close_matches(loc[-1], known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            lines.append(f"  {where}: unknown parameter '{key}'{hint} (known: {', '.join(known)})")
        elif problem["type"] == "missing":
            lines.append(f"  {where}: parameter '{key}' is missing")
        elif problem["type"] == "value_error":
            message = problem["msg"].removeprefix("Value error, ")
            if not key:  # a check across keys names its key first ("total_iterations: ...")
                where = sources.get(message.split(":", 1)[0], where)
            prefix = f"{key}." if key else ""
            lines.append(f"  {where}: parameter {prefix}{message}")
        else:
            hint = ""
            if isinstance(value, str) and _looks_numeric(value):
                hint = (" (YAML reads numbers like 1e-3 as strings: write 1.0e-3, "
                        "or drop the quotes)")
            lines.append(f"  {where}: parameter '{key}': {problem['msg']}, got {value!r}{hint}")
    return "\n".join(lines)


def _section_schema(schema: type[BaseModel], loc: list[str]) -> type[BaseModel]:
    """The model class of a nested section, following field annotations (lists by index)."""
    for part in loc:
        if part.isdigit():
            continue
        annotation = schema.model_fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        for candidate in candidates:
            inner = getattr(candidate, "__args__", (candidate,))
            found = next((c for c in inner if isinstance(c, type) and issubclass(c, BaseModel)),
                         None)
            if found is not None:
                schema = found
                break
    return schema


# ---------------------------------------------------------------------------------------------
# Notebook 03: the time-concat experiment
# ---------------------------------------------------------------------------------------------

class ProbeTask(_Strict):
    """A dataset the representations are probed on, and its role in the paper's comparison:
    either its own `data` (with `num_classes`), or, in the synthetic world, the pretraining
    world with `components` (lists of cues) as its mixture."""

    name: str = Field(min_length=1)
    role: Literal["in-distribution", "in-mixture", "unseen"]
    data: DataConfig | None = None
    num_classes: int | None = Field(default=None, ge=2)
    components: list[list[str]] | None = None
    #: also train one model directly on this task, with cat1's budget
    direct: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> ProbeTask:
        if (self.data is None) == (self.components is None):
            raise ValueError(f"tasks: {self.name} needs exactly one of data or components")
        if self.data is not None and self.num_classes is None:
            raise ValueError(f"tasks: {self.name} has its own data and needs num_classes")
        for cues in self.components or []:
            ComponentConfig(weight=1.0, cues=cues)
        return self


class FastProbeParams(_Strict):
    lrs: list[float] = Field(min_length=1)
    weight_decays: list[float] = Field(min_length=1)
    epochs: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    heldout_fraction: float = Field(gt=0.0, lt=1.0)


class LaunchParams(_Strict):
    """How training runs start: in this process, as `parallel` worker processes, or torchrun."""

    kind: Literal["inline", "subprocess", "torchrun"]
    parallel: int = Field(default=1, ge=1)
    nproc_per_node: int = Field(default=1, ge=1)


class TimecatParams(NotebookParams):
    """Notebook 03: cat1 vs catN at a fixed budget, from pretraining (`mode: train`) or from
    existing checkpoints (`mode: checkpoints`), probed on every task."""

    mode: Literal["train", "checkpoints"]
    #: runs, logs and feature caches; relative paths are inside output_dir
    run_root: str = Field(min_length=1)
    base_seed: int = Field(ge=0)
    replicates: int = Field(ge=1)
    seed_sets: list[list[int]] | None = None
    ns: list[int] = Field(min_length=1)
    total_iterations: int | None = Field(default=None, ge=1)
    #: iterations per model for each n of `ns` (instead of total_iterations / n)
    iterations: list[int] | None = None
    train: dict[str, Any] | None = None
    #: for each n of `ns`, one list of n checkpoint files per replicate
    checkpoints: list[list[list[str]]] | None = None
    tasks: list[ProbeTask] = Field(min_length=1)
    probe: FastProbeParams
    #: at most this many training images per task for the probes (the first ones)
    probe_train_limit: int = Field(ge=16)
    probe_rule: Literal["paper", "heldout"]
    feature_batch_size: int = Field(ge=1)
    feature_dtype: Literal["float16", "float32"]
    device: str = Field(min_length=1)
    launch: LaunchParams
    paper_columns: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> TimecatParams:
        if sorted(set(self.ns)) != self.ns or self.ns[0] < 1:
            raise ValueError(f"ns: {self.ns} must be increasing positive model counts")
        names = [task.name for task in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"tasks: names must be unique, got {names}")
        if self.seed_sets is not None:
            if len(self.seed_sets) < self.replicates:
                raise ValueError(f"seed_sets: {len(self.seed_sets)} sets for "
                                 f"{self.replicates} replicates")
            for seeds in self.seed_sets:
                if len(set(seeds)) < max(self.ns):
                    raise ValueError(f"seed_sets: {seeds} has fewer than {max(self.ns)} "
                                     "distinct seeds")
        if self.mode == "train":
            self._check_training()
        else:
            self._check_checkpoints()
        return self

    def _check_training(self) -> None:
        if self.train is None:
            raise ValueError("train: mode train needs the base training configuration")
        base = self.base_train()
        if self.iterations is not None:
            if len(self.iterations) != len(self.ns) or min(self.iterations) < 1:
                raise ValueError(f"iterations: give one positive count per n of ns {self.ns}")
        elif self.total_iterations is None:
            raise ValueError("total_iterations: give it, or iterations per n")
        else:
            for n in self.ns:
                if self.total_iterations % n:
                    raise ValueError(f"total_iterations: {self.total_iterations} does not split "
                                     f"into {n} equal runs; give iterations per n explicitly")
        if base.data.kind != "synthetic" and any(t.components for t in self.tasks):
            raise ValueError("tasks: components describe the synthetic world, but pretraining "
                             f"reads {base.data.kind}")
        self._check_data({"train": [base.data],
                          "tasks": [self.task_data(task)[0] for task in self.tasks]})

    def _check_checkpoints(self) -> None:
        if not self.checkpoints:
            raise ValueError("checkpoints: mode checkpoints needs, per n, lists of files")
        if len(self.checkpoints) != len(self.ns):
            raise ValueError(f"checkpoints: give one entry per n of ns {self.ns}")
        missing = []
        for n, sets in zip(self.ns, self.checkpoints):
            if len(sets) < self.replicates or any(len(files) != n for files in sets):
                raise ValueError(f"checkpoints: n={n} needs {self.replicates} list(s) of {n} "
                                 "files")
            missing += [f for files in sets for f in files if not resolve(f).is_file()]
        if missing:
            raise ValueError(f"checkpoints: {len(missing)} file(s) not found: "
                             f"{', '.join(missing[:5])}")
        from kit.preflight import checkpoint_problems

        unusable = checkpoint_problems([f for sets in self.checkpoints for files in sets
                                        for f in files])
        if unusable:
            raise ValueError("checkpoints: " + "; ".join(unusable))
        if any(task.components for task in self.tasks):
            raise ValueError("tasks: components need the synthetic world of mode train")
        self._check_data({"tasks": [self.task_data(task)[0] for task in self.tasks]})

    def base_train(self) -> TrainConfig:
        """The shared training configuration; each run sets its seed, budget and folder."""
        assert self.train is not None
        try:
            return TrainConfig(**(self.train | {"seed": 0, "iterations": 1, "output_dir": "-"}))
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'train'}: {e['msg']}"
                                 for e in error.errors())
            raise ValueError(f"train: {problems}") from None

    def task_data(self, task: ProbeTask) -> tuple[DataConfig, int]:
        """A task's data and class count (a synthetic task is the pretraining world with the
        task's components, equally weighted)."""
        if task.data is not None:
            assert task.num_classes is not None
            return task.data, task.num_classes
        base = self.base_train()
        assert base.data.synthetic is not None and task.components is not None
        world = base.data.synthetic.model_copy(update={"components": [
            ComponentConfig(weight=1.0, cues=cues) for cues in task.components]})
        return base.data.model_copy(update={"synthetic": world}), base.num_classes

    def iterations_per_model(self, n: int) -> int:
        if self.iterations is not None:
            return self.iterations[self.ns.index(n)]
        assert self.total_iterations is not None
        return self.total_iterations // n

    def seeds(self, replicate: int) -> list[int]:
        """The seed set of a replicate: given, or base_seed + 1000 * replicate + 0, 1, 2, ..."""
        if self.seed_sets is not None:
            return self.seed_sets[replicate]
        return [self.base_seed + 1000 * replicate + i for i in range(max(self.ns))]

    @staticmethod
    def _check_data(configs: dict[str, list[DataConfig]]) -> None:
        """Every data root exists with its kind's layout (the first key with a problem)."""
        from kit.preflight import preflight

        for key, datas in configs.items():
            problems = [problem for data in datas for problem in preflight(data)]
            if problems:
                raise ValueError(f"{key}: " + "; ".join(dict.fromkeys(problems)))


SCHEMAS["03_time_concat"] = TimecatParams
