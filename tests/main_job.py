"""The executed ci main job that the tests reading a finished run share (tests/conftest.py's
`runner_output` and `notebook_outputs`): `python -m kit run` of each notebook in turn, as a user
runs it, into one folder, once per test session.

Either test process may run any reader: the first to ask runs what is missing while holding a
file lock, and writes, beside the folder, a record of what each run printed when that run has
ended (the marker that it is finished); a process asking meanwhile waits on the lock, then reads
the records. The tests never write into the folder: they copy what they write to.

Each session keeps its main job in a folder of its own (`claim`), so that two sessions in one
checkout (the fast lane in one terminal while the full suite runs in another) never remove or
read each other's runs half made.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kit.files import files
from kit.files.paths import REPO_ROOT


@dataclass(frozen=True)
class RunnerOutput:
    """What `python -m kit run` printed: each stdout line with whether the runner was still
    running when the line was read (read while it ran, through a pipe), and its stderr."""

    lines: list[tuple[str, bool]]
    returncode: int
    stderr: str
    output_dir: Path


#: how often a process waiting for another's run looks for its record (a blocking lock would
#: let the builder take it again for its next notebook before the waiter saw the record)
POLL_S = 0.5
#: the main job's `kit run` processes this test process started (ended with the session)
RUNNING: list[subprocess.Popen] = []


def claim(folder: Path) -> IO[str]:
    """Make `folder` this session's, empty, under its lock (`<folder>.lock`, returned open: held
    until it is closed or the process ends); then remove the folders beside it whose session has
    ended (their lock free, or none: an earlier layout's), never one another session is using."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = folder.with_name(f"{folder.name}.lock").open("a")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a pid is one living session's
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for other in folder.parent.iterdir():
        if other == folder or not other.is_dir():
            continue
        held = other.with_name(f"{other.name}.lock")
        with contextlib.suppress(FileNotFoundError), held.open("r") as theirs:
            try:
                fcntl.flock(theirs, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its session is running
        shutil.rmtree(other, ignore_errors=True)
        held.unlink(missing_ok=True)
    return lock


def kit_run(stem: str, profile: str, output_dir: Path, environment: dict[str, str]) -> RunnerOutput:
    """Run one notebook with `profile` through the runner's command line, into `output_dir`."""
    command = [sys.executable, "-m", "kit", "run", stem, "--profile", profile]
    command += ["--set", f"output_dir={output_dir}"]
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=REPO_ROOT,
            env=environment | {"PYTHONPATH": str(REPO_ROOT)},
            start_new_session=True,  # its kernel and workers in its group, ended with it
        )
        RUNNING.append(process)
        assert process.stdout is not None
        lines = [(line.rstrip("\n"), process.poll() is None) for line in process.stdout]
        returncode = process.wait(timeout=60)
        stderr.seek(0)
        return RunnerOutput(lines, returncode, stderr.read(), output_dir)


def run(
    stem: str, reads: dict[str, str], profile: str, root: Path, environment: dict[str, str]
) -> RunnerOutput:
    """What `kit run <stem> --profile <profile>` printed in the main job under `root` (its folder
    root/profile), the notebook whose runs it reads (`reads[stem]`) run first: each run once,
    by whichever process asks first."""
    record = root / f"{stem}.runner.json"
    root.mkdir(parents=True, exist_ok=True)
    for each in [*([reads[stem]] if stem in reads else []), stem]:
        done = root / f"{each}.runner.json"
        while not done.exists():
            with (root / ".build.lock").open("w") as lock:  # one notebook at a time
                try:  # released when the file closes
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # another notebook may be running: look again
                    time.sleep(POLL_S)
                    continue
                if not done.exists():  # not run by the process that held the lock
                    _record(kit_run(each, profile, root / profile, environment), done)
    read = json.loads(record.read_text())
    lines = [(line, running) for line, running in read["lines"]]
    return RunnerOutput(lines, read["returncode"], read["stderr"], root / profile)


def _record(output: RunnerOutput, done: Path) -> None:
    """Write what a run printed to `done`, whole or not at all (its presence says it ended)."""
    content = {"lines": output.lines, "returncode": output.returncode, "stderr": output.stderr}
    files.write_text(done, json.dumps(content))


def end_running() -> None:
    """End a main job's run still going (a session cut short, `-x`): its record was not written,
    and the next session starts the folder again."""
    for process in RUNNING:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
