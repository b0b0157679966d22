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

from kit.paths import PARAMETERS_DIR


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


#: notebook (file stem) -> its schema
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
            raise ValueError(f"cues: unknown cue(s) {', '.join(unknown)} (known: {', '.join(CUES)})")
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
            prefix = f"{key}." if key else ""
            lines.append(f"  {where}: parameter {prefix}{problem['msg'].removeprefix('Value error, ')}")
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
