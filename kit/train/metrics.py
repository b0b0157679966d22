"""A run's metrics: the rows of metrics.jsonl, their table, and their TensorBoard scalars."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from kit.core import files
from kit.core.paths import resolve
from kit.train.settings import TrainSettings

if TYPE_CHECKING:
    from kit.core.distributed import Process

METRICS = "metrics.jsonl"
METRICS_SCHEMA = {"step": pl.Int64, "epoch": pl.Int64, "loss": pl.Float64, "lr": pl.Float64,
                  "images_per_s": pl.Float64, "eval_accuracy": pl.Float64,
                  "eval_loss": pl.Float64}


def read_metrics(run_dir: str | Path) -> pl.DataFrame:
    """A run's metrics.jsonl as a table (eval columns are null between evaluations)."""
    return pl.read_ndjson(resolve(run_dir) / METRICS, schema=METRICS_SCHEMA)


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Add one row to a run's metrics.jsonl (DiskFullError naming it when the disk is full)."""
    try:
        with path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError as error:
        if (full := files.disk_full(error, path)) is not None:
            raise full from error
        raise


def keep_metrics_until(path: Path, step: int) -> None:
    """Drop rows a killed run logged after the checkpoint it resumes from, and a last row torn
    by the kill (said on stderr)."""
    if not path.exists():
        return
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            row = json.loads(line) if line else None
        except json.JSONDecodeError:
            print(f"{path}: line {number} is torn (a killed write), dropped", file=sys.stderr)
            continue
        if row is not None and row["step"] <= step:
            rows.append(line)
    with files.atomic_write(path) as handle:
        handle.write("".join(f"{row}\n" for row in rows).encode())


@contextlib.contextmanager
def tensorboard_scalars(cfg: TrainSettings, out: Path, step: int, process: Process
                        ) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A function logging a metrics record's numbers as TensorBoard scalars in the run folder
    (`tensorboard --logdir` over the runs' parent folder), flushed at every record so that a
    run can be watched live; it does nothing unless `tensorboard` is set, and on ranks but 0.
    A resumed run hides the events a killed one logged after its checkpoint (purge_step)."""
    if not (cfg.tensorboard and process.main):
        yield lambda record: None
        return
    from torch.utils.tensorboard import (
        SummaryWriter,  # imports tensorboard: only when asked
    )

    with SummaryWriter(log_dir=str(out), purge_step=step or None) as writer:
        def log(record: dict[str, Any]) -> None:
            for key, value in record.items():
                if key != "step" and value is not None:
                    writer.add_scalar(key, value, record["step"])
            writer.flush()

        yield log
