"""Bad input and full disks give one line naming the file and the key, never a traceback:
output folders that cannot hold a run, unset environment variables in paths, `kit run`'s own
machine check with sizes in sensible units, a disk filling at the notebook's final save or at the
report, and a torn result table."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from kit.cli import main, runner
from kit.files.paths import NOTEBOOKS_DIR, REPO_ROOT
from kit.params import params
from kit.report import page
from kit.runtime import machine

usage = namedtuple("usage", "total used free")


def check(capsys: pytest.CaptureFixture[str], *sets: str) -> tuple[int, str]:
    arguments = ["check", "02", "--profile", "ci"]
    for value in sets:
        arguments += ["--set", value]
    code = main.main(arguments)
    return code, capsys.readouterr().err


def test_an_output_folder_that_is_a_root_or_a_dangling_link_is_refused_at_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(capsys, "output_dir=/")
    assert code == 2 and err == (
        "error: /: not a folder of its own for outputs (a file system "
        "root, the home folder or the repository or above); name a "
        "folder for the run (output_dir)\n"
    )
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    code, err = check(capsys, f"output_dir={link}")
    assert code == 2 and err == (
        f"error: {link}: a symbolic link to {tmp_path / 'gone'}, which "
        f"does not exist, so {link} cannot be created (output_dir)\n"
    )


def test_an_output_folder_among_the_sources_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`output_dir=notebooks` would replace the notebooks the run reads with executed copies:
    `kit check` and `kit run` refuse it, and any folder git tracks a file in, naming where to
    write instead."""
    notebook = NOTEBOOKS_DIR / "02_surveyed_evidence.ipynb"
    before = notebook.read_bytes()
    code, err = check(capsys, "output_dir=notebooks")
    assert code == 2 and err == (
        f"error: {NOTEBOOKS_DIR}: inside the kit's sources (notebooks/), whose files a run "
        "would write over; write to a folder under outputs/ (the default is "
        "outputs/<profile>) or outside the repository (output_dir)\n"
    )
    for folder in ("kit/cli", "parameters/new", "docs", "outputs"):
        code, err = check(capsys, f"output_dir={folder}")
        assert code == 2 and err.startswith(f"error: {REPO_ROOT / folder}: "), err
        assert "write to a folder under outputs/" in err and err.count("\n") == 1, err
    monkeypatch.setattr(runner, "execute", lambda *_: pytest.fail("ran among the sources"))
    assert main.main(["run", "02", "--profile", "ci", "--set", "output_dir=notebooks"]) == 2
    assert "inside the kit's sources (notebooks/)" in capsys.readouterr().err
    assert notebook.read_bytes() == before
    other = tmp_path / "project"
    (other / "src").mkdir(parents=True)
    (other / "src" / "code.py").write_text("x = 1\n")
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    subprocess.run(["git", "-C", str(other), "add", "src/code.py"], check=True)
    code, err = check(capsys, f"output_dir={other / 'src'}")
    assert code == 2 and err.startswith(
        f"error: {other / 'src'}: holds files git tracks (code.py), which a run would write over"
    ), err
    assert check(capsys, f"output_dir={other / 'results'}")[0] == 0


def test_an_unset_environment_variable_in_a_path_is_refused_naming_the_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KIT_NO_SUCH_VARIABLE", raising=False)
    code, err = check(capsys, "output_dir=${KIT_NO_SUCH_VARIABLE}/out")
    assert code == 2 and err.splitlines()[1] == (
        "  the command line: parameter 'output_dir': environment variable KIT_NO_SUCH_VARIABLE "
        "is not set ('${KIT_NO_SUCH_VARIABLE}/out'); set it, or write the path out"
    )


def test_sizes_are_said_in_units_that_show_them() -> None:
    assert machine.byte_size(0) == "0 bytes"
    assert machine.byte_size(1_500) == "1.5 kB"
    assert machine.byte_size(12_300_000) == "12.3 MB"
    assert machine.byte_size(4.2e9) == "4.2 GB"


