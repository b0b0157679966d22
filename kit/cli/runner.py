"""Run notebooks headless with papermill, with validated, layered parameters.

The runner adds convenience, not magic: it computes the same parameters a user could pass to
`papermill -f`, refuses bad ones before any notebook starts, runs each notebook in the current
Python environment with `notebooks/` as working directory, and keeps the executed copy under
`outputs/<profile>/`. A run is written beside the previous one (`<name>.partial.ipynb`) and
replaces it only on success, so a failed run keeps the last good executed notebook.

A notebook writes its result files in place as it runs, so an output folder is only as good as
its records: before a notebook starts, the runner writes `<name>.incomplete` and removes the
notebook's parameters record (`<name>.parameters.yaml`) and provenance; it writes them back, and
removes the marker, only once every cell succeeded. A run killed or failed at any of its writes
therefore leaves no record saying which parameters the folder's results came from: notebook 04
reuses notebook 03's results only under a record that matches, and the report refuses a folder
that holds a marker (kit.report.page), naming it.

While a notebook runs, the runner prints what its kernel does (kit.cli.terminal): a line per
training run as its `metrics.jsonl` grows, and the stages the kernel reports through the file
named by kit.readout.progress.STAGE_FILE_ENV (extraction, probes: counts, rate, ETA, what was
reused); at the end, a summary per notebook, with every input its kernel or workers read
unverified (kit.readout.notices, kept as `<name>.notices.json`; said at once when the notebook
fails, as no summary follows). The kernel's own log is kept to errors.

The kernel talks to the runner over Unix sockets in a folder of the run's own (ZeroMQ's `ipc`
transport), not TCP ports: a port jupyter_client found free can be taken by another process
before the kernel binds it (kit runs or papermill jobs side by side on one node; the kernel then
runs without its heartbeat, printing a traceback), and local TCP is unencrypted.

One run per output folder at a time (kit.files.locks). SIGTERM, SIGINT or SIGHUP (what `timeout`,
`kill`, schedulers, Ctrl-C and a closed terminal send) stops the kernel and every process it
started (training workers included, whatever process group they are in) and says how to resume,
without a traceback.
SIGKILL (which no handler sees) ends the kernel too: jupyter_client starts it in its own session
with JPY_PARENT_PID naming the runner, and ipykernel's parent poller (ipykernel/parentpoller.py)
exits within a second of the runner's death; the kernel's workers then get their parent-death
signal (kit.runtime.processes.dying_with_parent).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import papermill
import psutil
import yaml
from papermill.exceptions import PapermillExecutionError
from traitlets.config import Config

import kit.experiments.notebooks  # noqa: F401 (registers each notebook's schema)
from kit.cli import kernels, notebook_params, terminal, time_concat, write_errors
from kit.cli.notebook_params import find_notebooks as find_notebooks
from kit.data.preflight import folder_of_its_own, writable_problems
from kit.files import checkouts, locks
from kit.files.files import DiskFullError, atomic_write, remove_stale_temporaries, write_text
from kit.files.paths import NOTEBOOKS_DIR, PARAMETERS_DIR, REPO_ROOT, resolve
from kit.params import params
from kit.readout import notices
from kit.readout.progress import STAGE_FILE_ENV
from kit.report import charts, page
from kit.runtime import provenance
from kit.runtime.processes import StoppedWatch, signal_handlers

#: the kernel of the interpreter running the kit: jupyter_client maps "python3" to sys.executable
KERNEL_NAME = "python3"
#: seconds the workers get to save and exit after SIGTERM before they are killed
STOP_GRACE_S = 20.0
INTERRUPTED = terminal.INTERRUPTED
#: the kernel's own log: errors only
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=ERROR"]
#: the longest socket folder the ipc transport takes: a Unix socket's path holds at most 107
#: bytes and jupyter_client adds '-<port>' to it; a longer temporary folder keeps TCP
SOCKET_PATH_MAX = 90


#: the signals that stop a run: a kill or a scheduler, Ctrl-C, a closed terminal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(Exception):
    """The runner received one of STOP_SIGNALS; its workers have been stopped."""


@dataclass(frozen=True)
class PlannedRun:
    notebook: Path
    output: Path
    parameters: dict[str, Any]
    #: what `kit check` says of the inputs it found (NotebookSettings.input_notes)
    notes: tuple[str, ...] = ()
    #: the commands that follow its training runs live (NotebookSettings.live_views)
    live: tuple[str, ...] = ()


def plan(
    names: list[str] | None,
    profile: str,
    files: list[Path] | None = None,
    overrides: Mapping[str, Any] | None = None,
    notebooks_dir: Path = NOTEBOOKS_DIR,
    parameters_dir: Path = PARAMETERS_DIR,
    output_root: Path | None = None,
) -> list[PlannedRun]:
    """Resolve and validate every notebook's parameters and check what they name (data roots,
    checkpoints: `params.check_inputs`); raises ParameterError before any run (a problem several
    notebooks share, such as an unknown profile, said once). Without notebook
    names, each notebook takes the overrides its schema has (`train.lr` goes to the notebooks
    with a `train` section). `output_root` moves the default output folder
    (`<output_root>/<profile>`)."""
    runs = []
    output_dir = None if output_root is None else str(output_root / profile)
    loaded, problems = notebook_params.load_all(
        names, profile, files, overrides, notebooks_dir, parameters_dir, output_dir
    )
    for notebook, validated, sources in loaded:
        try:
            params.check_inputs(notebook.stem, validated, sources)
        except params.ParameterError as error:
            problems.append(str(error))
            continue
        runs.append(
            PlannedRun(
                notebook,
                resolve(validated.output_dir) / notebook.name,
                validated.model_dump(),
                tuple(validated.input_notes()),
                tuple(validated.live_views()),
            )
        )
    if problems:
        raise params.ParameterError("\n".join(dict.fromkeys(problems)))
    return runs


def output_problems(runs: list[PlannedRun]) -> list[str]:
    """Output folders (the executed copies' and each notebook's output_dir) that cannot be
    written, found before anything runs."""
    folders = {run.output.parent for run in runs}
    folders |= {
        resolve(run.parameters["output_dir"]) for run in runs if run.parameters.get("output_dir")
    }
    return [
        problem
        for folder in sorted(folders)
        for problem in folder_of_its_own(folder) or writable_problems(folder)
    ]


def held_problems(runs: list[PlannedRun]) -> list[str]:
    """Output folders a running `kit run` holds now (kit.files.locks), named with its pid, start
    and command: `kit check` says so rather than calling them valid."""
    return [
        f"{folder}: in use by {found}; a run writes this folder now: wait for it to finish or "
        "stop that process, then check again"
        for folder in sorted({run.output.parent for run in runs})
        if (found := locks.held_by(folder)) is not None
    ]


def machine_problems(runs: list[PlannedRun]) -> list[str]:
    """This machine against the runs' plans (free disk, GPUs, compiler, /dev/shm): the same
    check as `kit check`, so that a run does not find a full disk hours in."""
    return time_concat.machine_problems({run.notebook.stem: run.parameters for run in runs})


def partial_output(run: PlannedRun) -> Path:
    """Where a run's executed notebook is written until it succeeds (and kept when it fails)."""
    return run.output.with_name(f"{run.output.stem}.partial.ipynb")


