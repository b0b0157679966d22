"""The notebook runner: failures are loud and keep partial output; plain papermill works too."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import polars as pl
import psutil
import pytest
import yaml

from kit.cli import runner, terminal
from kit.experiments.evidence import EVIDENCE
from kit.experiments.timecat import planning, sweep, sweep_settings
from kit.experiments.timecat.result_files import SWEEP, TIME_CONCAT
from kit.experiments.toy_settings import TOY
from kit.files import locks
from kit.files.paths import NOTEBOOKS_DIR, PARAMETERS_DIR, REPO_ROOT
from kit.launch import progress as launch_progress
from kit.launch.runs import run_name
from kit.params import params
from kit.readout.progress import STAGE_FILE_ENV, Stage
from kit.report import page
from kit.runtime import processes, provenance


def write_notebook(path: Path, *sources: str) -> None:
    notebook = nbformat.v4.new_notebook()
    parameters = nbformat.v4.new_code_cell(
        'profile = "x"\noutput_dir = "y"\nchart_formats = ["png"]'
    )
    parameters.metadata["tags"] = ["parameters"]
    notebook.cells = [parameters] + [nbformat.v4.new_code_cell(s) for s in sources]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(notebook, path)


@pytest.fixture()
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    notebooks, parameters, outputs = tmp_path / "nb", tmp_path / "params", tmp_path / "out"
    notebooks.mkdir()
    (parameters / "mini").mkdir(parents=True)
    (parameters / "base.yaml").write_text("chart_formats: [svg]\n")
    monkeypatch.setitem(params.SCHEMAS, "01_ok", params.NotebookSettings)
    monkeypatch.setitem(params.SCHEMAS, "02_fails", params.NotebookSettings)
    write_notebook(notebooks / "01_ok.ipynb", "print('formats are', chart_formats)")
    write_notebook(
        notebooks / "02_fails.ipynb",
        "x = 1",
        "raise RuntimeError('boom in cell')",
        "print('never reached')",
    )
    return {"notebooks_dir": notebooks, "parameters_dir": parameters, "output_root": outputs}


def test_failing_cell_gives_nonzero_exit_and_keeps_partial_output(workspace, capsys) -> None:
    code = runner.run(None, "mini", **workspace)
    assert code == 1
    err = capsys.readouterr().err
    assert "02_fails.ipynb" in err and "RuntimeError: boom in cell" in err and "cell" in err
    done = nbformat.read(workspace["output_root"] / "mini" / "01_ok.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in done.cells for o in c.get("outputs", []))
    assert "formats are ['svg']" in printed
    (made,) = provenance.read(workspace["output_root"] / "mini" / "01_ok.provenance.json")
    assert made["packages"]["papermill"] and made["kit_commit"]
    assert not (workspace["output_root"] / "mini" / "02_fails.provenance.json").exists()
    partial = nbformat.read(
        workspace["output_root"] / "mini" / "02_fails.partial.ipynb", as_version=4
    )
    errors = [o for c in partial.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors and errors[0].evalue == "boom in cell"
    assert not (workspace["output_root"] / "mini" / "02_fails.ipynb").exists()


def test_a_failed_run_keeps_the_previous_good_notebook(workspace, capsys) -> None:
    assert runner.run(["01"], "mini", **workspace) == 0
    good = (workspace["output_root"] / "mini" / "01_ok.ipynb").read_text()
    write_notebook(workspace["notebooks_dir"] / "01_ok.ipynb", "raise RuntimeError('now bad')")
    assert runner.run(["01"], "mini", **workspace) == 1
    assert (workspace["output_root"] / "mini" / "01_ok.ipynb").read_text() == good
    assert "now bad" in (workspace["output_root"] / "mini" / "01_ok.partial.ipynb").read_text()
    assert "the last good run's stays in" in capsys.readouterr().err


def test_a_second_run_of_the_same_output_folder_is_refused(workspace, capsys) -> None:
    with locks.hold(workspace["output_root"] / "mini", "another run"):
        assert runner.run(["01"], "mini", **workspace) == 2
    err = capsys.readouterr().err
    assert f"pid {os.getpid()}" in err and "another run" in err
    assert not (workspace["output_root"] / "mini" / "01_ok.ipynb").exists()


def test_stale_temporary_files_are_removed_at_start(workspace) -> None:
    run_folder = workspace["output_root"] / "mini" / "runs" / "cat1" / "seed0"
    run_folder.mkdir(parents=True)
    stale = run_folder / ".checkpoint.pt.4194305.tmp"  # above Linux's largest pid: never alive
    stale.write_bytes(b"x" * 1000)
    assert runner.run(["01"], "mini", **workspace) == 0
    assert not stale.exists()


def test_an_unwritable_output_folder_is_refused_before_anything_runs(workspace, capsys) -> None:
    blocker = workspace["output_root"].parent / "a_file"
    blocker.write_text("")
    assert runner.run(["01"], "mini", **workspace | {"output_root": blocker / "out"}) == 2
    assert f"{blocker}: not a folder, so {blocker / 'out' / 'mini'} cannot be created" in (
        capsys.readouterr().err
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit",
            "check",
            "01",
            "--profile",
            "ci",
            "--set",
            f"output_dir={blocker / 'x'}",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 2 and f"{blocker}: not a folder" in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_output_folder_is_refused(workspace, capsys) -> None:
    (workspace["output_root"] / "mini").mkdir(parents=True)
    (workspace["output_root"] / "mini").chmod(0o500)
    try:
        assert runner.run(["01"], "mini", **workspace) == 2
    finally:
        (workspace["output_root"] / "mini").chmod(0o700)
    assert "cannot be written: permission denied" in capsys.readouterr().err


RUNNER_SCRIPT = """
import sys
from pathlib import Path
from kit.cli import runner, terminal
from kit.params import params
params.SCHEMAS["01_workers"] = params.NotebookSettings
root = Path(sys.argv[1])
sys.exit(runner.run(None, "mini", notebooks_dir=root / "nb", parameters_dir=root / "params",
                    output_root=root / "out"))
