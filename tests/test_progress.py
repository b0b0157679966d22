"""Progress bars in a notebook executed without a frontend, as papermill runs the kit's."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
import tqdm.std
from bar_lines import BAR_LINE, rate_disagrees

from kit.cli import terminal
from kit.experiments import toy
from kit.experiments.toy_settings import SparseTrainingSettings
from kit.files.paths import REPO_ROOT
from kit.readout import progress
from kit.report import notebook_html

CELL = """\
from kit.readout.progress import KeptBar
for _ in KeptBar(range(500), desc="counting"):
    pass
"""


#: a bar in a kernel on a clock the cell moves: 5 runs of 1 s, then 5 of 3 s
FAKE_CLOCK_CELL = """\
import tqdm.std
from kit.readout.progress import KeptBar

class Clock:
    now = 1000.0
    def __call__(self):
        return self.now

tqdm.std.time = clock = Clock()
bar = KeptBar(total=10, desc="runs", unit="run", mininterval=0)
for step in range(10):
    clock.now += 1 if step < 5 else 3
    bar.update()
bar.close()
"""


def executed_cell(tmp_path: Path, source: str) -> tuple[Path, nbformat.NotebookNode]:
    """A notebook of one cell (`source`) executed by papermill: a kernel without a frontend."""
    written, executed = tmp_path / "bar.ipynb", tmp_path / "bar.out.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell(source)],
            metadata={
                "kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}
            },
        ),
        written,
    )
    result = subprocess.run(
        [sys.executable, "-m", "papermill", str(written), str(executed), "--kernel", "python3"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return executed, nbformat.read(executed, as_version=4)


def saved_bars(notebook: nbformat.NotebookNode) -> list[str]:
    """The text lines of the widgets its first cell's outputs hold."""
    return [
        output.data["text/plain"]
        for output in notebook.cells[0].outputs
        if "application/vnd.jupyter.widget-view+json" in output.get("data", {})
    ]


def test_a_kept_bar_stays_at_its_end_in_the_saved_notebook(tmp_path: Path) -> None:
    """tqdm.auto's widget alone is saved as it was first displayed (0%); a KeptBar is saved
    as it ended, and nothing of it is written as lines of text: the notebook's page draws the
    finished bar once, not as a widget and again as its text line."""
    executed, notebook = executed_cell(tmp_path, CELL)
    bars = saved_bars(notebook)
    assert len(bars) == 1 and bars[0].startswith("counting: 100%") and " 500/500 " in bars[0]
    assert not [output for output in notebook.cells[0].outputs if output.output_type == "stream"]
    page = notebook_html.render(executed).read_text()
    assert page.count("<progress") == 1 and page.count("counting: 100%") == 1


def test_a_finished_widget_shows_its_count_over_its_own_time(tmp_path: Path) -> None:
    """In a kernel (tqdm's widget, as Lab draws it and the saved notebook keeps it), 10 runs in
    20 s end at 2.00 s/run, in the widget's text line and in the label Lab shows beside the
    bar: not the smoothed rate of the last runs (2.71 s/run, on which tqdm's widget ends), which
    its time belies."""
    _, notebook = executed_cell(tmp_path, FAKE_CLOCK_CELL)
    (line,) = saved_bars(notebook)
    assert "10/10 [00:20<00:00,  2.00s/run]" in line, line
    assert rate_disagrees(BAR_LINE.match(line)) is None
    state = notebook.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    texts = [
        " ".join(html.unescape(model["state"]["value"]).split())  # Lab's label: figure spaces
        for model in state.values()
        if model["model_name"] == "HTMLModel"
    ]
    assert [text for text in texts if "/10 [" in text] == ["10/10 [00:20<00:00, 2.00s/run]"], texts


