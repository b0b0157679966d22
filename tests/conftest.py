"""Notebook tests: nbval runs copies of notebooks/ with the small `ci` profile injected.

nbval does not read parameter files, so before collection every notebook is parameterized with
papermill (the same parameters `python -m kit run --profile ci` would use) into tests/_notebooks/,
with the reference outputs of its `# NBVAL_CHECK_OUTPUT` cells (tests/nbval_references/) put
back in, and pytest then collects the copies. Tests that read a notebook's results back use
`notebook_outputs`:
the files the nbval run wrote, or a fresh papermill run when nbval was deselected.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

from kit import runner

TESTS_DIR = Path(__file__).parent
NOTEBOOK_COPIES = TESTS_DIR / "_notebooks"
OUTPUT_ROOT = NOTEBOOK_COPIES / "outputs"
PROFILE = "ci"


def pytest_configure(config: pytest.Config) -> None:
    shutil.rmtree(NOTEBOOK_COPIES, ignore_errors=True)
    NOTEBOOK_COPIES.mkdir()
    for planned in runner.plan(None, PROFILE, output_root=OUTPUT_ROOT):
        notebook = load_notebook_node(str(planned.notebook))  # adds the metadata papermill needs
        notebook = runner.with_references(parameterize_notebook(notebook, planned.parameters),
                                          planned.notebook.stem)
        nbformat.write(notebook, NOTEBOOK_COPIES / planned.notebook.name)


@pytest.fixture(scope="session")
def notebook_outputs() -> Callable[[str, str], Path]:
    """notebook_outputs(stem, result_file) -> the folder holding that notebook's results."""

    def get(stem: str, result_file: str) -> Path:
        folder = OUTPUT_ROOT / PROFILE
        if not (folder / result_file).exists():
            (planned,) = runner.plan([stem], PROFILE, output_root=OUTPUT_ROOT)
            runner.execute(planned)
        assert (folder / result_file).exists(), f"{stem} did not write {result_file}"
        return folder

    return get