"""

WORKERS_CELL = """
import os, subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
same_group = subprocess.Popen(sleeper)
own_session = subprocess.Popen(sleeper, start_new_session=True)
pids = [os.getpid(), same_group.pid, own_session.pid]
open(PIDS, "w").write(" ".join(map(str, pids)))
time.sleep(600)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_runner_stops_every_worker(workspace, signum) -> None:
    root = workspace["notebooks_dir"].parent
    pids_file = root / "pids.txt"
    write_notebook(
        workspace["notebooks_dir"] / "01_workers.ipynb",
        WORKERS_CELL.replace("PIDS", repr(str(pids_file))),
    )
    for other in ("01_ok", "02_fails"):
        (workspace["notebooks_dir"] / f"{other}.ipynb").unlink()
    (root / "run.py").write_text(RUNNER_SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(root / "run.py"), str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )
    deadline = time.monotonic() + 120
    while not pids_file.exists() or len(pids_file.read_text().split()) < 3:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the notebook did not start its workers"
        time.sleep(0.1)
    workers = [psutil.Process(int(pid)) for pid in pids_file.read_text().split()]
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    assert err.strip().splitlines()[-1] == runner.INTERRUPTED and "Traceback" not in err
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, [p.cmdline() for p in alive]


TRANSPORT_WRITER = """
import json
from ipykernel import get_connection_info
info = json.loads(get_connection_info())
open(OUT, "w").write(json.dumps({"transport": info["transport"], "ip": info["ip"]}))
"""


