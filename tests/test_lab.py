"""JupyterLab started by `python -m kit lab` saves the notebooks of notebooks/ as they are
committed (kit.cli.lab), so running them in Lab leaves `git status` clean."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager
from traitlets.config.loader import KVArgParseConfigLoader

from kit.cli import lab, runner
from kit.core.paths import REPO_ROOT


def lab_contents_manager(root: Path) -> FileContentsManager:
    """The contents manager Lab saves with, configured by `kit lab`'s command line."""
    options = [arg for arg in lab.arguments([]) if arg.startswith("--FileContentsManager")]
    config = KVArgParseConfigLoader(options).load_config()
    return FileContentsManager(root_dir=str(root), config=config)


@pytest.mark.parametrize("notebook", runner.find_notebooks(None), ids=lambda p: p.stem)
def test_a_notebook_run_and_saved_in_lab_is_written_as_committed(
    notebook: Path, tmp_path: Path
) -> None:
    """Saved by a server whose root is another checkout than the one its `kit` was imported
    from (tmp_path, several clones sharing one environment), the notebook is still stripped."""
    (tmp_path / "notebooks").mkdir()
    relative = f"notebooks/{notebook.name}"
    executed = nbformat.read(notebook, as_version=4)
    code = [cell for cell in executed.cells if cell.cell_type == "code"]
    for count, cell in enumerate(code, start=1):  # what a Lab session leaves in the notebook
        cell.execution_count = count
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {count}\n")]
        # a collapsed input and a collapsed, scrolled output, as Lab saves them
        cell.metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": True}
        cell.metadata.update(collapsed=True, scrolled=True)
    executed.metadata["language_info"] = {
        "name": "python",
        "version": "3.11.9",
        "mimetype": "text/x-python",
        "file_extension": ".py",
    }
    manager = lab_contents_manager(tmp_path)
    manager.save({"type": "notebook", "format": "json", "content": executed}, relative)
    assert (tmp_path / relative).read_bytes() == notebook.read_bytes()


def test_files_outside_notebooks_are_saved_as_they_are(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "1 + 1",
            execution_count=1,
            outputs=[
                nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)
            ],
        )
    ]
    lab_contents_manager(tmp_path).save(
        {"type": "notebook", "format": "json", "content": notebook}, "scratch.ipynb"
    )
    saved = nbformat.read(tmp_path / "scratch.ipynb", as_version=4)
    assert saved.cells[0].outputs and saved.cells[0].execution_count == 1


def test_lab_refuses_to_start_inside_another_checkout_than_its_kit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "clone"
    (other / "kit").mkdir(parents=True)
    (other / "kit" / "__init__.py").write_text("")
    (other / "notebooks").mkdir()
    monkeypatch.chdir(other / "notebooks")
    monkeypatch.setattr(lab.os, "execv", lambda *_: pytest.fail("Lab started"))
    assert lab.command([]) == 2
    said = capsys.readouterr().err
    assert str(other) in said and str(REPO_ROOT) in said and "pip install -e ." in said
    assert lab.other_checkout(REPO_ROOT / "notebooks") is None
    assert lab.other_checkout(tmp_path) is None  # not in any checkout: Lab starts as asked


def test_lab_starts_without_news_announcements() -> None:
    assert "--LabApp.news_url=None" in lab.arguments([])
