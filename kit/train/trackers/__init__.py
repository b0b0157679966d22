"""The registry of metric trackers (`trackers` in a run's settings): one module per tracker,
registered below; nothing else names one.

To add a tracker, write a module here with a kit.train.trackers.base.Tracker subclass and
register an instance of it in the loop at the end of this file. Free of torch and of every
tracker's package: a tracker imports them only when a run logs to it.
"""

from __future__ import annotations

from kit.params.registry import Registry
from kit.train.trackers import mlflow_runs, tensorboard_events
from kit.train.trackers.base import Log, Tracker

__all__ = ["TRACKERS", "Log", "Tracker"]

#: every tracker by the name `trackers` gives
TRACKERS: Registry[Tracker] = Registry("tracker")

for tracker in (tensorboard_events.TensorBoard(), mlflow_runs.MLflow()):
    TRACKERS.register(tracker.name, tracker)