def test_the_kernel_talks_over_sockets_of_its_own_not_tcp_ports(workspace) -> None:
    """A TCP port found free can be taken by another process before the kernel binds it (runs
    side by side on one node): the kernel's sockets are files in a folder of the run's own,
    removed with it."""
    written = workspace["notebooks_dir"].parent / "transport.json"
    write_notebook(
        workspace["notebooks_dir"] / "01_ok.ipynb",
        TRANSPORT_WRITER.replace("OUT", repr(str(written))),
    )
    assert runner.run(["01"], "mini", **workspace) == 0
    used = json.loads(written.read_text())
    assert used["transport"] == "ipc", used
    assert not Path(used["ip"]).parent.exists()  # the folder went with the run


# A notebook writes its results in place: the folder says whether they belong together

RESULT_WRITER = """
from pathlib import Path
Path(output_dir, "results.txt").write_text("new")
"""


def test_a_failed_run_leaves_no_parameters_record_and_a_folder_the_report_refuses(
    workspace, capsys
) -> None:
    folder = workspace["output_root"] / "mini"
    assert runner.run(["01"], "mini", **workspace) == 0
    assert (folder / "01_ok.parameters.yaml").exists()
    assert not list(folder.glob("*.incomplete"))
    write_notebook(
        workspace["notebooks_dir"] / "01_ok.ipynb",
        RESULT_WRITER,
        "raise RuntimeError('after the results')",
    )
    assert runner.run(["01"], "mini", **workspace) == 1
    assert (folder / "results.txt").read_text() == "new"
    # nothing vouches for the new results: notebook 04 reuses notebook 03's only under a record
    assert not (folder / "01_ok.parameters.yaml").exists()
    assert not (folder / "01_ok.provenance.json").exists()
    assert "01_ok started at" in (folder / "01_ok.incomplete").read_text()
    with pytest.raises(
        page.ReportError, match=re.escape(f"{folder}: the last run of 01_ok did not finish")
    ):
        page.write_report("mini", folder)
    write_notebook(workspace["notebooks_dir"] / "01_ok.ipynb", RESULT_WRITER)
    assert runner.run(["01"], "mini", **workspace) == 0  # a finished run completes the folder
    assert (folder / "01_ok.parameters.yaml").exists()
    assert not (folder / "01_ok.incomplete").exists()


def test_a_run_killed_right_after_writing_results_leaves_no_parameters_record(workspace) -> None:
    root = workspace["notebooks_dir"].parent
    folder = workspace["output_root"] / "mini"
    (root / "run.py").write_text(RUNNER_SCRIPT.replace("01_workers", "01_ok"))
    command = [sys.executable, str(root / "run.py"), str(root)]
    env = os.environ | {"PYTHONPATH": str(REPO_ROOT)}
    (workspace["notebooks_dir"] / "02_fails.ipynb").unlink()
    assert subprocess.run(command, env=env, capture_output=True, timeout=300).returncode == 0
    assert (folder / "01_ok.parameters.yaml").exists()
    write_notebook(
        workspace["notebooks_dir"] / "01_ok.ipynb", RESULT_WRITER + "import time; time.sleep(600)"
    )
    process = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not (folder / "results.txt").exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the kernel is in its own session: it follows
    process.wait(timeout=30)
    assert not (folder / "01_ok.parameters.yaml").exists()
    assert (folder / "01_ok.incomplete").exists()
    assert page.incomplete_notebooks(folder) == ["01_ok"]


def test_notebook_04_reuses_notebook_03s_results_only_while_their_record_stands(
    tmp_path: Path,
) -> None:
    """What a new run of notebook 03 does first (runner.start_record) takes its earlier results
    out of notebook 04's reach until the new run has finished."""
    (planned,) = runner.plan(["03"], "ci", output_root=tmp_path)
    loaded, _ = params.load("04_when_concat_helps", "ci", output_dir=str(tmp_path / "ci"))
    (shared,) = [cell for cell in sweep_settings.cells(loaded) if cell.shared]
    runner.parameters_record(planned).parent.mkdir(parents=True)
    runner.parameters_record(planned).write_text(yaml.safe_dump(planned.parameters))
    pl.DataFrame({"variant": ["cat1"], "replicate": [0]}).write_parquet(
        tmp_path / "ci" / TIME_CONCAT.results
    )
    assert sweep.notebook03_results(loaded, shared)["variant"].to_list() == ["cat1"]
    runner.start_record(planned)
    assert sweep.notebook03_results(loaded, shared) is None
    assert page.incomplete_notebooks(tmp_path / "ci") == ["03_time_concat"]


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