def parameters_record(run: PlannedRun) -> Path:
    """The parameters a notebook's results in its output folder came from; present only when
    its last run finished."""
    return run.output.with_suffix(params.RECORD_SUFFIX)


def start_record(run: PlannedRun) -> None:
    """Mark the notebook's results as being rewritten (the marker first, so that no moment
    leaves a record without it), then remove the records that vouch for them."""
    run.output.parent.mkdir(parents=True, exist_ok=True)
    write_text(
        page.incomplete_marker(run.output),
        (
            f"{run.notebook.stem} started at {time.strftime('%Y-%m-%d %H:%M:%S %z')} (pid "
            f"{os.getpid()}) and has not finished: the result files of this folder may mix its "
            "files with an earlier run's. `python -m kit run` removes this file when the notebook "
            "succeeds; re-run it to complete the folder.\n"
        ),
    )
    for path in (
        parameters_record(run),
        run.output.with_suffix(".provenance.json"),
        run.output.with_suffix(notices.SUFFIX),
        notices_file(run),
    ):
        path.unlink(missing_ok=True)


def notices_file(run: PlannedRun) -> Path:
    """Where the kernel running `run` (and its workers) append their notices."""
    return run.output.with_name(f".{run.output.stem}.notices.jsonl")


def execute(run: PlannedRun, notebooks_dir: Path = NOTEBOOKS_DIR) -> None:
    """Execute one notebook; its executed copy and parameters replace the previous ones only
    when every cell succeeded, and until then the folder says it is incomplete."""
    start_record(run)
    start = time.perf_counter()
    partial = partial_output(run)
    with kernel_sockets() as sockets:
        papermill.execute_notebook(
            str(run.notebook),
            str(partial),
            parameters=run.parameters,
            kernel_name=KERNEL_NAME,
            cwd=str(notebooks_dir),
            progress_bar=False,
            extra_arguments=KERNEL_ARGUMENTS,
            **sockets,
        )
    with atomic_write(parameters_record(run)) as handle:
        handle.write(yaml.safe_dump(run.parameters, sort_keys=False).encode())
    provenance.write(
        run.output.with_suffix(".provenance.json"),
        wall_s=round(time.perf_counter() - start, 1),
        read_unverified=notices.collected(notices_file(run)),
    )
    os.replace(partial, run.output)
    page.incomplete_marker(run.output).unlink()  # last: the folder is complete


