"""The interface of a metric tracker: a place besides metrics.jsonl where rank 0 logs each metrics
record as it is written, so that an hours-long run can be followed live (`trackers` in a run's
settings), and the command that shows it."""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

#: logs one metrics record: its numbers under their keys, at its `step`
Log = Callable[[dict[str, Any]], None]


class Tracker(ABC):
    """One tracker: its name in `trackers`, the packages it needs and how to install them, where
    it logs and the command that follows the runs it logged."""

    #: the name a run's `trackers` list gives
    name: ClassVar[str]
    #: the modules it imports when a run logs to it
    modules: ClassVar[tuple[str, ...]]
    #: the kit's extra that installs them (`pip install -e '.[<extra>]'`)
    extra: ClassVar[str]
    #: the same packages for a plain pip
    requirements: ClassVar[str]

    def missing(self) -> str | None:
        """Why this environment cannot log to the tracker (a package not installed), else None:
        checked before a run starts, never by validation."""
        absent = [module for module in self.modules if importlib.util.find_spec(module) is None]
        if not absent:
            return None
        return (
            f"the {', '.join(absent)} package{'s are' if len(absent) > 1 else ' is'} not "
            f"installed; install with `pip install -e '.[{self.extra}]'` (or `pip install "
            f"{self.requirements}`), or take {self.name} out of trackers"
        )

    @abstractmethod
    def follow(self, folder: Path, *, one_run: bool) -> str:
        """The command that shows live what runs log to the tracker: the run in `folder`, or
        (`one_run` false) the runs in run folders anywhere under it."""

    @abstractmethod
    def logging(self, out: Path, step: int) -> AbstractContextManager[Log]:
        """A function logging the numbers of a record (None values left out, its `step` the x
        axis) for the run in `out`, written through at every record; `step` is where the run
        starts (0) or resumes from its checkpoint."""