def papermill(*arguments: str) -> subprocess.CompletedProcess:
    """Plain papermill (not `kit run`) in the kit's Python kernel, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "papermill", *arguments, "-k", "python3"],
        capture_output=True,
        text=True,
        timeout=600,
    )


def ci_into(folder: Path) -> list[str]:
    """papermill's options for the ci profile writing into `folder`."""
    return ["-p", "profile", "ci", "-p", "output_dir", str(folder)]


def papermill_cli(output: Path, yaml_text: str) -> subprocess.CompletedProcess:
    return papermill(
        str(NOTEBOOKS_DIR / "01_toy_counterexample.ipynb"),
        str(output),
        "-f",
        str(PARAMETERS_DIR / "ci" / "01_toy_counterexample.yaml"),
        "-y",
        yaml_text,
    )


def test_plain_papermill_with_a_parameter_file_runs(tmp_path: Path) -> None:
    small = (
        f"output_dir: {tmp_path / 'out'}\nshares: [0.7]\nreplicates: 2\nconcat_sizes: [1, 2]\n"
        "direct_replicates: 1\nweight_decays: [0.01]\nsteps: 100\nprobe_steps: 20\n"
        "chart_formats: [png]\n"
    )
    result = papermill_cli(tmp_path / "ok.ipynb", small)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Passed unknown parameter" not in result.stderr  # the cell declares every key
    assert (tmp_path / "out" / TOY.summary).exists()


@pytest.mark.parametrize(
    "bad, named", [("lr: '0.1'", "'lr'"), ("no_such_key_qq: 1", "'no_such_key_qq'")]
)
def test_plain_papermill_refuses_bad_or_unknown_parameters_in_the_notebook(
    tmp_path: Path, bad: str, named: str
) -> None:
    result = papermill_cli(tmp_path / "bad.ipynb", f"output_dir: {tmp_path}\n{bad}\n")
    assert result.returncode != 0
    assert "ParameterError" in result.stderr and named in result.stderr
    assert not (tmp_path / TOY.runs).exists()


def notebook_03_head(path: Path) -> None:
    """A stand-in for notebook 03 that runs its real parameters cell and reads its parameters,
    without training: what papermill injects reaches the settings or is refused."""
    notebook = nbformat.read(NOTEBOOKS_DIR / "03_time_concat.ipynb", as_version=4)
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    reads = nbformat.v4.new_code_cell(
        "from kit.params import kernel_params\n"
        "from kit.experiments import notebooks  # registers each notebook's schema\n"
        'P = kernel_params.from_notebook("03_time_concat", globals())\n'
        'print("lr", P.train.lr, "weight_decay", P.train.weight_decay,'
        ' "epochs", P.probes["fast"].epochs)'
    )
    notebook.cells = [parameters, reads]
    nbformat.write(notebook, path)


