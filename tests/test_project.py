"""The project's promises: README commands, CI, environment files, clean notebooks."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import nbformat
import pytest
import scheduling
import yaml
from pydantic import BaseModel

from kit.cli import lab, nbval_references, rooms, runner
from kit.files.paths import NOTEBOOKS_DIR, REPO_ROOT, importable_environment
from kit.params import kernel_params, params
from kit.params.parameters_cell import Section
from kit.report import tables


def readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    return re.findall(r"```(?:bash|sh)\n(.+?)\n```", text, flags=re.S)[:2]


def test_readme_gives_two_commands_and_ci_runs_the_second() -> None:
    main_job, tests = readme_commands()
    assert "python -m kit run --profile cpu" in main_job
    assert "pytest" in tests
    install = "uv sync -q --locked --inexact --extra dev && "  # from uv.lock (tests/test_lock.py)
    assert install in main_job and install in tests
    ci_lines = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci_lines


def test_environment_yml_agrees_with_pyproject() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    environment = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    dependencies = environment["dependencies"]
    python = next(d for d in dependencies if isinstance(d, str) and d.startswith("python="))
    assert project["requires-python"] == f"=={python.split('=')[1]}.*"
    pip_section = next(d["pip"] for d in dependencies if isinstance(d, dict))
    # the kit and its locked versions: uv.lock's export, which itself holds "-e ."
    assert pip_section == ["-r requirements-lock.txt"]
    assert "\n-e .\n" in (REPO_ROOT / "requirements-lock.txt").read_text()
    conda_packages = {d.split("=")[0] for d in dependencies if isinstance(d, str)}
    assert conda_packages == {"python", "pip"}
    names = {re.split(r"[=<>\[ ]", d)[0] for d in project["dependencies"]}
    assert {
        "torch",
        "torchvision",
        "schedulefree",
        "jupyterlab",
        "papermill",
        "ipykernel",
        "ipywidgets",
        "altair",
        "vl-convert-python",
        "polars",
        "pyyaml",
        "tqdm",
    } <= names
    assert "torch==2.14.1" in project["dependencies"]
    assert "torchvision==0.29.1" in project["dependencies"]
    dev = {re.split(r"[=<>]", d)[0] for d in project["optional-dependencies"]["dev"]}
    assert {"pytest", "nbval"} <= dev


#: strips outputs and execution counts but keeps cell ids, which tests/nbval_references use
STRIP = f'.venv/bin/nbstripout --keep-id --extra-keys "{" ".join(lab.KIT_KEYS)}"'
#: the README's once-per-clone setup: git strips notebooks on commit, keeping cell ids
GIT_FILTER_SETUP = (
    ".venv/bin/nbstripout --install && git config filter.nbstripout.clean "
    '"$PWD/.venv/bin/python -m nbstripout --keep-id '
    f"--extra-keys '{' '.join(lab.KIT_KEYS)}'\""
)


def git(*args: str) -> str:
    """A git query's output; empty outside a git checkout or when the answer is unset."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def stripped_on_commit(path: Path) -> bool:
    """Whether git's nbstripout filter strips this notebook on commit, keeping cell ids."""
    if not path.is_relative_to(REPO_ROOT):
        return False
    relative = path.relative_to(REPO_ROOT).as_posix()
    if not git("check-attr", "filter", "--", relative).endswith(": nbstripout"):
        return False
    clean = git("config", "--get", "filter.nbstripout.clean")
    if clean and "--keep-id" not in clean:
        pytest.fail(
            f"git's nbstripout filter ({clean!r}) renumbers cell ids on commit, which "
            "detaches the checked cells from tests/nbval_references/. Set it up as the "
            f"README says:\n  {GIT_FILTER_SETUP}",
            pytrace=False,
        )
    return bool(clean)


def unstripped(path: Path) -> str | None:
    """What to do about a notebook that would be committed with outputs; None when clean."""
    notebook = nbformat.read(path, as_version=4)
    dirty = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    if not dirty or stripped_on_commit(path):
        return None
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    return (
        f"{shown} carries outputs or execution counts in {len(dirty)} code cell(s) "
        f"(cells {dirty}), as after saving it in JupyterLab. Committed notebooks must be "
        f"clean. Strip them (outputs only, cell ids kept):\n  {STRIP} {shown}\n"
        "or let git strip every notebook on commit (once per clone, see the README):\n"
        f"  {GIT_FILTER_SETUP}"
    )


