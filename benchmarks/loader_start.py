"""What starting loader workers costs per run: forked from the trainer, forked by a fork server,
or spawned.

    python benchmarks/loader_start.py [--runs 4] [--workers 2] [--cifar-mb 0]

Builds a run's three loaders (training, BatchNorm recalibration, evaluation; kit.data.pipeline)
on the ci profile's synthetic world, as each run of a chain does, and times each loader's first
batch (its workers started and its first batch made) over `--runs` runs in this one process, for
each start method. A run's later batches cost the same whichever way the workers started. The
fork server's first run also pays starting the server (one Python start and PRELOAD's imports,
once per process). `--cifar-mb` adds a numpy array of that many MB to the dataset, as CIFAR's
images were held before they moved to shared memory, which a fork server or spawn pickles to
every worker (benchmarks/shared_dataset.py compares the two).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from kit.data import pipeline, workers
from kit.data.settings import DataSettings


class Carrying(torch.utils.data.Dataset):
    """A dataset holding a numpy array besides its samples (as CIFAR's images were held)."""

    def __init__(self, base: torch.utils.data.Dataset, megabytes: int) -> None:
        self.base, self.array = base, np.ones(megabytes * 1_000_000, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key):
        return self.base[key]


def run_start_s(method: str, count: int, cifar_mb: int) -> float:
    """Seconds from building a run's loaders to the first batch of each."""
    data = DataSettings(
        kind="synthetic",
        image_size=16,
        synthetic={
            "num_train": 512,
            "num_eval": 256,
            "noise": 0.1,
            "components": [{"weight": 1.0, "cues": ["colour"]}],
        },
    )
    start = time.perf_counter()
    run = pipeline.build(data, 4, 0, 32, 0, 1, count, 2, pin_memory=False)
    for loader in (run.train, run.recalibration, run.eval):
        loader.multiprocessing_context = workers.context(method)
        if cifar_mb:
            loader.dataset.base = Carrying(loader.dataset.base, cifar_mb)
        next(iter(loader))
    seconds = time.perf_counter() - start
    del run
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cifar-mb", type=int, default=0)
    parser.add_argument("--methods", nargs="+", default=["fork", "forkserver", "spawn"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for method in args.methods:
        times = [run_start_s(method, args.workers, args.cifar_mb) for _ in range(args.runs)]
        print(
            f"{method:>10}: first run {times[0]:.2f} s, later runs median "
            f"{statistics.median(times[1:]):.2f} s (3 loaders x {args.workers} workers"
            f"{f', {args.cifar_mb} MB in memory' if args.cifar_mb else ''})",
            flush=True,
        )


if __name__ == "__main__":
    main()