@pytest.mark.parametrize(
    "given, printed",
    [
        (["-p", "train.lr", "0.0625", "-p", "probes.fast.epochs", "7"], "lr 0.0625 weight_decay"),
        (["-y", "train: {lr: 0.0625}"], "lr 0.0625 weight_decay"),
        (["-p", "train.lrr", "0.0625"], "unknown parameter 'train.lrr'; did you mean 'train.lr'"),
    ],
    ids=["dotted", "mapping", "unknown-dotted"],
)
def test_plain_papermill_sets_a_key_inside_a_section(
    tmp_path: Path, given: list[str], printed: str
) -> None:
    """`-p train.lr 0.1` is written by papermill as `train.lr = 0.1`: the parameters cell's
    section takes it, the rest of the section stays the profile's, and an unknown key inside a
    section is refused naming it."""
    notebook_03_head(tmp_path / "head.ipynb")
    result = papermill(
        str(tmp_path / "head.ipynb"),
        str(tmp_path / "ran.ipynb"),
        *ci_into(tmp_path / "ci"),
        *given,
    )
    profile, _ = params.load("03_time_concat", "ci")
    if "unknown" in printed:
        assert result.returncode != 0
        assert "ParameterError" in result.stderr and printed in result.stderr
        assert "AttributeError" not in result.stderr
        return
    assert result.returncode == 0, result.stderr[-3000:]
    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)
    text = "".join(o.get("text", "") for o in ran.cells[-1].outputs)
    assert f"{printed} {profile.train.weight_decay}" in text  # the rest is the profile's
    epochs = 7 if "probes.fast.epochs" in given else profile.probes["fast"].epochs
    assert text.rstrip().endswith(f"epochs {epochs}"), text


def test_a_saved_parameter_file_replays_where_its_profile_says(tmp_path: Path) -> None:
    (planned,) = runner.plan(["02"], "ci", overrides={"output_dir": str(tmp_path / "ci")})
    saved = tmp_path / "02.parameters.yaml"
    saved.write_text(yaml.safe_dump(planned.parameters))
    result = papermill(
        str(NOTEBOOKS_DIR / "02_surveyed_evidence.ipynb"),
        str(tmp_path / "replayed.ipynb"),
        "-f",
        str(saved),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "ci" / EVIDENCE.summary).exists()


