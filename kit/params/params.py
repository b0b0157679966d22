"""Layered, validated parameters: one engine for notebooks and training runs.

A notebook's parameters come from files, later winning, deep-merged section by section:
`parameters/base.yaml`, then its profile (`parameters/<profile>/profile.yaml` and
`parameters/<profile>/<notebook>.yaml`, after the profile it `extends:`, if any), then the user's
own files (`python -m kit run -f FILE`), then `--set a.b.c=value`. Inside a notebook, values that
papermill injects (`-p`, `-f`) are one more layer on top of the profile they name
(kit.params.kernel_params reads them in the running kernel).

Every value remembers the file (or command line) it came from, so a refusal names the file and the
dotted key before any compute starts. Schemas are strict: YAML 1.1 reads `1e-3` as a string, and a
string is never silently taken for a number. This module does not import torch, so checking
parameters (`python -m kit check`) is fast.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kit.files.paths import PARAMETERS_DIR
from kit.params import bounds, strict_yaml
from kit.params.param_errors import describe_errors, located

#: a profile file may name the profile it builds on
EXTENDS = "extends"
#: what a profile is for, and whether its numbers are a smoke test's (said by every notebook it
#: runs): keys of the profile's own profile.yaml, not parameters, and not inherited
PURPOSE, SMOKE_TEST = "purpose", "smoke_test"
PROFILE_KEYS = (EXTENDS, PURPOSE, SMOKE_TEST)


class ParameterError(ValueError):
    """Bad parameters, with the file and key that hold them."""


class Strict(BaseModel):
    """No unknown keys, no string taken for a number, no NaN or infinity where a number is
    meant, no mutation after validation."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


#: the formats a chart can be saved in
ChartFormat = Literal["png", "svg", "html"]


class NotebookSettings(Strict):
    """Keys every notebook takes (notebook 02 takes only these)."""

    profile: str = Field(min_length=1)
    output_dir: bounds.PathText
    chart_formats: list[ChartFormat] = Field(
        default_factory=lambda: list(get_args(ChartFormat)), max_length=len(get_args(ChartFormat))
    )

    def input_problems(self) -> list[str]:
        """What the values name outside themselves and cannot be read as they should (data
        roots, checkpoint files, optional packages), each naming its key first (`variants:
        ...`). Run by `check_inputs` before compute, never by validation, which checks values
        only and touches no file."""
        return []

    def input_notes(self) -> list[str]:
        """What `kit check` says of what the values name once they pass `input_problems`
        (which layout of a release it found, which file each entry reads): lines to print."""
        return []

    def live_views(self) -> list[str]:
        """Commands following the notebook's training runs live (kit.train.trackers)."""
        return []


Sources = dict[str, str]  # dotted key -> the file or command line that set it
#: `<output_dir>/<notebook><RECORD_SUFFIX>`: the parameters `python -m kit run` recorded for the
#: notebook's results in that folder, written when the notebook succeeded (kit.cli.runner)
RECORD_SUFFIX = ".parameters.yaml"


#: notebook (file stem) -> its parameter schema, registered by its experiment (register_schema)
SCHEMAS: dict[str, type[NotebookSettings]] = {}


def register_schema(notebook: str, schema: type[NotebookSettings]) -> None:
    """Make `schema` the parameters of `notebook` (its file stem); called by the module that
    defines the schema, when it is imported. A notebook given a second, different schema is
    refused."""
    if SCHEMAS.setdefault(notebook, schema) is not schema:
        raise ValueError(f"notebook '{notebook}' has two parameter schemas")


def schema_for(notebook: str) -> type[NotebookSettings]:
    try:
        return SCHEMAS[notebook]
    except KeyError:
        raise ParameterError(
            f"notebook '{notebook}' has no registered parameter schema (known: "
            f"{', '.join(sorted(SCHEMAS))}): import the experiment that defines its schema, "
            "which registers it (kit.params.params.register_schema)"
        ) from None


