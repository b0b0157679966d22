"""Progress that reads cleanly wherever it runs: bars in a notebook, stage records for a terminal.

In a kernel a bar is tqdm.auto's widget, shown under a display id and shown again when it
closes: a notebook executed without a frontend (papermill) then keeps the bar's final state as
text, not the empty bar the widget was when first displayed, as the widget's one output (no
second copy as text). On a terminal a bar redraws every second; in a log, every 30 s at most. A
widget shown through `Described` reads as a sentence, not as its repr, where no frontend draws it.

A bar's elapsed time and rate are its own work's: time spent inside `paused()` (extracting the
features a probe bar's probes then read) counts for no open bar, so the first probe's ETA is
not the extraction's time spread over the probes left. Before its first unit a bar shows no ETA.
Finished, a bar shows its count over that elapsed time as its rate (tqdm's widget would keep
the smoothed rate of its last units, which its time belies), and keeps that time in every
later draw.
The same holds for an open `Stage`: its records carry the seconds it spent paused, which the
terminal's lines leave out of its rate and ETA.

A `Stage` (feature extraction, probing, training as a whole) also appends JSON records to the
file that STAGE_FILE_ENV names, which `python -m kit run` sets for the kernel it starts and reads
as the notebook runs, to print what the kernel does (counts, rate, what was reused); without the
variable (JupyterLab, plain papermill) a stage writes nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm
from tqdm.notebook import tqdm as widget_tqdm

from kit.readout.numbers import counted

WIDGETS = issubclass(tqdm, widget_tqdm)
#: the bars shown and not closed yet, whose clocks `paused` stops
_OPEN: weakref.WeakSet[KeptBar] = weakref.WeakSet()
#: the stages begun and not finished yet, whose paused seconds `paused` counts
_OPEN_STAGES: weakref.WeakSet[Stage] = weakref.WeakSet()


@contextmanager
def paused() -> Iterator[None]:
    """Time spent inside is no open bar's work: each open KeptBar's clock (its elapsed time,
    and the interval its rate is measured over) moves on by the time spent, when it ends. Also
    a decorator: a function whose run belongs to no bar's work (feature extraction)."""
    bars = [(bar, bar._time()) for bar in list(_OPEN)]
    stages, began_s = list(_OPEN_STAGES), time.time()
    try:
        yield
    finally:
        for bar, began in bars:
            spent = bar._time() - began
            bar.start_t += spent
            bar.last_print_t += spent
        for stage in stages:
            stage.paused_s += time.time() - began_s


class KeptBar(tqdm):
    """A tqdm.auto bar whose last state stays in a saved notebook; with `stage`, also a Stage of
    that name counting the same units for `python -m kit run`."""

    #: tqdm's clock (time.time, read when the bar is made), stopped by `close`
    _time: Callable[[], float]

    def __init__(self, *args: Any, stage: str | None = None, **kwargs: Any) -> None:
        self._shown = None  # before tqdm's __init__, which may close a disabled bar
        self._stage: Stage | None = None
        interactive = sys.stderr.isatty() or "ipykernel" in sys.modules
        kwargs.setdefault("mininterval", 1 if interactive else 30)
        if WIDGETS:
            kwargs["display"] = False
        super().__init__(*args, **kwargs)
        if WIDGETS and not self.disable:
            from IPython.display import display

            self._shown = display(self.container, display_id=True)
        if not self.disable:
            _OPEN.add(self)
        if stage is not None:
            total = self.total or 0
            self._stage = Stage(stage, total, self.unit, counted(total, self.unit))

    def __iter__(self) -> Iterator[Any]:
        """Each item counted by `update`, whose clock `paused` moves. tqdm's own loop keeps its
        last draw's time in a local variable that a pause does not move: after a pause it calls
        `update` early, which then draws nothing, and counts the same items again at its next
        call (a rate above the work's own)."""
        if self.disable:
            yield from self.iterable
            return
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def update(self, n: float | None = 1) -> bool | None:
        if self._stage is not None:
            self._stage.advance(int(n or 0))
        return super().update(n)

    def close(self) -> None:
        """End the bar at its own rate: its count over its own elapsed time (tqdm's widget
        keeps its smoothed rate of the last units, on a finished bar a rate its time belies),
        and that time kept as it was at the end, in every later draw of the bar."""
        if not self.disable:
            ended = self._time()
            self._time = lambda: ended
            self._ema_dt = lambda: None  # tqdm's overall rate: (n - initial) / elapsed
        if self._stage is not None:
            self._stage.done = int(self.n)  # iterating, tqdm counts without update()
            self._stage.finish(f"{counted(self._stage.done, self.unit)} done")
            self._stage = None
        _OPEN.discard(self)
        super().close()
        if self._shown is not None:
            self._shown.update(self.container)
            self._shown = None


