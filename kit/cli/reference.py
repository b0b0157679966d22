"""The parameter reference, generated from the typed settings so that it cannot drift from them.

`python -m kit reference` writes `docs/reference/parameters.md`: per settings class (each
notebook's schema as its experiment registers it, a training run's `TrainSettings`, a launch's
`LaunchSettings`) one table of every field under the dotted name that `--set` takes, with its
type, default, constraints and description. A description is the field's
`Field(description=...)` or else the `#:` comment lines just above it in the class's source;
a field holding a settings class without either takes that class's docstring. Nested settings
are expanded in place (`train.data.image_size`; `[]` marks a list: `variants[].kind`).
`python -m kit reference --check` exits 1 when the committed file differs. No torch import.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from kit.experiments import notebooks  # noqa: F401 (registers each notebook's schema)
from kit.files import files
from kit.files.paths import REPO_ROOT, shown
from kit.params import params, strict_yaml
from kit.params.sections import ByKind

#: where the reference lives in the MkDocs site (docs/ is the site's source)
REFERENCE_FILE = REPO_ROOT / "docs" / "reference" / "parameters.md"
#: the command that regenerates it, named in every message about a stale copy
REGENERATE = "python -m kit reference"
#: the training run's settings (`python -m kit.train --config run.yaml`)
TRAIN_SETTINGS = "kit.train.settings:TrainSettings"
#: found among notebook 03's fields rather than imported by module path, so that splitting the
#: launch package does not break the reference
LAUNCH_SETTINGS = "LaunchSettings"


@dataclass(frozen=True)
class Row:
    """One field of a settings table."""

    name: str
    type: str
    default: str
    constraints: str
    description: str


def load(spec: str) -> type[BaseModel]:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def sections() -> list[tuple[str, str, type[BaseModel]]]:
    """(heading, how the values are given, settings class), in the reference's order."""
    found: list[tuple[str, str, type[BaseModel]]] = []
    for stem, schema in sorted(params.SCHEMAS.items()):
        found.append(
            (
                f"Notebook {stem}",
                f"`parameters/<profile>/{stem}.yaml` (and the "
                f"profile's `profile.yaml`), `python -m kit run {stem[:2]} -f FILE "
                "--set key=value`",
                schema,
            )
        )
    train = load(TRAIN_SETTINGS)
    found.append(
        (
            "Training run",
            "`python -m kit.train --config run.yaml [key=value ...]`; "
            "notebook 03's `train` section holds the same fields but `iterations`, "
            "`seed` and `output_dir`",
            train,
        )
    )
    launch = next(
        (
            cls
            for _, _, schema in found
            for cls in nested_classes(schema)
            if cls.__name__ == LAUNCH_SETTINGS
        ),
        None,
    )
    if launch is None:
        raise RuntimeError(f"no {LAUNCH_SETTINGS} among the fields of {list(params.SCHEMAS)}")
    found.append(
        (
            "Launch",
            "notebook 03's `launch` section; `python -m kit launch ... --launch key=value`",
            launch,
        )
    )
    return found


def nested_classes(
    cls: type[BaseModel], seen: set[type] | None = None
) -> Iterator[type[BaseModel]]:
    """Every settings class reachable from `cls`'s fields, depth first."""
    seen = set() if seen is None else seen
    for field in cls.model_fields.values():
        for inner in models_in(field.annotation):
            if inner not in seen:
                seen.add(inner)
                yield inner
                yield from nested_classes(inner, seen)


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The settings classes an annotation holds (`X`, `X | None`, `list[X]`, `dict[str, X]`)."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in models_in(arg)]


