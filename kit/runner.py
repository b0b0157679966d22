"""Run notebooks headless with papermill, with validated, layered parameters.

The runner adds convenience, not magic: it computes the same parameters a user could pass to
`papermill -f`, refuses bad ones before any notebook starts, runs each notebook in the current
Python environment with `notebooks/` as working directory, and keeps the executed copy (partial
when a cell fails) under `outputs/<profile>/`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import papermill
import yaml
from papermill.exceptions import PapermillExecutionError

from kit import params
from kit.paths import NOTEBOOKS_DIR, PARAMETERS_DIR, REPO_ROOT, resolve

#: the kernel of the interpreter running the kit: jupyter_client maps "python3" to sys.executable
KERNEL_NAME = "python3"


class _InjectedNamesFilter(logging.Filter):
    """Papermill warns for every injected name the parameters cell does not assign; here the
    cell only names a profile and the notebook validates every injected name itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Passed unknown parameter")


logging.getLogger("papermill").addFilter(_InjectedNamesFilter())


@dataclass(frozen=True)
class PlannedRun:
    notebook: Path
    output: Path
    parameters: dict[str, Any]


def find_notebooks(names: list[str] | None, notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """Notebooks by file name, stem or unique prefix ('01'); all of them when names is empty."""
    available = sorted(notebooks_dir.glob("[0-9]*.ipynb"))
    if not names:
        return available
    chosen = []
    for name in names:
        matches = [p for p in available if p.name == name or p.stem == name
                   or p.stem.startswith(Path(name).stem)]
        if len(matches) != 1:
            found = ", ".join(p.name for p in matches) or "none"
            raise params.ParameterError(
                f"notebook '{name}': expected one match in {notebooks_dir}, found {found}")
        chosen.append(matches[0])
    return chosen


def plan(names: list[str] | None, profile: str, files: list[Path] | None = None,
         overrides: Mapping[str, Any] | None = None, notebooks_dir: Path = NOTEBOOKS_DIR,
         parameters_dir: Path = PARAMETERS_DIR, output_root: Path | None = None
         ) -> list[PlannedRun]:
    """Resolve and validate every notebook's parameters; raises ParameterError before any run.
    `output_root` moves the default output folder (`<output_root>/<profile>`)."""
    runs, problems = [], []
    output_dir = None if output_root is None else str(output_root / profile)
    for notebook in find_notebooks(names, notebooks_dir):
        try:
            validated, _ = params.load(notebook.stem, profile, files, overrides, parameters_dir,
                                       output_dir)
        except params.ParameterError as error:
            problems.append(str(error))
            continue
        runs.append(PlannedRun(notebook, resolve(validated.output_dir) / notebook.name,
                               validated.model_dump()))
    if problems:
        raise params.ParameterError("\n".join(problems))
    return runs


def execute(run: PlannedRun, notebooks_dir: Path = NOTEBOOKS_DIR) -> None:
    run.output.parent.mkdir(parents=True, exist_ok=True)
    run.output.with_suffix(".parameters.yaml").write_text(
        yaml.safe_dump(run.parameters, sort_keys=False))
    papermill.execute_notebook(
        str(run.notebook), str(run.output), parameters=run.parameters,
        kernel_name=KERNEL_NAME, cwd=str(notebooks_dir), progress_bar=False)


def run(names: list[str] | None, profile: str, files: list[Path] | None = None,
        overrides: Mapping[str, Any] | None = None, notebooks_dir: Path = NOTEBOOKS_DIR,
        parameters_dir: Path = PARAMETERS_DIR, output_root: Path | None = None) -> int:
    """Run notebooks in order; returns a process exit code (0 when every notebook succeeded)."""
    try:
        runs = plan(names, profile, files, overrides, notebooks_dir, parameters_dir, output_root)
    except params.ParameterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not runs:
        print(f"error: no notebooks to run in {notebooks_dir}", file=sys.stderr)
        return 2
    for index, planned in enumerate(runs, start=1):
        label = f"[{index}/{len(runs)}] {planned.notebook.name} (profile {profile})"
        print(f"{label} ...", flush=True)
        start = time.perf_counter()
        try:
            execute(planned, notebooks_dir)
        except PapermillExecutionError as error:
            print(f"{label} FAILED in cell {error.cell_index} (execution count "
                  f"{error.exec_count}): {error.ename}: {error.evalue}\n"
                  f"  partial output kept in {planned.output}", file=sys.stderr, flush=True)
            return 1
        print(f"{label} done in {time.perf_counter() - start:.1f} s -> {planned.output}",
              flush=True)
    return 0


CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
#: reference outputs of the checked cells, one JSON file per notebook, kept out of notebooks/
REFERENCES_DIR = REPO_ROOT / "tests" / "nbval_references"


def is_checked(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(CHECK_MARK)


def store_references(executed: Path, references_dir: Path = REFERENCES_DIR) -> Path:
    """Keep the outputs of an executed notebook's `# NBVAL_CHECK_OUTPUT` cells as the
    references nbval compares with (by cell id); the committed notebooks carry no outputs."""
    references = {cell["id"]: {"execution_count": cell.execution_count, "outputs": cell.outputs}
                  for cell in nbformat.read(executed, as_version=4).cells if is_checked(cell)}
    references_dir.mkdir(parents=True, exist_ok=True)
    path = references_dir / f"{executed.stem}.json"
    path.write_text(json.dumps(references, indent=1, sort_keys=True) + "\n")
    return path


def with_references(notebook: nbformat.NotebookNode, stem: str,
                    references_dir: Path = REFERENCES_DIR) -> nbformat.NotebookNode:
    """A notebook whose checked cells carry their stored reference outputs, for nbval (which
    skips the outputs of cells without an execution count)."""
    path = references_dir / f"{stem}.json"
    references = json.loads(path.read_text()) if path.exists() else {}
    for cell in notebook.cells:
        if is_checked(cell) and cell.get("id") in references:
            cell.execution_count = references[cell["id"]]["execution_count"]
            cell.outputs = [nbformat.from_dict(o) for o in references[cell["id"]]["outputs"]]
    return notebook
