"""What `python -m kit run` prints while a notebook runs, and the summary at its end.

Two sources, both files the kernel's work writes under the notebook's output folder, polled in
one background thread: every training run's `metrics.jsonl` (TrainingProgress: run, step/total,
loss, images/s) and the notebook's stage records (StageProgress, written by kit.readout.progress:
feature extraction, probes, trainings as a whole, with counts, rate, ETA and what was reused).
On a terminal a line of one run or stage is due every few seconds; in a log (not a tty), every
30 s; first and last lines always. After the last notebook, `summary` says per notebook its wall
time, where its executed copy is, the claim line its `*_summary.json` states, if any, and every
input it read unverified.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from kit.launch.progress import last_record
from kit.readout.numbers import counted
from kit.report import outputs
from kit.train.run_files import RunFolder

#: what an interrupted `python -m kit run` says last
INTERRUPTED = "interrupted; re-run the same command to resume"
#: seconds between two progress lines of one training run or stage: on a terminal, in a log
PROGRESS_EVERY_S = {True: 5.0, False: 30.0}
#: seconds without a line after which the runner says the notebook is still running: on a
#: terminal, in a log
QUIET_S = {True: 8.0, False: 60.0}
#: seconds between two looks at the output folder for files that grew
PROGRESS_POLL_S = 1.0


class Poller(Protocol):
    def poll(self) -> list[str]: ...


@contextlib.contextmanager
def watching(
    pollers: Sequence[Poller],
    write: Callable[[str], None] = lambda line: print(line, flush=True),
    poll_s: float = PROGRESS_POLL_S,
    heartbeat: Callable[[], str] | None = None,
    quiet_s: float = QUIET_S[True],
) -> Iterator[None]:
    """Poll in a background thread while the body runs; one last poll when it ends (what
    finished since), and the thread stopped whether the body succeeds or raises. With
    `heartbeat`, its line is written whenever nothing was for `quiet_s` seconds (a step that
    reports no progress of its own is not a silent minute)."""
    stop = threading.Event()
    last = [time.monotonic()]

    def emit(line: str) -> None:
        write(line)
        last[0] = time.monotonic()

    def poll_all() -> None:
        for poller in pollers:
            for line in poller.poll():
                emit(line)

    def loop() -> None:
        while not stop.wait(poll_s):
            poll_all()
            if heartbeat is not None and time.monotonic() - last[0] >= quiet_s:
                emit(heartbeat())

    thread = threading.Thread(target=loop, name="kit-run-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        poll_all()


class TrainingProgress:
    """Progress lines for the runner's terminal while a notebook trains, read from the
    `metrics.jsonl` of every run folder under `folder` that grows after the watch starts (the
    trainers write them whatever launched them): the first record of a run at once, then at most
    every `every_s` seconds, and the run's last step when it gets there."""

    def __init__(self, folder: Path, label: str, every_s: float) -> None:
        self.folder, self.label, self.every_s = folder, label, every_s
        self._seen = {path: self._stamp(path) for path in self._metrics_files()}
        self._printed: dict[Path, float] = {}
        self._totals: dict[Path, int] = {}

    def _metrics_files(self) -> list[Path]:
        try:
            return sorted(self.folder.rglob(RunFolder.METRICS)) if self.folder.is_dir() else []
        except OSError:  # a folder removed while walked (a cache entry moved into place)
            return []

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int] | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        return stat.st_size, stat.st_mtime_ns

    def _total(self, run: Path) -> int | None:
        """The run's budget, from the config.yaml its trainer writes before any metrics."""
        if run not in self._totals:
            try:
                self._totals[run] = int((RunFolder(run).read_config() or {})["iterations"])
            except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
                return None
        return self._totals[run]

    def poll(self, now: float | None = None) -> list[str]:
        """Lines for the runs whose metrics grew since the last poll and are due."""
        now = time.monotonic() if now is None else now
        lines = []
        for path in self._metrics_files():
            stamp = self._stamp(path)
            if stamp is None or stamp == self._seen.get(path):
                continue
            record = last_record(path)
            total = self._total(path.parent)
            finished = record is not None and record["step"] == total
            last = self._printed.get(path)
            if record is None or not (finished or last is None or now - last >= self.every_s):
                continue  # not due: looked at again when it grows next
            self._seen[path], self._printed[path] = stamp, now
            name = path.parent.relative_to(self.folder).as_posix()
            steps = f"{record['step']}/{total}" if total else str(record["step"])
            lines.append(
                f"{self.label} {name}  step {steps}  loss {record['loss']:.3f}  "
                f"{record['images_per_s']:.0f} img/s" + ("  done" if finished else "")
            )
        return lines

    def watching(
        self,
        write: Callable[[str], None] = lambda line: print(line, flush=True),
        poll_s: float = PROGRESS_POLL_S,
    ) -> contextlib.AbstractContextManager[None]:
        """This progress alone, polled while the body runs (see `watching`)."""
        return watching([self], write, poll_s)


