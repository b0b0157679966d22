"""The project's promises: README commands, CI, environment files, clean notebooks."""

from __future__ import annotations

import re
import tomllib

import nbformat
import yaml

from kit import params, runner
from kit.paths import REPO_ROOT


def readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    return re.findall(r"```(?:bash|sh)\n(.+?)\n```", text, flags=re.S)[:2]


def test_readme_gives_two_commands_and_ci_runs_the_second() -> None:
    main_job, tests = readme_commands()
    assert "python -m kit run --profile cpu" in main_job
    assert "pytest" in tests
    ci_lines = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci_lines


def test_environment_yml_agrees_with_pyproject() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    environment = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    dependencies = environment["dependencies"]
    python = next(d for d in dependencies if isinstance(d, str) and d.startswith("python="))
    assert project["requires-python"] == f"=={python.split('=')[1]}.*"
    pip_section = next(d["pip"] for d in dependencies if isinstance(d, dict))
    assert pip_section == ["-e .[dev]"]  # everything else comes from pyproject.toml
    conda_packages = {d.split("=")[0] for d in dependencies if isinstance(d, str)}
    assert conda_packages == {"python", "pip"}
    names = {re.split(r"[=<>\[ ]", d)[0] for d in project["dependencies"]}
    assert {"torch", "torchvision", "schedulefree", "jupyterlab", "papermill", "ipykernel",
            "ipywidgets", "altair", "vl-convert-python", "polars", "pyyaml", "tqdm"} <= names
    assert "torch==2.14.1" in project["dependencies"]
    assert "torchvision==0.29.1" in project["dependencies"]
    dev = {re.split(r"[=<>]", d)[0] for d in project["optional-dependencies"]["dev"]}
    assert {"pytest", "nbval"} <= dev


def test_notebooks_are_committed_clean_with_references_for_checked_cells() -> None:
    for path in runner.find_notebooks(None):
        notebook = nbformat.read(path, as_version=4)
        tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
        assert path.stem in params.SCHEMAS, f"{path.name}: no schema in kit.params.SCHEMAS"
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), path.name
        runner.with_references(notebook, path.stem)  # fills the checked cells in place
        for cell in code:
            if runner.is_checked(cell):
                assert cell.outputs, f"{path.name}: checked cell {cell.id} has no reference"


def test_parameters_cells_name_only_a_profile_and_it_resolves() -> None:
    """A notebook's parameters cell is an interactive session's choice of profile, never a set
    of defaults that could leak into a profile run."""
    for path in runner.find_notebooks(None):
        cell = next(c for c in nbformat.read(path, as_version=4).cells
                    if "parameters" in c.metadata.get("tags", []))
        namespace: dict = {"In": [cell.source]}
        exec(cell.source, namespace)
        assert params.parameter_names([cell.source]) == ["profile"], path.name
        assert params.from_notebook(path.stem, namespace).profile == "interactive"
