"""A run's metrics: the rows of metrics.jsonl, their table, and the trackers that log them live.

Training only writes rows; reading them as a table takes polars, imported where a table is read,
so that `python -m kit.train` runs where only the training path's packages are installed (a
cluster's own PyTorch with the kit's small dependencies beside it)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.files import files
from kit.files.paths import resolve
from kit.readout import notices
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings
from kit.train.trackers import TRACKERS

if TYPE_CHECKING:
    import polars as pl

    from kit.runtime.distributed import Process

#: a metrics row's columns. At each logging step: the mean training loss of the steps since the
#: previous one (every rank), the learning rate schedule-free AdamW scheduled, the images per
#: second the run trained (the global batch, timed on rank 0), `data_wait_s`: the seconds per
#: step rank 0 waited for its next batch from the loader (on CUDA the host runs ahead of the
#: device, so a wait slows the run only where it is a large share of a step's time, batch_size /
#: images_per_s), and `gpu_memory_gib`: the most GPU memory rank 0's tensors held since the
#: previous row (null off CUDA), `decode_fallbacks`: with `data.decode: gpu`, the training images of
#: rank 0's batches since the previous row that its first-choice decoder did not decode (a GPU's
#: hardware JPEG engines, or its CUDA decoder where it has none) and a fallback did (the CUDA or
#: the CPU decoder: progressive, CMYK or greyscale JPEGs, other formats, files the engines refused;
#: kit.data.hardware; null with other decode paths); at evaluations, top-1 accuracy and
#: cross-entropy on the evaluation split (polars types: `read_metrics` reads them)
METRICS_SCHEMA = {
    "step": "Int64",
    "epoch": "Int64",
    "loss": "Float64",
    "lr": "Float64",
    "images_per_s": "Float64",
    "data_wait_s": "Float64",
    "gpu_memory_gib": "Float64",
    "decode_fallbacks": "Int64",
    "eval_accuracy": "Float64",
    "eval_loss": "Float64",
}


class MetricsError(ValueError):
    """A metrics.jsonl with a line that is not a record (corrupted, or torn and then appended
    to); the message names the file, the line and how to recover."""


def read_metrics(run_dir: str | Path) -> pl.DataFrame:
    """A run's metrics.jsonl as a table (eval columns are null between evaluations). A last line
    torn by a kill (no newline, not JSON) of a run that has not finished is left out, as a
    resumed run drops it, and said as a notice (kit.readout.notices: the run's summary and report
    list it); in a finished run (its DONE marker) it would take the last rows with it, so it
    raises MetricsError, as any other bad line does, naming the file and the line."""
    import polars as pl

    folder = RunFolder(resolve(run_dir))
    path = folder.metrics
    content = path.read_bytes()
    if content and not content.endswith(b"\n"):
        end = content.rfind(b"\n") + 1
        try:
            json.loads(content[end:])
        except ValueError:
            number = content.count(b"\n") + 1
            if folder.done.exists():
                raise MetricsError(
                    f"{path}: line {number}, the last, is torn ({content[end:][:60]!r}) although "
                    f"the run finished ({RunFolder.DONE} present), so its last records are lost; "
                    f"delete the run folder {path.parent} to train the run again"
                ) from None
            notices.notice(
                f"{path}: line {number}, the last, is torn (the run has not "
                "finished: a kill mid-line); left out"
            )
            content = content[:end]
    try:
        schema = {column: getattr(pl, kind) for column, kind in METRICS_SCHEMA.items()}
        return pl.read_ndjson(io.BytesIO(content), schema=schema)
    except pl.exceptions.PolarsError as error:
        raise MetricsError(_bad_line(path, content, error)) from None


def _bad_line(path: Path, content: bytes, error: Exception) -> str:
    """What is wrong with metrics.jsonl, naming the first line that is not a record."""
    recover = (
        f"delete that line (the run keeps its other records), or the run folder "
        f"{path.parent} to train the run again; re-running an unfinished run also drops "
        "it when the run resumes"
    )
    for number, line in enumerate(content.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            return (
                f"{path}: line {number} is not a JSON record (torn by a kill or corrupted: "
                f"{line[:60]!r}); {recover}"
            )
    return f"{path}: unreadable as metrics ({error}); {recover}"


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
    """Drop rows a killed run logged after the checkpoint it resumes from, and a row torn by the
    kill or otherwise not a record (said on stderr)."""
    if not path.exists():
        return
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            print(f"{path}: line {number} is torn or corrupted, dropped", file=sys.stderr)
            continue
        if row["step"] <= step:
            rows.append(line)
    with files.atomic_write(path) as handle:
        handle.write("".join(f"{row}\n" for row in rows).encode())


@contextlib.contextmanager
def tracking(
    settings: TrainSettings, out: Path, step: int, process: Process
) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A function logging a metrics record to every tracker the run's `trackers` names
    (kit.train.trackers), each written through at every record so that the run can be followed
    live, and the commands that follow it said on stdout; it does nothing on ranks but 0. `step`
    is where the run starts or resumes."""
    if not (settings.trackers and process.main):
        yield lambda record: None
        return
    with contextlib.ExitStack() as stack:
        logs = []
        for name in settings.trackers:
            tracker = TRACKERS.get(name)
            logs.append(stack.enter_context(tracker.logging(out, step)))
            print(f"follow {out.name} live: {tracker.follow(out, one_run=True)}", flush=True)

        def log(record: dict[str, Any]) -> None:
            for each in logs:
                each(record)

        yield log