def read_yaml(path: Path) -> dict[str, Any]:
    """A parameter file as a mapping; an empty file is an empty mapping. Anchors, aliases,
    duplicate keys, tags and oversized files or lists are refused (kit.params.strict_yaml)."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"{path}: parameter file not found")
    try:
        content = strict_yaml.load_file(path)
    except (strict_yaml.StrictYamlError, UnicodeDecodeError) as error:
        raise ParameterError(f"{path}: {error}") from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ParameterError(
            f"{path}: expected a mapping of parameter names to values, got {type(content).__name__}"
        )
    return content


def merge(
    values: dict[str, Any],
    sources: Sources,
    layer: Mapping[str, Any],
    source: str,
    prefix: str = "",
) -> None:
    """Deep-merge `layer` into `values` in place, dict by dict (lists and scalars are replaced
    whole), recording `source` for every key it sets."""
    for key, value in layer.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if not isinstance(values.get(key), dict):
                values[key] = {}
            merge(values[key], sources, value, source, f"{dotted}.")
        else:
            values[key] = copy.deepcopy(value)
        sources[dotted] = source


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`a.b.c=value` pairs from the command line as one nested layer; values are read as YAML
    (`lr=0.25`, `ns=[1,2]`)."""
    nested: dict[str, Any] = {}
    for item in items:
        dotted, sep, text = item.partition("=")
        if not sep or not dotted.strip():
            raise ParameterError(f"command line: expected key=value, got '{item}'")
        *parents, leaf = dotted.strip().split(".")
        section = nested
        for part in parents:
            section = section.setdefault(part, {})
            if not isinstance(section, dict):
                raise ParameterError(
                    f"command line: '{dotted}': '{part}' is set as a value and as a section"
                )
        section[leaf] = override_value(dotted.strip(), text)
    return nested


def override_value(dotted: str, text: str) -> Any:
    """A `--set` value, read as strict YAML (kit.params.strict_yaml)."""
    try:
        return strict_yaml.loads(text)
    except strict_yaml.StrictYamlError as error:
        raise ParameterError(f"command line: '{dotted}={text[:60]}': {error}") from None


def profile_files(
    notebook: str, profile: str, parameters_dir: Path = PARAMETERS_DIR
) -> list[tuple[Path, dict[str, Any]]]:
    """The files of a profile (after those of the profile it extends), read, in layering order."""
    chain: list[str] = []
    name: str | None = profile
    while name is not None:
        folder = parameters_dir / name
        if not folder.is_dir():
            known = sorted(p.name for p in parameters_dir.iterdir() if p.is_dir())
            asked = f" (extended by profile '{chain[-1]}')" if chain else ""
            raise ParameterError(
                f"{folder}: unknown profile '{name}'{asked} (known: {', '.join(known)})"
            )
        if name in chain:
            raise ParameterError(
                f"{folder}: profiles extend each other in a loop: {' -> '.join(chain + [name])}"
            )
        chain.append(name)
        head = folder / "profile.yaml"
        name = read_yaml(head).get(EXTENDS) if head.exists() else None
    layers = []
    for name in reversed(chain):
        for path in (
            parameters_dir / name / "profile.yaml",
            parameters_dir / name / f"{notebook}.yaml",
        ):
            if path.exists():
                content = read_yaml(path)
                for key in PROFILE_KEYS:
                    content.pop(key, None)
                layers.append((path, content))
    return layers


def resolve_layers(
    notebook: str,
    profile: str,
    files: list[Path] | None = None,
    overrides: Mapping[str, Any] | None = None,
    parameters_dir: Path = PARAMETERS_DIR,
    output_dir: str | None = None,
) -> tuple[dict[str, Any], Sources]:
    """The merged (not yet validated) values of a notebook under a profile, and their sources;
    the output folder defaults to `output_dir`, else outputs/<profile>."""
    values: dict[str, Any] = {}
    sources: Sources = {}
    merge(
        values,
        sources,
        {"profile": profile, "output_dir": output_dir or f"outputs/{profile}"},
        f"the profile name '{profile}'",
    )
    base = parameters_dir / "base.yaml"
    layers = [(base, read_yaml(base))] if base.exists() else []
    layers += profile_files(notebook, profile, parameters_dir)
    layers += [(Path(f), read_yaml(Path(f))) for f in files or []]
    for path, content in layers:
        same_profile(content, profile, str(path))
        merge(values, sources, content, str(path))
    if overrides:
        same_profile(overrides, profile, "the command line")
        merge(values, sources, overrides, "the command line")
    return values, sources


