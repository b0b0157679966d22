"""Notebook tests: nbval runs copies of notebooks/ with the small `ci` profile injected.

nbval does not read parameter files, so before collection every notebook is parameterized with
papermill (the same parameters `python -m kit run --profile ci` would use) into tests/_notebooks/,
with the reference outputs of its `# NBVAL_CHECK_OUTPUT` cells (tests/nbval_references/) put
back in, and pytest then collects the copies. Outputs a notebook carries (saved from Lab) are
dropped from the copies first, so they never stand in for references; test_project says how to
strip them from the notebook itself. Tests that read a notebook's results back use
`notebook_outputs`:
the files the nbval run wrote, or a fresh papermill run when nbval was deselected.
"""

from __future__ import annotations

import html
import re
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
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
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


@pytest.fixture(scope="session")
def chart_texts() -> Callable[[Path], list[str]]:
    """chart_texts(svg) -> every piece of text a saved chart shows (legends, titles, labels)."""

    def read(path: Path) -> list[str]:
        return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>",
                                                      path.read_text())]

    return read