#: the environment variable naming the file stage records are appended to
STAGE_FILE_ENV = "KIT_STAGE_FILE"
#: seconds between two records of one stage (its first and last are always written)
STAGE_EVERY_S = 1.0


class Stage:
    """One step of a notebook, reported to `python -m kit run`: a first record saying what it
    will do (`note`: what was reused, what is left), one every STAGE_EVERY_S seconds at most as
    `advance` counts `unit`s towards `total`, and a last one from `finish`."""

    def __init__(self, name: str, total: int, unit: str, note: str) -> None:
        self.name, self.total, self.unit, self.done = name, total, unit, 0
        #: seconds spent inside `paused()` while the stage was open: not its work
        self.paused_s = 0.0
        _OPEN_STAGES.add(self)
        rank = os.environ.get("RANK", "0")  # under torchrun, the first rank speaks for all
        self.path = os.environ.get(STAGE_FILE_ENV) if rank == "0" else None
        self._written = 0.0
        self._write(note, final=False)

    def advance(self, count: int = 1) -> None:
        self.done += count
        if time.monotonic() - self._written >= STAGE_EVERY_S:
            self._write("", final=False)

    def finish(self, note: str) -> None:
        _OPEN_STAGES.discard(self)
        self._write(note, final=True)

    def _write(self, note: str, final: bool) -> None:
        self._written = time.monotonic()
        if not self.path:
            return
        record = {
            "stage": self.name,
            "done": self.done,
            "total": self.total,
            "unit": self.unit,
            "note": note,
            "final": final,
            "time": time.time(),
            "paused_s": self.paused_s,
        }
        with open(self.path, "a") as handle:  # one short line: appended whole
            handle.write(json.dumps(record) + "\n")


def stage_spans(path: Path) -> dict[str, tuple[float, int]]:
    """A notebook's stage records (`Stage`, appended to the file STAGE_FILE_ENV names) read
    back: per stage name, the seconds from each occurrence's first record to its last, summed
    over its occurrences (a stage that holds another, as the probes stage holds extraction,
    counts the inner one's time too), and their totals summed (the units of work each occurrence
    announced). Empty where the file does not exist (a notebook run in Lab)."""
    if not path.is_file():
        return {}
    first: dict[str, float] = {}
    found: dict[str, tuple[float, int]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        stage, at = record["stage"], record["time"]
        first.setdefault(stage, at)
        if record.get("final"):
            seconds, total = found.get(stage, (0.0, 0))
            found[stage] = (seconds + at - first.pop(stage), total + int(record.get("total", 0)))
    return found


class Described:
    """A widget that reads as `text` wherever no frontend draws it (a notebook executed
    headless and shown on GitHub, nbviewer or as HTML) instead of its `VBox(children=...)` repr;
    JupyterLab draws the widget itself."""

    def __init__(self, widget: Any, text: str) -> None:
        self.widget, self.text = widget, text

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return self.widget._repr_mimebundle_(**kwargs) | {"text/plain": self.text}