def same_profile(layer: Mapping[str, Any], profile: str, source: str) -> None:
    """Refuse a layer that sets `profile` to another profile than the one chosen: the profile
    picks the files (and says whether the numbers are a smoke test's), so a value that only
    relabels the results is no parameter."""
    if "profile" in layer and layer["profile"] != profile:
        raise ParameterError(
            f"{source}: 'profile' is {layer['profile']!r} but the profile used "
            f"is '{profile}'; choose the profile with --profile (papermill: "
            "-p profile), not as a parameter"
        )


#: an environment variable in a value, as paths expand them (`${TIMECAT_DATA}`, `$HOME`)
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def unset_variables(value: Any, sources: Sources, key: str = "") -> list[str]:
    """One line per value naming an environment variable that is not set (a path would keep it
    as a literal folder name), with its file and dotted key."""
    if isinstance(value, Mapping):
        return [
            line
            for name, inner in value.items()
            for line in unset_variables(inner, sources, f"{key}{name}.")
        ]
    if isinstance(value, list):
        return [
            line
            for index, inner in enumerate(value)
            for line in unset_variables(inner, sources, f"{key}{index}.")
        ]
    if not isinstance(value, str):
        return []
    unset = [a or b for a, b in VARIABLE.findall(value) if (a or b) not in os.environ]
    if not unset:
        return []
    dotted = key.rstrip(".")
    parts = dotted.split(".")
    keys = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
    where = next((sources[key] for key in keys if key in sources), "the merged parameters")
    return [
        f"  {where}: parameter '{dotted}': environment variable {', '.join(unset)} is not "
        f"set ({value!r}); set it, or write the path out"
    ]


def validate(notebook: str, values: Mapping[str, Any], sources: Sources) -> NotebookSettings:
    """Validate merged values against the notebook's schema, naming file and key on error (an
    unset environment variable in a value first: checks of paths would see a literal `$X`)."""
    unset = unset_variables(values, sources)
    if unset:
        raise ParameterError("\n".join([f"invalid parameters for notebook {notebook}:", *unset]))
    schema = schema_for(notebook)
    try:
        return schema(**values)
    except ValidationError as error:
        raise ParameterError(
            describe_errors(
                f"invalid parameters for notebook {notebook}:",
                schema,
                error,
                sources,
                "the merged parameters",
            )
        ) from None


def check_inputs(notebook: str, settings: NotebookSettings, sources: Sources) -> None:
    """Refuse, naming file and key, parameters whose data, checkpoints or optional packages
    cannot be read (`NotebookSettings.input_problems`): called by `kit check`, `kit run` and a
    notebook's first cell before any compute, apart from validation, which touches no file."""
    problems = settings.input_problems()
    if problems:
        raise ParameterError(
            "\n".join(
                [
                    f"invalid parameters for notebook {notebook}:",
                    *located(problems, sources, "the merged parameters"),
                ]
            )
        )


def load(
    notebook: str,
    profile: str,
    files: list[Path] | None = None,
    overrides: Mapping[str, Any] | None = None,
    parameters_dir: Path = PARAMETERS_DIR,
    output_dir: str | None = None,
) -> tuple[NotebookSettings, Sources]:
    """Layer and validate a notebook's parameters for a profile. Returns them and their sources."""
    values, sources = resolve_layers(
        notebook, profile, files, overrides, parameters_dir, output_dir
    )
    return validate(notebook, values, sources), sources


def smoke_test_label(profile: str, parameters_dir: Path = PARAMETERS_DIR) -> str | None:
    """What a notebook run with a smoke-test profile says first (its profile.yaml sets
    `smoke_test: true`); None for a profile whose numbers are meant to be read."""
    head = parameters_dir / profile / "profile.yaml"
    about = read_yaml(head) if head.exists() else {}
    if about.get(SMOKE_TEST) is not True:
        return None
    purpose = about.get(PURPOSE) or "small settings that check the code runs"
    return (
        f"SMOKE TEST (profile {profile}: {purpose}): the numbers below only show that the "
        "code runs; they say nothing about the paper's claims. Run the cpu profile (or a "
        "GPU profile) for results."
    )
