"""TensorBoard: event files in the run folder, read by `tensorboard --logdir`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from kit.train.trackers.base import Log, Tracker


class TensorBoard(Tracker):
    """Scalars in `events.out.tfevents.*` files in the run folder (torch's SummaryWriter). A
    resumed run hides the events a killed one logged after its checkpoint (`purge_step`), so
    each step shows the value the run kept."""

    name = "tensorboard"
    modules = ("tensorboard",)
    extra = "tensorboard"
    requirements = "tensorboard"

    def follow(self, folder: Path, *, one_run: bool) -> str:
        return f"tensorboard --logdir {folder}"  # it finds runs at any depth

    @contextlib.contextmanager
    def logging(self, out: Path, step: int) -> Iterator[Log]:
        from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when asked

        with SummaryWriter(log_dir=str(out), purge_step=step or None) as writer:

            def log(record: dict) -> None:
                for key, value in record.items():
                    if key != "step" and value is not None:
                        writer.add_scalar(key, value, record["step"])
                writer.flush()

            yield log
