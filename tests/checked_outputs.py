"""The checked cells of an executed notebook against their reference outputs, compared as nbval
compares them (its `--nbval-lax` mode, https://nbval.readthedocs.io/): only the cells tagged
`nbval-check-output`, their streams coalesced, every output field and MIME type outside nbval's
skipped ones compared in order after the sanitizing regexes of tests/nbval_sanitize.cfg.

The suite once ran notebooks 01 and 02 a second time under nbval for this check alone; it now
reads the copies the shared ci main job executed (tests/main_job.py), so each runs once.
"""

from __future__ import annotations

import copy
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import nbformat
from nbval.plugin import coalesce_streams, get_sanitize_patterns, transform_streams_for_comparison

from kit.cli import nbval_references

SANITIZE = Path(__file__).parent / "nbval_sanitize.cfg"
#: what nbval leaves out of a comparison (its defaults without nbdime): output metadata and
#: types, execution counts, tracebacks, widget model ids (random) and images
SKIPPED = frozenset(
    {
        "metadata",
        "traceback",
        "prompt_number",
        "output_type",
        "name",
        "execution_count",
        "application/vnd.jupyter.widget-view+json",
        "image/png",
        "image/jpeg",
    }
)


def _patterns() -> list[tuple[str, str]]:
    return list(get_sanitize_patterns(SANITIZE.read_text()))


def _sanitize(value: Any, patterns: list[tuple[str, str]]) -> Any:
    if not isinstance(value, str):
        return value
    for regex, replace in patterns:
        value = re.sub(regex, replace, value)
    return value


def _fields(outputs: list[Any], patterns: list[tuple[str, str]]) -> dict[str, list[Any]]:
    """Each compared field (MIME types flattened out of `data`) with its values in order."""
    found: dict[str, list[Any]] = defaultdict(list)
    coalesced = coalesce_streams(copy.deepcopy(outputs))  # it joins streams in place
    for output in transform_streams_for_comparison(coalesced):
        for key, value in output.items():
            if key in SKIPPED:
                continue
            items = value.items() if key == "data" else [(key, value)]
            for field, content in items:
                if field not in SKIPPED:
                    found[field].append(_sanitize(content, patterns))
    return found


def differences(
    executed: Path, references_dir: Path = nbval_references.REFERENCES_DIR
) -> list[str]:
    """What differs between `executed`'s checked cells and their stored references: a line per
    cell that differs, lacks a reference or lacks its cell; none when all agree."""
    notebook = nbformat.read(executed, as_version=4)
    stored = json.loads((references_dir / f"{executed.stem}.json").read_text())
    patterns, found = _patterns(), []
    checked = {cell["id"]: cell for cell in notebook.cells if nbval_references.is_checked(cell)}
    for cell_id in sorted(set(stored) - set(checked)):
        found.append(f"{executed.name}: the reference of cell {cell_id} has no checked cell")
    for cell_id, cell in checked.items():
        if cell_id not in stored:
            found.append(f"{executed.name}: checked cell {cell_id} has no reference")
            continue
        reference = [nbformat.from_dict(o) for o in stored[cell_id]["outputs"]]
        ran, wanted = _fields(cell.outputs, patterns), _fields(reference, patterns)
        if ran != wanted:
            fields = sorted(f for f in ran.keys() | wanted.keys() if ran.get(f) != wanted.get(f))
            found.append(
                f"{executed.name}: cell {cell_id} differs from its reference in {fields}:\n"
                + "\n".join(f"  {f}: {wanted.get(f)!r}\n  ran: {ran.get(f)!r}" for f in fields)
            )
    return found