def literal_choices(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is Literal:
        return list(typing.get_args(annotation))
    return [choice for arg in typing.get_args(annotation) for choice in literal_choices(arg)]


def type_name(annotation: Any) -> str:
    """An annotation as researchers read it: `int or None`, `list[float]`, `str` for a Literal
    of strings (its choices go to the constraints)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " or ".join(dict.fromkeys(type(arg).__name__ for arg in args))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(map(type_name, args))}]"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def yaml_value(value: Any) -> str:
    """A default as it is written in a parameter file (YAML flow style)."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def default_of(field: Any) -> str:
    if field.default_factory is not None:
        return f"`{yaml_value(field.default_factory())}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{yaml_value(field.default)}`"


#: annotated_types constraints as text
BOUNDS = {
    annotated_types.Ge: (">=", "ge"),
    annotated_types.Gt: (">", "gt"),
    annotated_types.Le: ("<=", "le"),
    annotated_types.Lt: ("<", "lt"),
    annotated_types.MinLen: ("length >=", "min_length"),
    annotated_types.MaxLen: ("length <=", "max_length"),
}


def constraints_of(field: Any) -> str:
    parts = []
    for item in field.metadata:
        if type(item) in BOUNDS:
            text, attribute = BOUNDS[type(item)]
            parts.append(f"{text} {getattr(item, attribute)}")
        elif getattr(item, "pattern", None):
            parts.append(f"matches `{item.pattern}`")
    choices = literal_choices(field.annotation)
    if choices:
        listed = ", ".join(f"`{choice}`" for choice in choices)
        inside = typing.get_origin(field.annotation) is not Literal and not models_in(
            field.annotation
        )
        parts.append(f"{'each ' if inside else ''}one of {listed}")
    return "; ".join(parts)


@cache
def comments(cls: type) -> dict[str, str]:
    """The `#:` comment lines just above each field assignment in a class's own source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    found = {}
    definition = ast.parse(source).body[0]
    assert isinstance(definition, ast.ClassDef), f"{cls} is not a class"
    for node in definition.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            index = node.lineno - 2
            while index >= 0 and lines[index].strip().startswith("#:"):
                above.insert(0, lines[index].strip()[2:].strip())
                index -= 1
            if above:
                found[node.target.id] = " ".join(above)
    return found


#: a parenthesised aside that points at notes outside the public sources (an internal notes
#: file, a tracker number); docstrings written for developers may carry one, the site must not
PRIVATE_ASIDE = re.compile(r"\s*\((?:[^()]*\bREFERENCE\.md\b|issues? #?\d+)[^()]*\)", re.I)


def public(text: str) -> str:
    """Developer text as the reference shows it: without asides that only the team can follow."""
    return PRIVATE_ASIDE.sub("", text)


def docstring(cls: type) -> str:
    """A class's docstring as one paragraph per blank-line-separated block."""
    return public(inspect.cleandoc(cls.__doc__ or ""))


def first_paragraph(cls: type) -> str:
    return " ".join(docstring(cls).split("\n\n")[0].split())


def description_of(cls: type[BaseModel], name: str, field: Any) -> str:
    if field.description:
        return public(" ".join(field.description.split()))
    for owner in cls.__mro__:
        if name in owner.__dict__.get("__annotations__", {}):
            comment = comments(owner).get(name)
            if comment:
                return public(comment)
            break
    nested = models_in(field.annotation)
    return first_paragraph(nested[0]) if nested else ""


def rows(cls: type[BaseModel], prefix: str = "", stack: tuple[type, ...] = ()) -> Iterator[Row]:
    """Every field of `cls`, nested settings expanded under dotted names."""
    for name, field in cls.model_fields.items():
        dotted = f"{prefix}{name}"
        yield Row(
            dotted,
            type_name(field.annotation),
            default_of(field),
            constraints_of(field),
            description_of(cls, name, field),
        )
        kinds = kinds_in(field.annotation)
        if kinds is not None:
            for kind, inner in kinds.classes().items():
                yield Row(f"{dotted}.{kind}", "section", "", "", first_paragraph(inner))
                yield from (
                    row
                    for row in rows(inner, f"{dotted}.{kind}.", (*stack, cls))
                    if row.name != f"{dotted}.{kind}.kind"  # the key gives it
                )
            continue
        for inner in models_in(field.annotation):
            if inner in stack:
                continue
            listed = typing.get_origin(_without_none(field.annotation)) in (list, dict)
            yield from rows(inner, f"{dotted}{'[]' if listed else ''}.", (*stack, cls))


def kinds_in(annotation: Any) -> ByKind | None:
    """The kinds of a field of sections keyed by kind (`dict[str, by_kind(...)]`), if it is
    one."""
    for arg in typing.get_args(annotation):
        for marker in getattr(arg, "__metadata__", ()):
            if isinstance(marker, ByKind):
                return marker
    return None


def _without_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kept = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(cls: type[BaseModel]) -> list[str]:
    lines = [
        "| field | type | default | constraints | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows(cls):
        lines.append(
            "| "
            + " | ".join(
                cell(text)
                for text in (
                    f"`{row.name}`",
                    f"`{row.type}`",
                    row.default,
                    row.constraints,
                    row.description,
                )
            )
            + " |"
        )
    return lines


def markdown() -> str:
    """The whole reference page."""
    out = [
        "<!-- Generated by `python -m kit reference` from the settings classes: do not edit by "
        "hand; `python -m kit reference --check` (and tests/test_docs.py) fail when it is stale. "
        "-->",
        "",
        "# Parameter reference",
        "",
        "Every setting the kit accepts, read from its typed settings classes. Names are the "
        "dotted keys that `--set` takes (`train.data.image_size=32`); `[]` marks an entry of a "
        "list (`variants[].kind`), which is set in a YAML file. Defaults are written as YAML; "
        "*required* means the value has no default and a profile or your own file must give "
        "it. Unknown keys, values of the wrong type and values outside the constraints are "
        "refused before anything runs, naming the file and the key. YAML reads `1e-3` as a "
        "string: write `1.0e-3`. Every number must be finite (`.nan` and `.inf` are refused). "
        "Parameter files and `--set` values are read as plain YAML: anchors and aliases "
        "(`&a`, `*a`), a key given twice in one mapping and tags (`!!python/...`, `!!binary`; "
        "`!!float` and the other plain tags are allowed) are refused, naming the file and the "
        f"line, as are a file (or value) over {strict_yaml.MAX_TEXT_BYTES:,} bytes and a list of "
        f"more than {strict_yaml.MAX_LIST_ITEMS:,} items. `profile` is no value to set: it is "
        "chosen by `--profile` (papermill: `-p profile`), and a file or `--set` naming another "
        "profile is refused. Some checks span several fields (a variant's kind and its "
        "`n`, a profile's data roots); they are given in the descriptions and in the "
        "[concepts](../concepts.md) page.",
        "",
    ]
    for heading, given, cls in sections():
        out += [f"## {heading}: `{cls.__name__}`", "", f"Given in: {given}.", ""]
        if cls.__doc__:
            out += [
                " ".join(paragraph.split()) + "\n" for paragraph in docstring(cls).split("\n\n")
            ]
        out += table(cls) + [""]
    return "\n".join(out)


def write(path: Path = REFERENCE_FILE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_text(path, markdown())
    return path


def stale(path: Path = REFERENCE_FILE) -> bool:
    """Whether the file differs from what the settings classes generate now."""
    return not path.is_file() or path.read_text() != markdown()


def command(check: bool, path: Path = REFERENCE_FILE) -> int:
    """`python -m kit reference [--check]`: write the reference, or only say whether it is
    stale (status 1, naming the file and the command that regenerates it)."""
    name = shown(path)
    if not check:
        write(path)
        print(f"wrote {name}")
        return 0
    if stale(path):
        print(
            f"{name} differs from the settings classes; regenerate it with: {REGENERATE}",
            file=sys.stderr,
        )
        return 1
    print(f"{name} is up to date")
    return 0
