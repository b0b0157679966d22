"""The notebooks a command names and their validated parameters: what `kit check` and `kit run`
find before anything else.

Free of the notebook tools (papermill, nbformat: seconds to import), so that `python -m kit`
refuses a bad value, such as a count above its bound (kit.params.bounds), as soon as it has read
the parameters, before it imports them or plans any work.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kit.experiments.notebooks  # noqa: F401 (registers each notebook's schema)
from kit.files.paths import NOTEBOOKS_DIR, PARAMETERS_DIR
from kit.params import param_errors, params

Loaded = tuple[Path, params.NotebookSettings, params.Sources]


def find_notebooks(names: list[str] | None, notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """Notebooks by file name, stem or unique prefix ('01'); all of them when names is empty."""
    available = sorted(notebooks_dir.glob("[0-9]*.ipynb"))
    if not names:
        return available
    chosen = []
    for name in names:
        matches = [
            p
            for p in available
            if p.name == name or p.stem == name or p.stem.startswith(Path(name).stem)
        ]
        if len(matches) != 1:
            found = ", ".join(p.name for p in matches) or "none"
            raise params.ParameterError(
                f"notebook '{name}': expected one match in {notebooks_dir}, found {found}"
            )
        chosen.append(matches[0])
    return chosen


def shared_overrides(
    notebooks: list[Path], overrides: Mapping[str, Any]
) -> dict[str, Mapping[str, Any]]:
    """Per notebook, the command line's overrides whose top-level key its schema has; a key no
    notebook takes is refused."""
    takes = {n.stem: set(params.schema_for(n.stem).model_fields) for n in notebooks}
    known = set().union(*takes.values())
    unknown = [key for key in overrides if key not in known]
    if unknown:
        raise params.ParameterError(
            "\n".join(
                f"the command line: no notebook takes parameter '{key}'"
                f"{param_errors.did_you_mean(key, known)}"
                for key in unknown
            )
        )
    return {
        stem: {key: value for key, value in overrides.items() if key in keys}
        for stem, keys in takes.items()
    }


def load_all(
    names: list[str] | None,
    profile: str,
    files: list[Path] | None = None,
    overrides: Mapping[str, Any] | None = None,
    notebooks_dir: Path = NOTEBOOKS_DIR,
    parameters_dir: Path = PARAMETERS_DIR,
    output_dir: str | None = None,
) -> tuple[list[Loaded], list[str]]:
    """Every named notebook (all without names) with its parameters layered and validated, and
    the problems of those that failed; ParameterError when a name or an override matches no
    notebook. Without names, each notebook takes the overrides its schema has."""
    notebooks = find_notebooks(names, notebooks_dir)
    shared = (
        shared_overrides(notebooks, overrides)
        if overrides and not names
        else dict.fromkeys((n.stem for n in notebooks), overrides)
    )
    loaded, problems = [], []
    for notebook in notebooks:
        try:
            validated, sources = params.load(
                notebook.stem, profile, files, shared[notebook.stem], parameters_dir, output_dir
            )
        except params.ParameterError as error:
            problems.append(str(error))
            continue
        loaded.append((notebook, validated, sources))
    return loaded, problems


def refuse_invalid(
    names: list[str] | None,
    profile: str,
    files: list[Path] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[Loaded]:
    """Every notebook with its validated parameters; ParameterError naming every notebook's
    invalid values (each problem once)."""
    loaded, problems = load_all(names, profile, files, overrides)
    if problems:
        raise params.ParameterError("\n".join(dict.fromkeys(problems)))
    return loaded
