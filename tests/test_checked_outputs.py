"""The notebooks' checked cells (tagged `nbval-check-output`) show their reference outputs in
the shared ci main job, compared as nbval compares them (tests/checked_outputs.py)."""

from __future__ import annotations

from pathlib import Path

import checked_outputs
import nbformat
import pytest

from kit.cli import nbval_references

#: the notebooks with checked cells (a reference file each)
CHECKED = sorted(path.stem for path in nbval_references.REFERENCES_DIR.glob("*.json"))


@pytest.mark.parametrize("stem", CHECKED)
def test_the_main_jobs_checked_cells_show_their_references(stem: str, runner_output) -> None:
    ran = runner_output(stem)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert not checked_outputs.differences(ran.output_dir / f"{stem}.ipynb")


def _executed(tmp_path: Path, outputs: list[dict]) -> Path:
    """A notebook of one checked cell with `outputs`, as an executed copy is written."""
    cell = nbformat.v4.new_code_cell("show()", execution_count=1, id="checked1")
    cell.metadata["tags"] = [nbval_references.CHECK_TAG]
    cell.outputs = [nbformat.from_dict(output) for output in outputs]
    path = tmp_path / "01_planted.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    return path


def _stream(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def _chart(element: str, rate: str) -> dict:
    return {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/plain": f"{rate} <at 0x7f3a9c>", "text/html": f'<div id="{element}">'},
    }


def test_the_comparison_finds_a_changed_output_and_forgives_what_nbval_sanitizes(
    tmp_path: Path,
) -> None:
    stored = tmp_path / "references"
    outputs = [_stream("top-1 "), _stream("81.2\n"), _chart("altair-viz-0123abcd", "rate")]
    executed = _executed(tmp_path, outputs)
    nbval_references.store_references(executed, stored)
    assert checked_outputs.differences(executed, stored) == []
    # streams split differently, another chart element id and memory address: the same
    again = [_stream("top-1 81.2\n"), _chart("altair-viz-fedc9876", "rate")]
    again[1]["data"]["text/plain"] = "rate <at 0x55aa01>"
    assert checked_outputs.differences(_executed(tmp_path, again), stored) == []
    # a changed number, a missing output, a cell without its reference: each found
    changed = _executed(tmp_path, [_stream("top-1 81.3\n"), outputs[2]])
    (found,) = checked_outputs.differences(changed, stored)
    assert "cell checked1 differs from its reference in ['stdout']" in found and "81.3" in found
    missing = _executed(tmp_path, [_stream("top-1 81.2\n")])
    assert "['text/html', 'text/plain']" in checked_outputs.differences(missing, stored)[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "01_planted.json").write_text("{}")
    assert checked_outputs.differences(changed, empty) == [
        "01_planted.ipynb: checked cell checked1 has no reference"
    ]
