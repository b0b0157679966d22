"""Progress of a launch's runs, read from the metrics.jsonl their trainers append to: one bar
for the launch, and each run's own elapsed time and rate, folded beneath it."""

from __future__ import annotations

import html
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.launch.runs import is_finished
from kit.readout.progress import KeptBar
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings


def last_record(metrics: Path) -> dict[str, Any] | None:
    """The last complete row of a run's metrics.jsonl (None before the first)."""
    try:
        with metrics.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            lines = handle.read().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines[:-1]):  # the part after the last newline may be torn
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "step" in row:  # a corrupted line may still be JSON
            return row
    return None


#: a variant's run on one task ('direct-shape') as the charts and tables name it ('direct
#: (shape)'): kit.report.labels.VALUE_PATTERNS's words, which this layer cannot import
#: (tests/test_progress.py holds the two to one name)
PER_TASK_RUN = (re.compile(r"^direct-(\w+)$"), r"direct (\1)")


def shown(name: str) -> str:
    """A run's name as a reader reads it: 'rep0__cat1__seed0' as 'replicate 0, cat1, seed 0',
    'rep0__direct-shape__seed0' as 'replicate 0, direct (shape), seed 0'."""
    parts = name.split("__")
    return ", ".join(
        PER_TASK_RUN[0].sub(PER_TASK_RUN[1], re.sub(r"^(rep|seed)(\d+)$", _spelled, part))
        for part in parts
    )


def _spelled(match: re.Match[str]) -> str:
    return f"{'replicate' if match[1] == 'rep' else 'seed'} {match[2]}"


@dataclass
class RunClock:
    """One run's own clock, read from its metrics as the launch polls them: when its work
    began (its first record dated back by the steps it covers, at the rate it gives), the last
    step and record seen, and when it ended (None while it runs)."""

    total: int
    began: float | None = None
    step: int = 0
    record: dict[str, Any] = field(default_factory=dict)
    ended: float | None = None

    def seen(self, record: dict[str, Any], images: int, now: float) -> None:
        """A record read at `now`: `images` images a step, for dating the first one back."""
        if self.began is None:
            self.began = now - record["step"] * images / max(record["images_per_s"], 1e-9)
        self.step, self.record = record["step"], record

    def line(self, name: str) -> str:
        """The run in one line, with its own elapsed time and rate (not the launch's)."""
        if self.began is None or self.ended is None:
            return f"{name}: {self.step}/{self.total} steps, no record read"
        elapsed = max(self.ended - self.began, 1e-9)
        loss = f", loss {self.record['loss']:.3f}" if "loss" in self.record else ""
        return (
            f"{name}: {self.step}/{self.total} steps in {elapsed:.1f} s "
            f"({self.step / elapsed:.1f} step/s){loss}"
        )


class Progress:
    """A launch's progress: one bar counting its runs (its elapsed time and rate are the
    launch's), the run in progress named beside it, and per run a line with that run's own
    elapsed time and rate, closed when the run finishes (its DONE marker, or its last step
    logged), not when its worker's chain or the launch ends. `close` shows the lines folded
    under the bar in a notebook (`Folded`)."""

    def __init__(self, total: int) -> None:
        self.bar = KeptBar(total=total, desc="runs", unit="run", leave=True)
        self.clocks: dict[str, RunClock] = {}

    def start(self, name: str, settings: TrainSettings) -> None:
        self.clocks[name] = RunClock(settings.iterations)

    def update(self, name: str, settings: TrainSettings) -> None:
        clock = self.clocks[name]
        if clock.ended is not None:
            return
        now = time.monotonic()
        record = last_record(RunFolder.of(settings).metrics)
        if record and record["step"] > clock.step:
            clock.seen(record, settings.batch_size, now)
            self.bar.set_postfix_str(f"{shown(name)}: {clock.step}/{clock.total}", refresh=False)
        if clock.step >= clock.total or is_finished(settings):
            clock.ended = now
            self.bar.update(1)

    def finish(self, name: str, settings: TrainSettings) -> None:
        """The run's worker ended: read its last record, and end its clock if still open."""
        self.update(name, settings)
        clock = self.clocks[name]
        if clock.ended is None:
            clock.ended = time.monotonic()

    def lines(self) -> list[str]:
        return [clock.line(shown(name)) for name, clock in self.clocks.items()]

    def close(self) -> None:
        """Close the bar and show each run's line, folded in a notebook."""
        self.bar.set_postfix_str("", refresh=False)
        self.bar.close()
        if "ipykernel" in sys.modules and self.clocks:
            from IPython.display import display

            display(Folded(f"each run's own time ({len(self.clocks)} runs)", self.lines()))


@dataclass(frozen=True)
class Folded:
    """Lines under a summary that opens on a click (HTML `<details>`); as plain text, the
    summary alone."""

    summary: str
    lines: list[str]

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines)
        return f"<details><summary>{html.escape(self.summary)}</summary><ul>{items}</ul></details>"

    def __repr__(self) -> str:
        return self.summary
