"""The notebook runner: failures are loud and keep partial output; plain papermill works too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from kit import params, runner
from kit.paths import NOTEBOOKS_DIR, PARAMETERS_DIR


def write_notebook(path: Path, *sources: str) -> None:
    notebook = nbformat.v4.new_notebook()
    parameters = nbformat.v4.new_code_cell(
        'profile = "x"\noutput_dir = "y"\nchart_formats = ["png"]')
    parameters.metadata["tags"] = ["parameters"]
    notebook.cells = [parameters] + [nbformat.v4.new_code_cell(s) for s in sources]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    nbformat.write(notebook, path)


@pytest.fixture()
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    notebooks, parameters, outputs = tmp_path / "nb", tmp_path / "params", tmp_path / "out"
    notebooks.mkdir()
    (parameters / "mini").mkdir(parents=True)
    (parameters / "base.yaml").write_text("chart_formats: [svg]\n")
    monkeypatch.setitem(params.SCHEMAS, "01_ok", "kit.params:NotebookParams")
    monkeypatch.setitem(params.SCHEMAS, "02_fails", "kit.params:NotebookParams")
    write_notebook(notebooks / "01_ok.ipynb", "print('formats are', chart_formats)")
    write_notebook(notebooks / "02_fails.ipynb", "x = 1", "raise RuntimeError('boom in cell')",
                   "print('never reached')")
    return {"notebooks_dir": notebooks, "parameters_dir": parameters, "output_root": outputs}


def test_failing_cell_gives_nonzero_exit_and_keeps_partial_output(workspace, capsys) -> None:
    code = runner.run(None, "mini", **workspace)
    assert code == 1
    err = capsys.readouterr().err
    assert "02_fails.ipynb" in err and "RuntimeError: boom in cell" in err and "cell" in err
    done = nbformat.read(workspace["output_root"] / "mini" / "01_ok.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in done.cells for o in c.get("outputs", []))
    assert "formats are ['svg']" in printed
    partial = nbformat.read(workspace["output_root"] / "mini" / "02_fails.ipynb", as_version=4)
    errors = [o for c in partial.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors and errors[0].evalue == "boom in cell"


def test_bad_parameters_stop_everything_before_any_notebook_runs(workspace, capsys) -> None:
    (workspace["parameters_dir"] / "mini" / "02_fails.yaml").write_text("sed: 3\n")
    assert runner.run(None, "mini", **workspace) == 2
    err = capsys.readouterr().err
    assert "02_fails.yaml" in err and "unknown parameter 'sed'" in err
    assert not (workspace["output_root"] / "mini").exists()


def test_notebooks_are_found_by_prefix_stem_or_name(workspace) -> None:
    folder = workspace["notebooks_dir"]
    assert [p.name for p in runner.find_notebooks(["02"], folder)] == ["02_fails.ipynb"]
    assert [p.name for p in runner.find_notebooks(["01_ok.ipynb"], folder)] == ["01_ok.ipynb"]
    with pytest.raises(params.ParameterError, match="expected one match"):
        runner.find_notebooks(["0"], folder)


def papermill_cli(output: Path, yaml_text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "papermill", str(NOTEBOOKS_DIR / "01_toy_counterexample.ipynb"),
         str(output), "-f", str(PARAMETERS_DIR / "ci" / "01_toy_counterexample.yaml"),
         "-y", yaml_text, "-k", "python3"],
        capture_output=True, text=True, timeout=600)


def test_plain_papermill_with_a_parameter_file_runs(tmp_path: Path) -> None:
    small = (f"output_dir: {tmp_path / 'out'}\nshares: [0.7]\nreplicates: 2\nconcat_sizes: [1, 2]\n"
             "direct_replicates: 1\nweight_decays: [0.01]\nsteps: 100\nprobe_steps: 20\n"
             "chart_formats: [png]\n")
    result = papermill_cli(tmp_path / "ok.ipynb", small)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out" / "toy_summary.json").exists()


@pytest.mark.parametrize("bad, named", [("lr: '0.1'", "'lr'"),
                                        ("no_such_key_qq: 1", "'no_such_key_qq'")])
def test_plain_papermill_refuses_bad_or_unknown_parameters_in_the_notebook(
        tmp_path: Path, bad: str, named: str) -> None:
    result = papermill_cli(tmp_path / "bad.ipynb", f"output_dir: {tmp_path}\n{bad}\n")
    assert result.returncode != 0
    assert "ParameterError" in result.stderr and named in result.stderr
    assert not (tmp_path / "toy_runs.parquet").exists()


def test_a_saved_parameter_file_replays_where_its_profile_says(tmp_path: Path) -> None:
    (planned,) = runner.plan(["02"], "ci", overrides={"output_dir": str(tmp_path / "ci")})
    saved = tmp_path / "02.parameters.yaml"
    saved.write_text(yaml.safe_dump(planned.parameters))
    result = subprocess.run(
        [sys.executable, "-m", "papermill", str(NOTEBOOKS_DIR / "02_surveyed_evidence.ipynb"),
         str(tmp_path / "replayed.ipynb"), "-f", str(saved), "-k", "python3"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "ci" / "evidence_summary.json").exists()