def test_a_notebook_run_outside_kit_run_takes_back_kit_runs_parameters_record(
    tmp_path: Path,
) -> None:
    """Plain papermill rewrites the folder's results but records nothing, so the record a kit
    run left there would vouch for results it no longer describes."""
    assert runner.run(["02"], "ci", output_root=tmp_path) == 0
    record = tmp_path / "ci" / "02_surveyed_evidence.parameters.yaml"
    assert record.exists()
    result = papermill(
        str(NOTEBOOKS_DIR / "02_surveyed_evidence.ipynb"),
        str(tmp_path / "plain.ipynb"),
        *ci_into(tmp_path / "ci"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not record.exists()


# ---------------------------------------------------------------------------------------------
# Progress lines while a notebook trains
# ---------------------------------------------------------------------------------------------


def append_record(run: Path, step: int, loss: float) -> None:
    """One row as kit.train logs it (after writing the run's config.yaml)."""
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "config.yaml").exists():
        (run / "config.yaml").write_text(yaml.safe_dump({"iterations": 40, "seed": 0}))
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write(
            json.dumps(
                {
                    "step": step,
                    "epoch": 0,
                    "loss": loss,
                    "lr": 0.01,
                    "images_per_s": 512.4,
                    "eval_accuracy": None,
                    "eval_loss": None,
                }
            )
            + "\n"
        )


def test_progress_lines_are_rate_limited_per_run_and_name_the_last_step(tmp_path: Path) -> None:
    old, new = tmp_path / "runs" / "old" / "seed0", tmp_path / "runs" / "cat2" / "seed1"
    append_record(old, 40, 0.5)  # finished before the watch: never reported again
    progress = terminal.TrainingProgress(tmp_path, "03", every_s=30)
    assert progress.poll(now=0) == []
    append_record(new, 10, 2.3456)
    assert progress.poll(now=1) == ["03 runs/cat2/seed1  step 10/40  loss 2.346  512 img/s"]
    append_record(new, 20, 2.0)
    assert progress.poll(now=2) == progress.poll(now=30) == []  # not due
    assert progress.poll(now=31) == ["03 runs/cat2/seed1  step 20/40  loss 2.000  512 img/s"]
    assert progress.poll(now=100) == []  # nothing changed
    append_record(new, 30, 1.5)
    append_record(new, 40, 1.25)  # the last step is reported at once
    assert progress.poll(now=101) == ["03 runs/cat2/seed1  step 40/40  loss 1.250  512 img/s  done"]
    assert progress.poll(now=500) == []


def test_progress_watch_stops_its_thread_when_the_notebook_fails(tmp_path: Path) -> None:
    lines: list[str] = []
    progress = terminal.TrainingProgress(tmp_path, "03", every_s=30)
    with (
        pytest.raises(RuntimeError, match="cell failed"),
        progress.watching(lines.append, poll_s=0.05),
    ):
        append_record(tmp_path / "run", 10, 2.0)
        deadline = time.monotonic() + 30
        while not lines:
            assert time.monotonic() < deadline, "no progress line within 30 s"
            time.sleep(0.05)
        append_record(tmp_path / "run", 40, 1.0)
        raise RuntimeError("cell failed")
    assert lines == [
        "03 run  step 10/40  loss 2.000  512 img/s",
        "03 run  step 40/40  loss 1.000  512 img/s  done",
    ]  # the last poll
    assert "kit-run-progress" not in [thread.name for thread in threading.enumerate()]


PROGRESS_LINE = re.compile(
    r"03 (?P<run>\S+)  step (?P<step>\d+)/(?P<total>\d+)  "
    r"loss (?P<loss>\S+)  (?P<rate>\d+) img/s(?P<done>  done)?"
)


def test_kit_run_prints_training_progress_while_notebook_03_trains(runner_output) -> None:
    output = runner_output("03_time_concat")
    assert output.returncode == 0, output.stderr[-3000:]
    loaded, _ = params.load("03_time_concat", "ci", output_dir=str(output.output_dir))
    budgets = {
        Path(t.output_dir).relative_to(output.output_dir).as_posix(): t.iterations
        for t in planning.plan(loaded).trainings
    }
    texts = [line for line, _ in output.lines]
    ended = next(i for i, line in enumerate(texts) if " done in " in line)
    progress = [
        (i, PROGRESS_LINE.fullmatch(line), running)
        for i, (line, running) in enumerate(output.lines)
        if PROGRESS_LINE.fullmatch(line)
    ]
    assert progress, texts
    assert all(running and i < ended for i, _, running in progress)  # read while it ran
    steps: dict[str, list[int]] = {}
    for _, match, _ in progress:
        assert int(match["total"]) == budgets[match["run"]], match[0]
        assert math.isfinite(float(match["loss"])) and int(match["rate"]) > 0, match[0]
        assert bool(match["done"]) == (int(match["step"]) == budgets[match["run"]]), match[0]
        steps.setdefault(match["run"], []).append(int(match["step"]))
    assert {run: seen[-1] for run, seen in steps.items()} == budgets  # every run, to its end
    assert all(seen == sorted(set(seen)) for seen in steps.values()), steps  # no line twice


def test_the_saved_notebook_03_keeps_each_runs_final_bar(notebook_outputs) -> None:
    folder = notebook_outputs("03_time_concat", TIME_CONCAT.summary)
    loaded, _ = params.load("03_time_concat", "ci", output_dir=str(folder))
    work = planning.runs_dir(loaded)
    budgets = {run_name(t, work): t.iterations for t in planning.plan(loaded).trainings}
    executed = nbformat.read(folder / "03_time_concat.ipynb", as_version=4)
    bars = {
        text.split(":")[0]: text
        for cell in executed.cells
        for output in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in output.get("data", {})
        for text in [output.data["text/plain"]]
    }
    probing = bars.pop(f"{loaded.probe_kind} probes")  # the probing step's own bar, at its end
    assert "100%" in probing, probing
    launch = bars.pop("runs")  # one bar for the launch, at its end; none per run
    assert "100%" in launch and f" {len(budgets)}/{len(budgets)} " in launch, launch
    assert not bars, bars
    folded = [
        output.data["text/html"]
        for cell in executed.cells
        for output in cell.get("outputs", [])
        if "own time (" in output.get("data", {}).get("text/html", "")
    ]
    assert len(folded) == 1, folded  # each run's own time, folded under the bar
    for name, total in budgets.items():  # each run's line: its steps when it ended, its own time
        assert f"{launch_progress.shown(name)}: {total}/{total} steps in " in folded[0], name


# ---------------------------------------------------------------------------------------------
# Stage lines (extraction, probes) and the summary
# ---------------------------------------------------------------------------------------------


def test_stage_records_become_lines_with_counts_rate_eta_and_what_was_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / ".stages.jsonl"
    monkeypatch.setenv(STAGE_FILE_ENV, str(path))
    clock = iter([100.0, 106.0, 110.0])
    monkeypatch.setattr(time, "time", lambda: next(clock))
    stage = Stage("features train", 20, "batch", "reused 2, extracting 3 checkpoints")
    watch = terminal.StageProgress(path, "03", every_s=5.0)
    assert watch.poll() == ["03 features train: reused 2, extracting 3 checkpoints"]
    stage.advance(2)  # within STAGE_EVERY_S of the first record: not written
    stage._written = 0.0
    stage.advance(8)  # 6 s after the start: 10 of 20 at 10/6 per s
    assert watch.poll() == ["03 features train  10/20 batch  1.7 batch/s  ETA 6 s"]
    stage.done = 20
    stage.finish("reused 2, extracted 3 checkpoints")
    assert watch.poll() == [
        "03 features train: reused 2, extracted 3 checkpoints (10.0 s, 2.0 batch/s)"
    ]
    assert watch.poll() == []  # each record read once


def test_a_stage_writes_nothing_without_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STAGE_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    Stage("probes", 3, "probe", "fitting 3").finish("fitted 3")
    assert list(tmp_path.iterdir()) == []


def test_a_notebook_step_without_progress_of_its_own_is_not_silent() -> None:
    lines: list[str] = []
    with terminal.watching(
        [], lines.append, poll_s=0.01, heartbeat=lambda: "03 running", quiet_s=0.1
    ):
        time.sleep(0.55)
    assert 3 <= lines.count("03 running") <= 6
    lines.clear()
    with terminal.watching([], lines.append, poll_s=0.01):  # no heartbeat asked: nothing
        time.sleep(0.2)
    assert lines == []


def test_the_summary_names_time_output_and_the_claims_written_by_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "outputs" / "ci"
    out.mkdir(parents=True)
    (out / "old_summary.json").write_text(json.dumps({"claim": {"line": "stale claim"}}))
    os.utime(out / "old_summary.json", (1.0, 1.0))
    (out / TIME_CONCAT.summary).write_text(
        json.dumps(
            {
                "claim": {"status": "inconclusive", "line": "cat2 transfers better"},
                "claims": [
                    {"status": "inconclusive", "line": "cat2 transfers better"},
                    {"status": "reproduced", "line": "direct beats cat1"},
                ],
                "ran": "What ran: profile ci",
            }
        )
    )
    (out / TOY.summary).write_text(json.dumps({"no": "claim"}))
    (out / SWEEP.summary).write_text(json.dumps({"claim": {"line": "a later notebook's"}}))
    started = time.time() - 5
    os.utime(out / SWEEP.summary, (started + 60, started + 60))
    lines = terminal.summary(
        [terminal.Finished("03_time_concat", out / "03_time_concat.ipynb", out, 12.34, started)],
        "ci",
    )
    assert lines == [
        "summary: 1 notebook in 12.3 s, profile ci, results in outputs/ci",
        "  03_time_concat     12.3 s  outputs/ci/03_time_concat.ipynb",
        "    claim: cat2 transfers better",
        "    claim: direct beats cat1",
        "    ran: What ran: profile ci",
    ]


def test_kit_run_reports_its_stages_and_ends_with_a_summary(runner_output) -> None:
    output = runner_output("03_time_concat")
    assert output.returncode == 0, output.stderr[-3000:]
    texts = [line for line, _ in output.lines]
    assert any(re.fullmatch(r"03 training: reused \d+, trained \d+ \(.*\)", t) for t in texts)
    assert any(
        re.fullmatch(
            r"03 features \w+ \(\d+ rows\): reused \d+ of \d+ cached "
            r"representations?, extracted \d+.*",
            t,
        )
        for t in texts
    ), texts
    assert any(
        re.fullmatch(r"03 probes: reused 0, fitted \d+ .*(probe/s|s/probe)\)", t) for t in texts
    ), texts
    summary = texts.index(next(t for t in texts if t.startswith("summary: 1 notebook in")))
    assert texts[summary + 1].split()[0] == "03_time_concat"
    assert any(t.startswith("    claim: ") for t in texts[summary:])
    assert any(t.startswith("    ran: What ran: profile ci") for t in texts[summary:])
    assert "without encryption" not in output.stderr + "\n".join(texts)


def test_a_slow_stage_is_timed_in_seconds_per_unit() -> None:
    assert terminal.speed_text(0.25, "probe") == "4.0 s/probe"
    assert terminal.speed_text(2.0, "batch") == "2.0 batch/s"


def test_kernels_the_runner_starts_from_a_lab_kernel_draw_charts_for_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`!python -m kit run` in a Lab notebook inherits Lab's session variable; the kernels it
    starts must not take it, or their charts would be widgets the report cannot read."""
    from papermill.exceptions import PapermillExecutionError

    from kit.report import charts

    notebooks, parameters = tmp_path / "nb", tmp_path / "params"
    notebooks.mkdir()
    (parameters / "mini").mkdir(parents=True)
    monkeypatch.setitem(params.SCHEMAS, "01_ok", params.NotebookSettings)
    nbformat.write(nbformat.v4.new_notebook(), notebooks / "01_ok.ipynb")
    monkeypatch.setenv(charts.JUPYTER_SESSION_ENV, "notebooks/01_toy_counterexample.ipynb")
    seen = []

    def kernel_environment(*_: object, **__: object) -> None:
        seen.append(os.environ.get(charts.JUPYTER_SESSION_ENV))
        raise PapermillExecutionError(0, 1, "", "Stop", "seen", [])

    monkeypatch.setattr(runner.papermill, "execute_notebook", kernel_environment)
    code = runner.run(
        None, "mini", notebooks_dir=notebooks, parameters_dir=parameters, output_root=tmp_path
    )
    assert (code, seen) == (1, [None])
    assert os.environ[charts.JUPYTER_SESSION_ENV] == "notebooks/01_toy_counterexample.ipynb"


def test_a_stopped_worker_is_named_in_the_heartbeat_after_its_bound() -> None:
    """A worker stopped with SIGSTOP makes no progress and writes nothing: once stopped for
    the bound, the heartbeat names it and says how to resume it, rather than only `running`."""
    worker = subprocess.Popen(["sleep", "600"])
    try:
        os.kill(worker.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while psutil.Process(worker.pid).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, "never stopped"
            time.sleep(0.05)
        watch = processes.StoppedWatch(bound_s=30.0)
        assert watch.lines(now=1000.0) == []  # first seen stopped: within its bound
        said = (
            f"process pid {worker.pid} (sleep 600) has been stopped for 31 s and makes no "
            f"progress: resume it with `kill -CONT {worker.pid}`, or stop the run"
        )
        assert watch.lines(now=1031.0) == [said]
        beat = runner._running("03", time.perf_counter(), processes.StoppedWatch(bound_s=0.0))
        assert beat.splitlines()[0] == "03 running (0 s)"
        assert beat.splitlines()[1].startswith(f"03 process pid {worker.pid} (sleep 600) has been")
        os.kill(worker.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while psutil.Process(worker.pid).status() == psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, "never resumed"
            time.sleep(0.05)
        assert watch.lines(now=1100.0) == [] and watch.since == {}
    finally:
        worker.kill()
        worker.wait()