@dataclass
class _StageSeen:
    started: float
    done: int = 0
    printed: float = field(default=0.0)


class StageProgress:
    """Lines from a notebook's stage records (kit.readout.progress.Stage), read from `path` as
    they are appended: a stage's first record with its note at once, then its count, rate and
    ETA at most every `every_s` seconds of the kernel's clock, and its last record with its note
    and duration."""

    def __init__(self, path: Path, label: str, every_s: float) -> None:
        self.path, self.label, self.every_s = path, label, every_s
        self._offset = 0
        self._stages: dict[str, _StageSeen] = {}

    def _records(self) -> list[dict]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(complete)
        records = []
        for line in complete.splitlines():
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
        return [r for r in records if isinstance(r, dict) and "stage" in r]

    def poll(self) -> list[str]:
        """Lines for the records appended since the last poll that are due."""
        lines = []
        for record in self._records():
            name, at = f"{self.label} {record['stage']}", record["time"]
            seen = self._stages.get(record["stage"])
            if seen is None or (record["done"] == 0 and not record["final"]):
                seen = self._stages[record["stage"]] = _StageSeen(at, printed=at)
                if record["note"]:
                    lines.append(f"{name}: {record['note']}")
                if record["final"]:
                    continue
            elapsed = at - seen.started - record.get("paused_s", 0.0)  # its own work's time
            rate = record["done"] / elapsed if elapsed > 0 else 0.0
            unit = record["unit"]
            if record["final"]:
                speed = f", {speed_text(rate, unit)}" if record["done"] and rate else ""
                lines.append(f"{name}: {record['note']} ({elapsed:.1f} s{speed})")
                del self._stages[record["stage"]]
            elif record["done"] > seen.done and at - seen.printed >= self.every_s:
                seen.done, seen.printed = record["done"], at
                left = (record["total"] - record["done"]) / rate if rate else float("nan")
                lines.append(
                    f"{name}  {record['done']}/{record['total']} {unit}  "
                    f"{speed_text(rate, unit)}  ETA {left:.0f} s"
                )
        return lines


def speed_text(rate: float, unit: str) -> str:
    """A rate as units per second, or seconds per unit when below one a second."""
    return f"{rate:.1f} {unit}/s" if rate >= 1 else f"{1 / rate:.1f} s/{unit}"


@dataclass(frozen=True)
class Finished:
    """A notebook the runner executed: its executed copy, output folder and wall time."""

    notebook: str
    output: Path
    output_dir: Path
    seconds: float
    started: float  # time.time() when it started: the summaries it wrote are newer
    notices: tuple[str, ...] = ()  # inputs it read unverified (kit.readout.notices)


#: the label of a summary statement, by its status (a claim's status: "claim")
LABELS = {"": "ran", outputs.NEXT: "to decide"}


def claim_lines(output_dir: Path, since: float, until: float) -> list[str]:
    """The claim lines (`claim: ...`), what-ran lines (`ran: ...`) and what would decide the
    claims left undecided (`to decide: ...`) of the `*_summary.json`
    files written in `output_dir` between `since` and `until` (one notebook's run: a later
    notebook's summaries are not its own)."""
    lines = []
    for path in sorted(output_dir.glob(f"*{outputs.SUMMARY_SUFFIX}")):
        try:
            if not since <= path.stat().st_mtime <= until:
                continue
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict):
            lines += [
                f"{LABELS.get(status, 'claim')}: {line}"
                for status, line in outputs.statements(summary)
            ]
    return lines


def shown(path: Path) -> str:
    """A path relative to the working folder where it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def summary(finished: list[Finished], profile: str) -> list[str]:
    """The runner's last lines: per notebook its wall time, executed copy, claim lines and the
    inputs it read unverified."""
    total = sum(run.seconds for run in finished)
    lines = [
        f"summary: {counted(len(finished), 'notebook')} in {total:.1f} s, profile {profile}, "
        f"results in {shown(finished[0].output_dir)}"
        if finished
        else "summary: nothing ran"
    ]
    width = max((len(run.notebook) for run in finished), default=0)
    for run in finished:
        lines.append(f"  {run.notebook:<{width}}  {run.seconds:7.1f} s  {shown(run.output)}")
        lines += [
            f"    {line}"
            for line in claim_lines(run.output_dir, run.started, run.started + run.seconds)
        ]
        lines += [f"    read unverified: {line}" for line in run.notices]
    return lines
