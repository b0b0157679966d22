"""Typed notebook parameters, layered from YAML files and validated in one place.

Each notebook has a schema below. Values come, later winning, from the notebook's own
parameters cell, the runner (profile and output folder), `parameters/base.yaml`,
`parameters/<profile>/profile.yaml`, `parameters/<profile>/<notebook>.yaml` and the command line.
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


class NotebookParams(BaseModel):
    """Keys every notebook takes."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

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
        raise ParameterError(_explain(notebook, schema, error, sources)) from None


def _explain(notebook: str, schema: type[NotebookParams], error: ValidationError,
             sources: Mapping[str, str]) -> str:
    lines = [f"invalid parameters for notebook {notebook}:"]
    known = sorted(schema.model_fields)
    for problem in error.errors():
        key = str(problem["loc"][0]) if problem["loc"] else None
        where = sources.get(key, "the merged parameters") if key else "the merged parameters"
        value = problem.get("input")
        if problem["type"] == "extra_forbidden":
            close = difflib.get_close_matches(key or "", known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            lines.append(f"  {where}: unknown parameter '{key}'{hint} "
                         f"(known: {', '.join(known)})")
        elif problem["type"] == "missing":
            lines.append(f"  {where}: parameter '{key}' is missing")
        elif key is None:
            lines.append(f"  {problem['msg'].removeprefix('Value error, ')}")
        else:
            hint = ""
            if isinstance(value, str) and _looks_numeric(value):
                hint = (" (YAML reads numbers like 1e-3 as strings: write 1.0e-3, "
                        "or drop the quotes)")
            lines.append(f"  {where}: parameter '{key}': {problem['msg']}, got {value!r}{hint}")
    return "\n".join(lines)


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

