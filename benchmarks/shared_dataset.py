"""What a dataset held in memory costs each loader worker: copied (a numpy array, pickled to each
worker) or shared (kit.data.workers.shareable, as CIFAR's arrays are held).

    python benchmarks/shared_dataset.py [--mb 300] [--workers 4] [--repeats 3]

Builds a CIFAR-like dataset of `--mb` MB of uint8 32 x 32 images, then, for each way of holding
it, starts a loader's `--workers` workers from the kit's fork server (started once beforehand)
and times the loader's first batch: the workers started, each sent its dataset, one batch made.
Prints the bytes pickled per worker (what the fork server passes on), the median seconds to the
first batch, and the workers' private memory (USS) summed over them once the batch arrived. The
shared way's first pickle also moves the arrays into shared memory, once: timed apart, before
the loaders.
"""

from __future__ import annotations

import argparse
import statistics
import time
from multiprocessing.reduction import ForkingPickler

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset

from kit.data import workers
from kit.data.kinds.images import CifarImages


class Copied(Dataset):
    """CIFAR's images and labels as numpy arrays: pickled whole to every worker."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(self.images[index]).permute(2, 0, 1), int(self.labels[index])


def first_batch(dataset: Dataset, count: int) -> tuple[float, int]:
    """Seconds to a loader's first batch with `count` fork-server workers, and the workers'
    summed private memory then."""
    loader = DataLoader(
        dataset, batch_size=256, num_workers=count, multiprocessing_context=workers.context()
    )
    start = time.perf_counter()
    batches = iter(loader)
    next(batches)
    seconds = time.perf_counter() - start
    private = sum(psutil.Process(w.pid).memory_full_info().uss for w in batches._workers)
    del batches
    return seconds, private


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    count = args.mb * 1_000_000 // 3072
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 100, count)
    first_batch(Copied(images[:256], labels[:256]), args.workers)  # the server's start, once
    shared = CifarImages(images, labels.tolist(), [str(c) for c in range(100)])
    start = time.perf_counter()
    ForkingPickler.dumps(shared)  # the first pickle moves the arrays into shared memory
    copy_s = time.perf_counter() - start
    print(f"{count:,} images, {images.nbytes / 1e6:.0f} MB; {args.workers} workers", flush=True)
    for name, dataset in (("copied", Copied(images, labels)), ("shared", shared)):
        sent = len(ForkingPickler.dumps(dataset))
        runs = [first_batch(dataset, args.workers) for _ in range(args.repeats)]
        seconds = statistics.median(s for s, _ in runs)
        private = statistics.median(m for _, m in runs)
        print(
            f"{name:>7}: {sent / 1e6:,.3f} MB pickled per worker, first batch "
            f"{seconds:.2f} s (median of {args.repeats}), workers' private memory "
            f"{private / 1e6:,.0f} MB"
            + (
                f"; the first pickle's move into shared memory {copy_s:.2f} s"
                if name == "shared"
                else ""
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
