"""The notebook runner: failures are loud and keep partial output; plain papermill works too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kit import config, runner
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
    monkeypatch.setitem(config.SCHEMAS, "01_ok", config.NotebookParams)
    monkeypatch.setitem(config.SCHEMAS, "02_fails", config.NotebookParams)
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
    with pytest.raises(config.ParameterError, match="expected one match"):
        runner.find_notebooks(["0"], folder)


def test_command_line_overrides_are_parsed_as_yaml() -> None:
    assert config.parse_overrides(["lr=0.25", "shares=[0.5, 0.7]"]) == {
        "lr": 0.25, "shares": [0.5, 0.7]}
    with pytest.raises(config.ParameterError, match="key=value"):
        config.parse_overrides(["lr"])


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


def test_plain_papermill_refuses_a_mistyped_parameter_in_the_notebook(tmp_path: Path) -> None:
    result = papermill_cli(tmp_path / "bad.ipynb", f"output_dir: {tmp_path}\nlr: '0.1'\n")
    assert result.returncode != 0
    assert "ParameterError" in result.stderr and "'lr'" in result.stderr
    assert not (tmp_path / "toy_runs.parquet").exists()
