"""Messages for refused parameters: one line per problem naming the file (or command line) that
set the key and its dotted name, with a did-you-mean for an unknown one."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ValidationError

from kit.params.sections import ByKind


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def did_you_mean(name: str, known: Iterable[str], section: str = "") -> str:
    """`; did you mean 'x'?` naming the known name closest to `name`, or nothing; a name inside
    a section is given dotted (`section` 'train.' gives 'train.lr')."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean '{section}{close[0]}'?" if close else ""


def source_of(loc: list[str], sources: Mapping[str, str], default_source: str) -> str:
    """The file (or command line) that set a key, or the nearest section above it."""
    return next(
        (
            sources[".".join(loc[:n])]
            for n in range(len(loc), 0, -1)
            if ".".join(loc[:n]) in sources
        ),
        default_source,
    )


def located(problems: list[str], sources: Mapping[str, str], default_source: str) -> list[str]:
    """Problems that name their key first (`train.tensorboard: ...`), one line each naming the
    file that set the key, as `describe_errors` names a refused value."""
    return [
        f"  {source_of(problem.split(':', 1)[0].split('.'), sources, default_source)}: "
        f"parameter {problem}"
        for problem in problems
    ]


def describe_errors(
    header: str,
    schema: type[BaseModel],
    error: ValidationError,
    sources: Mapping[str, str],
    default_source: str,
) -> str:
    """One line per problem naming its source and dotted key (nested sections included)."""
    lines = [header]
    for problem in error.errors():
        loc = [str(part) for part in problem["loc"]]
        key = ".".join(loc)
        where = source_of(loc, sources, default_source)
        value = problem.get("input")
        if problem["type"] == "extra_forbidden":
            known = sorted(_section_schema(schema, loc[:-1]).model_fields)
            hint = did_you_mean(loc[-1], known, key.removesuffix(loc[-1]))
            lines.append(f"  {where}: unknown parameter '{key}'{hint} (known: {', '.join(known)})")
        elif problem["type"] == "missing":
            lines.append(f"  {where}: parameter '{key}' is missing")
        elif problem["type"] == "value_error":
            message = problem["msg"].removeprefix("Value error, ")
            if not key:  # a check across keys names its key first ("total_iterations: ...")
                where = sources.get(message.split(":", 1)[0], where)
            if key and not re.match(r"^[\w.]+: ", message):  # a field's own check
                lines.append(f"  {where}: parameter '{key}': {message}")
            else:  # a check across keys names its key first
                prefix = f"{key}." if key else ""
                lines.append(f"  {where}: parameter {prefix}{message}")
        else:
            hint = ""
            if isinstance(value, str) and _looks_numeric(value):
                hint = (
                    " (YAML reads numbers like 1e-3 as strings: write 1.0e-3, or drop the quotes)"
                )
            lines.append(f"  {where}: parameter '{key}': {problem['msg']}, got {value!r}{hint}")
    return "\n".join(lines)


def _section_schema(schema: type[BaseModel], loc: list[str]) -> type[BaseModel]:
    """The model class of a nested section, following field annotations (lists by index, a
    section of several kinds by its kind)."""
    kinds: Mapping[str, type[BaseModel]] = {}
    for part in loc:
        if part in kinds:
            schema, kinds = kinds[part], {}
            continue
        if part.isdigit() or part not in schema.model_fields:
            continue
        annotation = schema.model_fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        kinds = next(
            (
                marker.classes()
                for candidate in candidates
                for marker in getattr(candidate, "__metadata__", ())
                if isinstance(marker, ByKind)
            ),
            {},
        )
        for candidate in candidates:
            inner = getattr(candidate, "__args__", (candidate,))
            found = next(
                (c for c in inner if isinstance(c, type) and issubclass(c, BaseModel)), None
            )
            if found is not None:
                schema = found
                break
    return schema
