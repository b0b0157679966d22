"""Progress bars of running runs, read from the metrics.jsonl their trainers append to."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kit.core.progress import KeptBar
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


class Progress:
    """One bar per running run (a `KeptBar`), read from its metrics.jsonl: step/total, loss,
    images/s."""

    def __init__(self) -> None:
        self.bars: dict[str, KeptBar] = {}

    def start(self, name: str, settings: TrainSettings) -> None:
        self.bars[name] = KeptBar(
            total=settings.iterations, desc=name, unit="step", position=len(self.bars), leave=True
        )

    def update(self, name: str, settings: TrainSettings) -> None:
        record = last_record(RunFolder.of(settings).metrics)
        bar = self.bars[name]
        if record and record["step"] > bar.n:
            if bar.n == 0:  # a run that waited its turn in a chain: its clock starts when it did,
                bar.reset(total=bar.total)  # as its first record's rate dates it
                bar.start_t -= (
                    record["step"] * settings.batch_size / max(record["images_per_s"], 1e-9)
                )
            bar.set_postfix(
                loss=f"{record['loss']:.3f}", img_s=f"{record['images_per_s']:.0f}", refresh=False
            )
            bar.update(record["step"] - bar.n)

    def finish(self, name: str, settings: TrainSettings) -> None:
        self.update(name, settings)
        self.bars[name].close()