def test_a_finished_bar_keeps_its_own_count_over_its_own_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal, the same bar with 100 s of extraction (`paused`) before each run: it ends
    at 10 runs in 20 s, 2.00 s/run, and any later draw of it (a notebook keeps the finished
    widget's text as drawn after its end) says the same, its clock stopped when it ended."""
    clock = Clock()
    monkeypatch.setattr(tqdm.std, "time", clock)
    bar = progress.KeptBar(total=10, desc="runs", unit="run", mininterval=0)
    for step in range(10):
        with progress.paused():
            clock.now += 100
        clock.now += 1 if step < 5 else 3
        bar.update()
    bar.close()
    clock.now += 50
    line = str(bar)
    assert "10/10 [00:20<00:00,  2.00s/run]" in line, line
    assert rate_disagrees(BAR_LINE.match(line)) is None


class Clock:
    """A clock the test moves by hand, in place of tqdm's."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bars_elapsed_time_and_eta_are_its_own_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """Extraction before the first probe and between two probes (`paused`) is no probe's
    work: no ETA before the first probe ends, then elapsed and ETA from the probes' 2 s each
    (not the 600 s of extraction before the first, as a bar counting from its creation had)."""
    clock = Clock()
    monkeypatch.setattr(tqdm.std, "time", clock)
    bar = progress.KeptBar(total=100, desc="probes", unit="probe", mininterval=0)
    with progress.paused():
        clock.now += 600
    assert "[00:00<?" in str(bar)
    clock.now += 2
    bar.update()
    assert "1/100 [00:02<03:18" in str(bar)  # 99 probes left at 2 s each
    with progress.paused():
        clock.now += 300
    clock.now += 2
    bar.update()
    bar.close()
    assert bar.format_dict["elapsed"] == 4
    assert "2/100 [00:04<03:16" in str(bar)


def test_a_bar_over_items_rates_its_own_work_across_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bar looping over probes, each read after 100 s of extraction (`paused`) and fitted in
    10 s, drawn at most every 30 s: its count never runs ahead of the probes done, and its rate
    is the probes' own, one per 10 s (tqdm's loop, its last draw's time kept in a local that the
    pause does not move, counted the probes since its last draw twice: 0.2 probe/s)."""
    clock = Clock()
    monkeypatch.setattr(tqdm.std, "time", clock)
    bar = progress.KeptBar(range(8), desc="probes", unit="probe", mininterval=30)
    counted, rates = [], []
    for done, _ in enumerate(bar):
        with progress.paused():
            clock.now += 100
        clock.now += 10
        counted.append(bar.n - done)
        rates.append(bar.format_dict["rate"])
    assert counted == [0] * 8, counted  # the probe in hand is counted when the next begins
    measured = [rate for rate in rates if rate is not None]
    assert measured and measured == pytest.approx([0.1] * len(measured)), rates
    assert bar.format_dict["elapsed"] == 80
    assert "8/8 [01:20<00:00" in str(bar)


def test_a_stages_lines_leave_out_its_paused_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plain lines `python -m kit run` prints for a stage give the rate and ETA of its own
    work: 600 s of extraction (`paused`) before the first probe of 2 s do not make the first
    line say 602 s a probe and an ETA of hours."""
    clock = Clock()
    monkeypatch.setattr(progress.time, "time", clock)
    monkeypatch.setattr(progress.time, "monotonic", clock)
    records = tmp_path / "stages.jsonl"
    monkeypatch.setenv(progress.STAGE_FILE_ENV, str(records))
    stage = progress.Stage("probes", 100, "probe", "fitting 100 probes")
    with progress.paused():
        clock.now += 600
    clock.now += 2
    stage.advance()
    lines = terminal.StageProgress(records, "03", every_s=0.0).poll()
    assert lines == [
        "03 probes: fitting 100 probes",
        "03 probes  1/100 probe  2.0 s/probe  ETA 198 s",
    ]


def test_the_toy_trains_under_a_kept_bar(monkeypatch) -> None:
    shown = []

    class Recorded(progress.KeptBar):
        def __init__(self, *args, **kwargs) -> None:
            shown.append(kwargs["desc"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(toy, "KeptBar", Recorded)
    config = SparseTrainingSettings(steps=3, n_train=64, batch_size=16)
    toy.train_sparse(torch.tensor([[0.25, 0.25, 0.25, 0.25]] * 2), config, seed=0)
    assert shown == ["training 2 toy models"]


def test_a_kept_bar_in_a_log_draws_rarely(capsys) -> None:
    """Headless (stderr a file, no kernel): 300 quick updates with a postfix each draw the bar
    at its start and end only, not once per update."""
    bar = progress.KeptBar(total=300, desc="probes")
    for step in range(300):
        bar.set_postfix_str(f"probe {step}", refresh=False)
        bar.update()
    bar.close()
    draws = [
        part
        for part in capsys.readouterr().err.replace("\r", "\n").splitlines()
        if part.startswith("probes")
    ]
    assert 1 <= len(draws) <= 3, draws


def stage_lines(path: Path, label: str) -> list[str]:
    """What `python -m kit run` prints for the stage records in `path`: each stage's first
    and last line (its counts, what it reuses, its duration)."""
    return terminal.StageProgress(path, label, every_s=3600.0).poll()


def test_the_toys_probing_says_what_it_probes_between_trainings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notebook 01's probes (seconds at the cpu profile, between two toy trainings) each have
    their stage lines: how many probes, on which representations."""
    monkeypatch.setenv(progress.STAGE_FILE_ENV, str(tmp_path / "stages.jsonl"))
    config = SparseTrainingSettings(
        steps=3, n_train=64, batch_size=16, probe_samples=32, probe_steps=4
    )
    runs, models = toy.mixture_sweep([0.7], 2, config, seed=0)  # 4 mixtures x 2 replicates
    toy.concatenation_study(runs, models, [2], config, seed=1)  # 4 groups of 2
    lines = stage_lines(tmp_path / "stages.jsonl", "01")
    assert lines[0] == "01 training 8 toy models: 3 steps", lines
    assert re.fullmatch(r"01 training 8 toy models: 3 steps done \(.*step/s\)", lines[1])
    expected = [
        ("32 probes", "8 trained models"),
        ("32 probes", "8 trained models, unpruned"),
        ("16 probes", "4 concatenations of 2 reused trained models"),
    ]
    probing = [line for line in lines if line.startswith("01 probes")]
    assert len(probing) == 2 * len(expected), lines
    for (count, what), first, last in zip(expected, probing[::2], probing[1::2], strict=True):
        assert first == f"01 probes: fitting {count} at once (4 components x {what})"
        assert re.fullmatch(rf"01 probes: fitted {count} \({re.escape(what)}\) \(.* s.*\)", last)


def test_a_page_is_rendered_again_only_when_its_notebook_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report written again keeps the page of a notebook whose bytes it was rendered from
    (its stamp), and renders anew a changed notebook or a page whose stamp does not match."""
    executed, _ = executed_cell(tmp_path, CELL)
    page = notebook_html.render(executed)
    first = page.read_bytes()
    assert first.endswith(notebook_html.stamp(executed).encode())
    renders: list[Path] = []
    original = notebook_html.offline
    monkeypatch.setattr(
        notebook_html, "offline", lambda nb, f: renders.append(executed) or original(nb, f)
    )
    assert notebook_html.render(executed) == page and not renders and page.read_bytes() == first
    notebook = nbformat.read(executed, as_version=4)
    notebook.cells[0].source += "\n# changed"
    nbformat.write(notebook, executed)
    notebook_html.render(executed)
    assert len(renders) == 1 and page.read_bytes() != first
    page.write_bytes(page.read_bytes().replace(b"sha256", b"sha-256"))  # a stamp that differs
    notebook_html.render(executed)
    assert len(renders) == 2 and page.read_bytes().endswith(notebook_html.stamp(executed).encode())