def test_committed_notebooks_carry_no_outputs() -> None:
    """Notebooks are committed without outputs (results live in outputs/<profile>/)."""
    problems = [m for m in map(unstripped, runner.find_notebooks(None)) if m]
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def test_a_notebook_saved_with_outputs_is_told_how_to_strip_them(tmp_path: Path) -> None:
    path = tmp_path / "02_surveyed_evidence.ipynb"
    notebook = nbformat.read(NOTEBOOKS_DIR / path.name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    code[1].execution_count = 2
    code[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="saved in Lab\n")]
    code[1].metadata["jupyter"] = {"source_hidden": True}  # its input collapsed in Lab
    nbformat.write(notebook, path)
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"{STRIP} notebooks/*.ipynb" in readme and GIT_FILTER_SETUP in readme
    message = unstripped(path)
    assert message is not None and f"{STRIP} {path}" in message and "cells [" in message
    command = STRIP.replace(".venv/bin/", str(Path(sys.executable).parent) + "/")
    subprocess.run([*shlex.split(command), str(path)], check=True)
    assert unstripped(path) is None
    stripped = nbformat.read(path, as_version=4)
    assert [c.id for c in stripped.cells] == [c.id for c in notebook.cells]  # references hold
    assert stripped.cells[1].metadata.get("tags") == ["parameters"]
    assert "jupyter" not in stripped.cells[code_index(notebook, code[1])].metadata


def code_index(notebook: nbformat.NotebookNode, cell: nbformat.NotebookNode) -> int:
    return next(i for i, c in enumerate(notebook.cells) if c.id == cell.id)


def test_notebooks_have_parameters_and_references_for_checked_cells() -> None:
    for path in runner.find_notebooks(None):
        notebook = nbformat.read(path, as_version=4)
        tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
        assert path.stem in params.SCHEMAS, f"{path.name}: no registered parameter schema"
        stored = nbval_references.REFERENCES_DIR / f"{path.stem}.json"
        references = json.loads(stored.read_text()) if stored.exists() else {}
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        for cell in code:
            if nbval_references.is_checked(cell):
                reference = references.get(cell.id, {}).get("outputs")
                assert reference, f"{path.name}: checked cell {cell.id} has no reference"
            # a testing marker is a tag, never a comment a reader sees in the code
            assert "NBVAL" not in cell.source, f"{path.name}: cell {cell.id} shows an nbval marker"


def is_section(annotation: object) -> bool:
    """Whether a schema's field is a section (a settings model or a mapping, even optional)."""
    union = isinstance(annotation, types.UnionType)  # `X | None`; a list of models is no section
    candidates = [*annotation.__args__] if union else [annotation]
    return any(
        (isinstance(c, type) and issubclass(c, BaseModel)) or getattr(c, "__origin__", c) is dict
        for c in candidates
    )


def test_parameters_cells_set_only_a_profile_and_it_resolves() -> None:
    """A notebook's parameters cell is an interactive session's choice of profile, never a set
    of defaults that could leak into a profile run: every other name it declares is None, or,
    exactly where the schema takes a section, an empty Section (papermill's `-p train.lr 0.1`
    sets a key on it)."""
    for path in runner.find_notebooks(None):
        cell = next(
            c
            for c in nbformat.read(path, as_version=4).cells
            if "parameters" in c.metadata.get("tags", [])
        )
        namespace: dict = {"In": [cell.source]}
        exec(cell.source, namespace)
        names = kernel_params.parameter_names([cell.source])
        fields = params.schema_for(path.stem).model_fields
        sections = [n for n in names if is_section(fields[n].annotation)]
        assert names[0] == "profile", path.name
        assert [n for n in names if isinstance(namespace[n], Section)] == sections
        assert not any(namespace[n].as_dict() for n in sections), path.name
        assert [n for n in names if namespace[n] is not None and n not in sections] == [
            "profile"
        ], path.name
        assert kernel_params.from_notebook(path.stem, namespace).profile == "interactive"
        # an executed copy shows this line above papermill's cell setting the run's profile
        said = cell.source.split("profile = ", 1)[1].split("\n", 1)[0]
        assert "# default" in said and "injected cell below overrides it" in said, said


def test_the_cell_after_the_parameters_shows_every_resolved_value() -> None:
    """The parameters cell shows None for every name the profile sets; the next cell displays
    what each one resolved to (kit.report.tables.settings): plain values on their row, sections
    folded to a line that opens to their YAML."""
    for path in runner.find_notebooks(None):
        cells = nbformat.read(path, as_version=4).cells
        at = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
        assert "display(tables.settings(P))" in cells[at + 1].source, path.name
        namespace: dict = {"In": [cells[at].source]}
        exec(cells[at].source, namespace)
        resolved = kernel_params.from_notebook(path.stem, namespace)
        shown = tables.settings(resolved)
        listed = dict(line.split(None, 1) for line in repr(shown).splitlines())
        names = kernel_params.parameter_names([cells[at].source])
        assert set(names) <= set(listed), f"{path.name}: {set(names) - set(listed)} not shown"
        assert listed["output_dir"] == resolved.output_dir
    shown = tables.settings(params.load("03_time_concat", "cpu")[0])
    listed = dict(line.split(None, 1) for line in repr(shown).splitlines())
    assert listed["total_iterations"] == "240"
    assert listed["variants"].startswith("5: cat1, cat4")
    page = shown._repr_html_()
    assert "<details><summary><code>{model: resnet10" in page and "  kind: synthetic" in page


