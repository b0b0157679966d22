"""Inputs read unverified are loud: a checkpoint without its recorded hash or a torn metrics line
is listed in `kit run`'s summary and in the report, not only inside the executed notebook; a
torn last line of a finished run's metrics is an error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import torch

from kit.cli import runner
from kit.params import params
from kit.readout import notices
from kit.report import page
from kit.train import metrics
from kit.train.run_files import RunFolder


def _records(steps: range) -> str:
    return "".join(
        json.dumps({"step": step, "epoch": 0, "loss": 1.0 / step, "lr": 0.1, "images_per_s": 100.0})
        + "\n"
        for step in steps
    )


def test_a_torn_last_metrics_line_of_a_finished_run_is_an_error(tmp_path: Path) -> None:
    path = RunFolder(tmp_path).metrics
    path.write_text(_records(range(1, 4)) + '{"step": 4, "epoch": 0, "lo')
    (RunFolder(tmp_path).done).write_text("{}\n")
    with pytest.raises(
        metrics.MetricsError,
        match=f"^{re.escape(str(path))}: line 4, the last, is torn .* although the run finished",
    ):
        metrics.read_metrics(tmp_path)


def test_a_torn_metrics_line_of_an_unfinished_run_is_left_out_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collecting = tmp_path / "notices.jsonl"
    monkeypatch.setenv(notices.NOTICES_FILE_ENV, str(collecting))
    path = RunFolder(tmp_path).metrics
    path.write_text(_records(range(1, 4)) + '{"step": 4, "epoch": 0, "lo')
    assert metrics.read_metrics(tmp_path)["step"].to_list() == [1, 2, 3]
    assert notices.collected(collecting) == [
        f"{path}: line 4, the last, is torn (the run has not finished: a kill mid-line); left out"
    ]


def test_notices_are_kept_once_each_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    collecting, kept = tmp_path / ".n.jsonl", tmp_path / "n.notices.json"
    collecting.write_text('{"notice": "a"}\n{"notice": "b"}\n{"notice": "a"}\n{"noti')
    assert notices.publish(collecting, kept) == ["a", "b"]
    assert json.loads(kept.read_text()) == ["a", "b"] and not collecting.exists()
    assert notices.kept_notices(tmp_path) == {"n": ["a", "b"]}
    assert notices.publish(collecting, kept) == [] and not kept.exists()


CHECKPOINT_CELL = """
from pathlib import Path
from kit import models
from kit.report import outputs
models.read_checkpoint(Path(CHECKPOINT))
outputs.write_json(Path(output_dir, "x_summary.json"), {"claim": {"line": "a", "status": "x"}})
"""


def test_a_checkpoint_read_without_its_hash_is_listed_in_the_summary_and_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The notice is on the terminal's summary, in the report beside the verdicts, and in the
    files a later reader or script consults: the notebook's summary JSON and its provenance."""
    notebooks, parameters, outputs = tmp_path / "nb", tmp_path / "params", tmp_path / "out"
    notebooks.mkdir()
    (parameters / "mini").mkdir(parents=True)
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"w": torch.zeros(2)}, checkpoint)  # no checkpoint.pt.sha256 beside it
    monkeypatch.setitem(params.SCHEMAS, "01_ok", params.NotebookSettings)
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell('profile = "x"\noutput_dir = "y"\nchart_formats = ["png"]')
    cell.metadata["tags"] = ["parameters"]
    notebook.cells = [
        cell,
        nbformat.v4.new_code_cell(CHECKPOINT_CELL.replace("CHECKPOINT", repr(str(checkpoint)))),
    ]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(notebook, notebooks / "01_ok.ipynb")
    assert (
        runner.run(
            None, "mini", notebooks_dir=notebooks, parameters_dir=parameters, output_root=outputs
        )
        == 0
    )
    out = capsys.readouterr().out
    summary = out[out.index("summary:") :]
    assert f"    read unverified: {checkpoint}: no recorded hash" in summary
    folder = outputs / "mini"
    said = [
        f"{checkpoint}: no recorded hash (checkpoint.pt.sha256), so it is loaded unverified "
        "(a file the kit did not write, or one whose hash was removed)"
    ]
    assert notices.kept_notices(folder) == {"01_ok": said}
    assert json.loads((folder / "x_summary.json").read_text())["read_unverified"] == said
    assert json.loads((folder / "01_ok.provenance.json").read_text())["read_unverified"] == said
    report = (folder / page.PAGE).read_text()
    assert report.index("Verdicts") < report.index("Read unverified") < report.index("Charts")
    assert f"01_ok: {checkpoint}: no recorded hash" in report
