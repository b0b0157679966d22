"""The reference outputs a notebook's checked cells are compared with (those tagged
`nbval-check-output` in their metadata, nbval's tag for its `# NBVAL_CHECK_OUTPUT` comment, which
a reader would see in the code): stored from an executed notebook by `python -m kit store-checks`,
one JSON file per notebook under tests/nbval_references/, and compared, as nbval compares them,
with the copies the tests' ci main job executes (tests/checked_outputs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from kit.files.files import write_text
from kit.files.paths import REPO_ROOT

CHECK_TAG = "nbval-check-output"
#: reference outputs of the checked cells, one JSON file per notebook, kept out of notebooks/
REFERENCES_DIR = REPO_ROOT / "tests" / "nbval_references"


def is_checked(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and CHECK_TAG in cell.metadata.get("tags", [])


def store_references(executed: Path, references_dir: Path = REFERENCES_DIR) -> Path:
    """Keep the outputs of an executed notebook's cells tagged `nbval-check-output` as the
    references the tests compare with (by cell id); the committed notebooks carry no outputs."""
    references = {
        cell["id"]: {"execution_count": cell.execution_count, "outputs": cell.outputs}
        for cell in nbformat.read(executed, as_version=4).cells
        if is_checked(cell)
    }
    references_dir.mkdir(parents=True, exist_ok=True)
    path = references_dir / f"{executed.stem}.json"
    write_text(path, json.dumps(references, indent=1, sort_keys=True) + "\n")
    return path