def test_layers_import_only_downwards() -> None:
    """import-linter's contracts (.importlinter): each layer of kit imports only those below it.
    A new upward import or circle fails here, naming the import."""
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(linter), "--config", str(REPO_ROOT / ".importlinter")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=importable_environment(),
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert ", 0 broken." in result.stdout


def test_lint_and_format_are_clean() -> None:
    """ruff's rules as pyproject.toml selects them (pyflakes, pycodestyle errors, import order,
    bugbear, simplify) and ruff's formatter over the code: a name used but never imported (a
    notebook cell fails on it only when it runs), an import left unused, a likely bug or an
    unformatted file fails here, naming file and line."""
    ruff = Path(sys.executable).with_name("ruff")
    for command in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        result = subprocess.run(
            [str(ruff), *command, "kit", "tests", "benchmarks"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_kit_type_checks() -> None:
    """mypy over kit/ as pyproject.toml configures it (with pydantic's plugin): an argument of
    the wrong type, an optional value used unchecked or a settings field misnamed fails here,
    naming file and line."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_every_test_the_fast_lane_leaves_out_by_name_exists() -> None:
    """conftest.SLOW_TESTS names test functions of tests/: a renamed or removed test would leave
    a stale name behind while the test it meant slipped back into the fast lane."""
    import conftest

    defined = {
        node.name
        for module in (REPO_ROOT / "tests").glob("test_*.py")
        for node in ast.walk(ast.parse(module.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    }
    assert not conftest.SLOW_TESTS - defined, sorted(conftest.SLOW_TESTS - defined)
    measured = scheduling.MEASURED_S.keys()
    assert not measured - defined, sorted(measured - defined)


def test_the_scheduler_reads_from_ids_what_collection_marks_slow(request) -> None:
    """The scheduler's reading of a test id (the controller never collects) says `slow` of
    exactly the tests collection marks so, and its queue hands out the longest scope first."""
    import conftest

    scheduler = conftest._LongestFirst.__new__(conftest._LongestFirst)
    scheduler.reading = conftest._tests_reading_notebooks()
    scheduler.marked = conftest._tests_marked_slow()
    items = request.session.items
    differ = [
        item.nodeid
        for item in items
        if scheduler._slow(item.nodeid) != (item.get_closest_marker("slow") is not None)
    ]
    assert items and not differ, differ[:10]
    queue = scheduling.LongestFirst(lambda nodeid: "slow" in nodeid)
    queue["a.py"] = dict.fromkeys(["a.py::test_fast", "a.py::test_fast2"], False)
    queue["b.py"] = dict.fromkeys(["b.py::test_slow"], False)
    queue["c.py"] = dict.fromkeys(["c.py::test_fast"], False)
    assert [queue.popitem(last=False)[0] for _ in range(3)] == ["b.py", "a.py", "c.py"]


def test_the_layers_contract_names_every_subpackage_of_kit() -> None:
    """A new subpackage joins the layers, so that its imports are checked too."""
    listed = {module for floor in rooms.layers(rooms.KIT_WIDE) for module in floor}
    packages = {f"kit.{path.parent.name}" for path in (REPO_ROOT / "kit").glob("*/__init__.py")}
    modules = {
        f"kit.{path.stem}"
        for path in (REPO_ROOT / "kit").glob("*.py")
        if not path.stem.startswith("_")
    }
    assert packages | modules == listed


def _statements(node: ast.AST) -> int:
    return len({n.lineno for n in ast.walk(node) if isinstance(n, ast.stmt)})


def test_modules_stay_readable() -> None:
    """Each module of kit says its job in a docstring and does one job: at most 260 statements,
    no function over 45 (split a longer one into named helpers). Statements are counted as the
    lines on which one begins, so the formatter's line breaks inside a call do not count."""
    problems = []
    for path in sorted((REPO_ROOT / "kit").rglob("*.py")):
        tree = ast.parse(path.read_text())
        name = path.relative_to(REPO_ROOT)
        if not ast.get_docstring(tree):
            problems.append(f"{name}: no docstring saying what the module is for")
        if _statements(tree) > 260:
            problems.append(f"{name}: {_statements(tree)} statements")
        problems += [
            f"{name}:{node.lineno} {node.name}: {_statements(node)} statements"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _statements(node) > 45
        ]
    assert not problems, "\n".join(problems)


def test_notebooks_name_the_kernel_lab_starts() -> None:
    """Lab rewrites a notebook's kernelspec to the kernel it starts and marks the notebook
    unsaved as it opens; a notebook that names ipykernel's own spec opens unchanged."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    wanted = {"display_name": spec.display_name, "language": spec.language, "name": "python3"}
    for path in runner.find_notebooks(None):
        kernelspec = nbformat.read(path, as_version=4).metadata.get("kernelspec")
        assert kernelspec == wanted, f"{path.name}: kernelspec {kernelspec}, Lab starts {wanted}"