def test_kit_run_checks_the_machine_as_kit_check_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        machine.shutil,
        "disk_usage",
        lambda _path: usage(total=10**6, used=10**6 - 2_000, free=2_000),
    )
    monkeypatch.setattr(runner, "execute", lambda *_: pytest.fail("ran on a full disk"))
    assert runner.run(["03"], "ci", output_root=tmp_path) == 2
    err = capsys.readouterr().err
    assert "the plan's checkpoints and feature cache needs about " in err
    assert "but 2.0 kB is free" in err and "0.0 GB" not in err


def test_a_disk_filling_at_the_final_save_is_one_line_and_leaves_no_torn_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    notebooks, parameters = tmp_path / "nb", tmp_path / "params"
    notebooks.mkdir()
    (parameters / "mini").mkdir(parents=True)
    monkeypatch.setitem(params.SCHEMAS, "01_ok", params.NotebookSettings)
    nbformat.write(nbformat.v4.new_notebook(), notebooks / "01_ok.ipynb")

    def full_at_save(_notebook: str, partial: str, **_: object) -> None:
        Path(partial).write_text('{"cells": [{"cell_type": "co')  # torn by the full disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), partial)

    monkeypatch.setattr(runner.papermill, "execute_notebook", full_at_save)
    assert (
        runner.run(
            None,
            "mini",
            notebooks_dir=notebooks,
            parameters_dir=parameters,
            output_root=tmp_path / "out",
        )
        == 1
    )
    err = capsys.readouterr().err
    partial = tmp_path / "out" / "mini" / "01_ok.partial.ipynb"
    assert err.startswith(
        f"[1/1] 01_ok.ipynb (profile mini) FAILED: {partial}: no space left "
        "on device while saving the notebook's outputs ("
    )
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not partial.exists() and not (tmp_path / "out" / "mini" / "01_ok.ipynb").exists()


def test_a_disk_filling_while_the_report_is_written_is_one_line_with_the_resume_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report is the last write of `kit run`: a full disk there said the kit's DiskFullError
    only at the end of a chained traceback. It is one `error:` line naming the file, the space
    written and free and how to resume, and the notebook's results stay."""
    notebooks, parameters = tmp_path / "nb", tmp_path / "params"
    notebooks.mkdir()
    (parameters / "mini").mkdir(parents=True)
    monkeypatch.setitem(params.SCHEMAS, "01_ok", params.NotebookSettings)
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    notebook.metadata["kernelspec"]["language"] = "python"
    nbformat.write(notebook, notebooks / "01_ok.ipynb")
    real = page.atomic_write

    @contextlib.contextmanager
    def full_disk(path: Path) -> Iterator[object]:
        with real(path) as handle:
            handle.write(b"<!doctype html>")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            yield handle

    monkeypatch.setattr(page, "atomic_write", full_disk)
    arguments = {"notebooks_dir": notebooks, "parameters_dir": parameters}
    assert runner.run(None, "mini", output_root=tmp_path / "out", **arguments) == 1
    err = capsys.readouterr().err
    folder = tmp_path / "out" / "mini"
    assert err.startswith(
        f"error: report not written: {folder / page.PAGE}: no space left on device while "
        "writing it ("
    )
    assert "MB written; " in err and " free of " in err
    assert err.rstrip().endswith("re-run the same command to resume.")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert (folder / "01_ok.ipynb").exists() and not (folder / page.PAGE).exists()


def test_a_torn_result_table_is_named_by_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "x_summary.json").write_text(json.dumps({"claim": {"line": "a", "status": "b"}}))
    torn = tmp_path / "x_table3.parquet"
    torn.write_bytes(b"PAR1\x15\x04\x15")
    with pytest.raises(page.ReportError, match=f"^{torn}: not a readable parquet table, torn"):
        page.write_report("mini", tmp_path)