@contextlib.contextmanager
def kernel_sockets() -> Iterator[dict[str, Config]]:
    """papermill's settings that put the kernel's sockets in a temporary folder of their own
    (module docstring: why not TCP); none where that folder's path is too long for a socket."""
    with tempfile.TemporaryDirectory(prefix="kit-kernel-") as folder:
        base = os.path.join(folder, "kernel")
        if len(base) > SOCKET_PATH_MAX:
            yield {}
        else:
            yield {"config": Config(KernelManager={"transport": "ipc", "ip": base})}


def stop_workers(grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to every process this one started (and to their process groups, so that workers
    in the kernel's own session are reached too), SIGKILL to those alive after `grace_s`."""
    me = psutil.Process()
    workers = me.children(recursive=True)
    groups = set()
    for worker in workers:
        with contextlib.suppress(psutil.Error, OSError):
            groups.add(os.getpgid(worker.pid))
    groups.discard(os.getpgrp())
    _signal(groups, workers, signal.SIGTERM)
    _, alive = psutil.wait_procs(workers, timeout=grace_s)
    _signal(groups, alive, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)


def _signal(groups: set[int], workers: list[psutil.Process], sig: signal.Signals) -> None:
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, sig)
    for worker in workers:
        with contextlib.suppress(psutil.Error):
            worker.send_signal(sig)


#: the signal that stopped the current run: raised inside nbclient's event loop, Interrupted
#: can come out as the kernel's death (DeadKernelError) instead, which then means the same
_stopped_by: list[int] = []


def _stop(signum: int, frame: object) -> None:
    for each in STOP_SIGNALS:  # a second signal does not cut the stop short
        signal.signal(each, signal.SIG_IGN)
    _stopped_by.append(signum)
    stop_workers()
    raise Interrupted(signal.Signals(signum).name)


def run(
    names: list[str] | None,
    profile: str,
    files: list[Path] | None = None,
    overrides: Mapping[str, Any] | None = None,
    notebooks_dir: Path = NOTEBOOKS_DIR,
    parameters_dir: Path = PARAMETERS_DIR,
    output_root: Path | None = None,
) -> int:
    """Run notebooks in order; returns a process exit code (0 when every notebook succeeded).
    Refused first where its kernels would import another checkout's kit (kit.cli.kernels)."""
    split = kernels.split_problem("run", notebooks_dir)
    if split is not None:
        print(f"error: {split}", file=sys.stderr)
        return 2
    try:
        runs = plan(names, profile, files, overrides, notebooks_dir, parameters_dir, output_root)
    except params.ParameterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not runs:
        print(f"error: no notebooks to run in {notebooks_dir}", file=sys.stderr)
        return 2
    problems = output_problems(runs) + machine_problems(runs)
    if problems:
        print("error: " + "\n".join(problems), file=sys.stderr)
        return 2
    output_dir = runs[0].output.parent  # every notebook of a profile writes there
    _stopped_by.clear()
    try:
        with (
            locks.hold(output_dir, f"kit run --profile {profile}"),
            signal_handlers(STOP_SIGNALS, _stop),
        ):
            remove_stale_temporaries(output_dir)
            return _run_all(runs, profile, notebooks_dir)
    except locks.FolderLocked as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        if not _stopped_by:  # Interrupted, or what nbclient made of it
            if isinstance(error, DiskFullError):  # a write step's own record: one line
                print(f"error: {error}", file=sys.stderr, flush=True)
                return 1
            raise
        print(INTERRUPTED, file=sys.stderr, flush=True)
        return 128 + _stopped_by[0]


def stage_file(run: PlannedRun) -> Path:
    """Where the kernel running `run` appends its stage records (kit.readout.progress)."""
    return run.output.with_name(f".{run.output.stem}.stages.jsonl")


def _running(short: str, start: float, stopped: StoppedWatch | None = None) -> str:
    """The heartbeat line of a notebook that has printed nothing for a while, with a line for
    each process of the run stopped past its bound (a stopped worker: kit.runtime.processes)."""
    said = [f"{short} running ({time.perf_counter() - start:.0f} s)"]
    return "\n".join(said + [f"{short} {line}" for line in (stopped.lines() if stopped else [])])


def _run_all(runs: list[PlannedRun], profile: str, notebooks_dir: Path) -> int:
    every_s = terminal.PROGRESS_EVERY_S[sys.stdout.isatty()]
    finished = []
    for index, planned in enumerate(runs, start=1):
        label = f"[{index}/{len(runs)}] {planned.notebook.name} (profile {profile})"
        live = [f"\n{label} follow training live: {line}" for line in planned.live]
        print(f"{label} ...{''.join(live)}", flush=True)
        start, started = time.perf_counter(), time.time()
        watched = resolve(planned.parameters.get("output_dir") or planned.output.parent)
        short = planned.notebook.stem.split("_", 1)[0]
        stages = stage_file(planned)
        stages.parent.mkdir(parents=True, exist_ok=True)
        stages.write_text("")
        kernel_env = {  # the kernel inherits them; it checks the last two (kit.files.checkouts)
            STAGE_FILE_ENV: str(stages),
            notices.NOTICES_FILE_ENV: str(notices_file(planned)),
            checkouts.KIT_ROOT_ENV: str(REPO_ROOT),
            checkouts.OUTPUT_DIR_ENV: str(watched),
        }
        os.environ.update(kernel_env)
        # a run started in a Lab notebook (`!python -m kit run`) inherits Lab's session; without
        # it, its kernels' charts are their spec and PNG, which the report reads, not widgets
        lab_session = os.environ.pop(charts.JUPYTER_SESSION_ENV, None)
        succeeded = False
        try:
            with terminal.watching(
                [
                    terminal.TrainingProgress(watched, short, every_s),
                    terminal.StageProgress(stages, short, every_s),
                ],
                heartbeat=functools.partial(_running, short, start, StoppedWatch()),
                quiet_s=terminal.QUIET_S[sys.stdout.isatty()],
            ):
                execute(planned, notebooks_dir)
            succeeded = True
        except PapermillExecutionError as error:
            kept = (
                f"; the last good run's stays in {planned.output}"
                if planned.output.exists()
                else ""
            )
            print(
                f"{label} FAILED in cell {error.cell_index} (execution count "
                f"{error.exec_count}): {error.ename}: {error.evalue}\n"
                f"  partial output kept in {partial_output(planned)}{kept}",
                file=sys.stderr,
                flush=True,
            )
            return 1
        except Exception as error:
            full = write_errors.disk_full_line(planned.output, partial_output(planned), error)
            if full is None:
                raise
            print(f"{label} FAILED: {full}", file=sys.stderr, flush=True)
            return 1
        finally:
            for name in kernel_env:
                os.environ.pop(name, None)
            if lab_session is not None:
                os.environ[charts.JUPYTER_SESSION_ENV] = lab_session
            said = notices.publish(
                notices_file(planned), planned.output.with_suffix(notices.SUFFIX)
            )
            for line in [] if succeeded else said:  # no summary follows a failure
                print(f"{label} read unverified: {line}", file=sys.stderr, flush=True)
        seconds = time.perf_counter() - start
        print(f"{label} done in {seconds:.1f} s -> {terminal.shown(planned.output)}", flush=True)
        finished.append(
            terminal.Finished(
                planned.notebook.stem, planned.output, watched, seconds, started, tuple(said)
            )
        )
    print("\n".join(terminal.summary(finished, profile)), flush=True)
    try:
        print(
            f"report: {terminal.shown(page.write_report(profile, runs[0].output.parent))}",
            flush=True,
        )
    except (page.ReportError, OSError) as error:
        print(
            f"error: report not written: {write_errors.write_error(error)}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0
