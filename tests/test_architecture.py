"""The house rules a newcomer relies on, checked over the source and by doing each kind of
change once: the parameter engine names no notebook, a variant's kind is read from its registry
entry, never compared with its name, a run's files are named by its RunFolder alone and a
notebook's result files by its experiment's catalogue; and each kind of change
docs/architecture.md names (a control, a dataset kind, a notebook) done once, as one
registration."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import polars as pl
import pytest

import kit
from kit.cli import rooms
from kit.data import kinds as data_kinds
from kit.data.kinds.base import DatasetKind
from kit.data.preflight import preflight
from kit.data.settings import DataSettings
from kit.experiments.timecat import comparisons
from kit.experiments.timecat.entries import Variant
from kit.experiments.timecat.variants import VARIANT_KINDS, VariantKind
from kit.files.paths import REPO_ROOT
from kit.params import params
from kit.train.run_files import RunFolder

KIT = Path(kit.__file__).parent
#: the bottom layer's rooms (kit.params, kit.files, ...) as .importlinter's bottom contract has them
BOTTOM = [room for layer in rooms.rooms() for room in layer]


def sources(package: str) -> dict[Path, str]:
    return {path: path.read_text() for path in sorted((KIT / package).rglob("*.py"))}


def test_the_bottom_layer_names_no_experiment_even_in_strings() -> None:
    """Import contracts see imports only; a dotted path in a string would hide one."""
    naming = [
        str(path)
        for room in BOTTOM
        for path, text in sources(room.removeprefix("kit.")).items()
        if "kit.experiments" in text
    ]
    assert not naming, f"the bottom layer names kit.experiments: {naming}"


def test_the_architecture_page_lists_the_bottom_layers_rooms_as_the_code_has_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/architecture.md's list of rooms is generated (`python -m kit figures`, kit.cli.rooms):
    the rooms of the bottom contract with the first line of each one's docstring and its modules.
    It differs from the code as soon as a room, a module or a purpose changes; the rooms are the
    packages the kit-wide contract puts at the bottom, whose floors name every package of the kit
    (tests/test_project.py), so a new room cannot be left off the list."""
    page = (REPO_ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- figures: bottom-rooms -->\n(.*?)<!-- /figures -->", page, re.DOTALL)
    assert block, "docs/architecture.md: no `<!-- figures: bottom-rooms -->` block"
    assert block.group(1) == rooms.bottom_rooms(), (
        "docs/architecture.md's list of rooms differs from the code: run `python -m kit figures`"
    )
    assert sorted(rooms.layers(rooms.KIT_WIDE)[-1]) == sorted(BOTTOM)
    # a purpose that changes in the code changes the list, which then differs from the page
    monkeypatch.setattr(kit.files, "__doc__", "Another job.\n")
    drifted = rooms.bottom_rooms()
    assert "| `kit.files` | Another job. |" in drifted and drifted != block.group(1)


def literals(node: ast.AST) -> list[str]:
    """The string constants a comparison operand holds, directly or in a list, tuple or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [text for element in node.elts for text in literals(element)]
    return []


def test_no_module_but_the_registry_compares_a_variant_kind_with_its_name() -> None:
    """A kind's behaviour is its registry entry's (`VARIANT_KINDS.get(kind).per_task`), so that
    a new kind is one registration: `kind == "direct"` or `.is_in(["time-concat"])` outside
    the registry would leave the new kind out of that decision."""
    registry = KIT / "experiments" / "timecat" / "variants.py"
    names = set(VARIANT_KINDS)
    found = []
    for path, text in sources(".").items():
        if path == registry:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "is_in":
                operands = list(node.args)
            else:
                continue
            named = names.intersection(t for operand in operands for t in literals(operand))
            if named:
                found.append(f"{path.relative_to(KIT)}:{node.lineno} compares with {named}")
    assert not found, "\n".join(found)


def test_no_module_but_the_run_folder_names_a_run_file() -> None:
    """A run's files are the RunFolder's (`RunFolder.of(settings).metrics`), so that a file's
    name, and how it is written, lives in one place: `out / "metrics.jsonl"` or
    `f"snapshot-{step}.pt"` elsewhere would be a second copy of it (docstrings and comments may
    name the files)."""
    home = KIT / "train" / "run_files.py"
    names = {
        RunFolder.CONFIG,
        RunFolder.METRICS,
        RunFolder.CHECKPOINT,
        RunFolder.INITIAL,
        RunFolder.PROVENANCE,
        RunFolder.DONE,
    }
    snapshot = RunFolder(Path()).snapshot(0).name.removesuffix("0.pt")  # f"snapshot-{step}.pt"
    found = []
    for path, text in sources(".").items():
        if path == home:
            continue
        tree = ast.parse(text)
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and (node.value in names or node.value.startswith(snapshot))
            ):
                found.append(f"{path.relative_to(KIT)}:{node.lineno} names {node.value!r}")
    assert not found, "\n".join(found)


def test_notebooks_name_their_result_files_from_the_catalogue() -> None:
    """A notebook writes `out / TIME_CONCAT.table3`, never `out / "time_concat_table3.parquet"`:
    the experiment's catalogue is what the tests and later notebooks read by."""
    literal = re.compile(r"[\"'][\w.-]+\.(?:parquet|json)[\"']")
    found = [
        f"{path.name}: {match}"
        for path in sorted((KIT.parent / "notebooks").glob("*.ipynb"))
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "code"
        for match in literal.findall(cell.source)
    ]
    assert not found, "\n".join(found)


# Each kind of change of docs/architecture.md, done once in-process: its own module (here, the
# test's code) and one registration, and the kit takes it up with nothing else edited.


def test_a_new_control_is_one_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    """A distilled model, registered as a control, is validated as a variant and enters the
    time-concat claim as a condition, as the wide model does."""
    distilled = VariantKind(
        "distilled", "one model distilled from cat4", trained=True, one_model=True, controls="all"
    )
    monkeypatch.setitem(VARIANT_KINDS._entries, distilled.name, distilled)
    assert Variant(name="distilled1", kind="distilled").spec is distilled
    kinds = {"cat1": ("time-concat", 1), "cat4": ("time-concat", 4), "distilled1": ("distilled", 1)}
    results = pl.DataFrame(
        [
            {
                "variant": name,
                "kind": kind,
                "n": n,
                "width": 1.0,
                "replicate": r,
                "iterations_per_model": 100,
                "task": "t",
                "role": "unseen",
                "rule": "heldout",
                "top1": value + 0.1 * r,
                "top5": None,
            }
            for (name, (kind, n)), value in zip(kinds.items(), [0.5, 0.7, 0.6], strict=True)
            for r in range(3)
        ]
    )
    summary = comparisons.summarize(results, "heldout", "cat1")
    conditions = {row["condition"]: row["judgement"] for row in summary["verdicts"]}
    assert conditions["cat4 vs distilled1"] == "holds"
    assert "no wide control in this run" in "\n".join(summary["lines"])


class ScratchKind(DatasetKind):
    """A folder holding a `train/` folder of class folders."""

    name = "scratch"
    probe_grid = "imagenet"
    layout = ("train/",)


def test_a_new_dataset_kind_is_one_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registered kind is a value of `data.kind`, and the checks before compute read its
    layout."""
    monkeypatch.setitem(data_kinds.KINDS._entries, ScratchKind.name, ScratchKind())
    data = DataSettings(kind="scratch", root=str(tmp_path), image_size=32)
    assert preflight(data) == [
        f"{tmp_path / 'train'}: expected a non-empty folder for kind scratch"
    ]


class ScratchSettings(params.NotebookSettings):
    """A fifth notebook's parameters."""

    steps: int


def test_a_new_notebook_schema_is_one_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema registered for a notebook is what its profile's parameters are validated
    against."""
    monkeypatch.setattr(params, "SCHEMAS", dict(params.SCHEMAS))
    params.register_schema("05_scratch", ScratchSettings)
    (tmp_path / "base.yaml").write_text("chart_formats: [png]\n")
    (tmp_path / "mini").mkdir()
    (tmp_path / "mini" / "profile.yaml").write_text("")
    (tmp_path / "mini" / "05_scratch.yaml").write_text("steps: 3\n")
    loaded, _ = params.load("05_scratch", "mini", parameters_dir=tmp_path)
    assert isinstance(loaded, ScratchSettings) and loaded.steps == 3
    with pytest.raises(ValueError, match="two parameter schemas"):
        params.register_schema("05_scratch", params.NotebookSettings)
