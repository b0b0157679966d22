"""What checking a checkpoint's hash costs, next to saving and loading it; and what the feature
cache pays per hit: hashing its arrays on every read, against comparing their change stamps.

    python benchmarks/file_hash.py [--model resnet50] [--width 1.0] [--features-gb 0.5]

Saves a training-style checkpoint (weights, schedule-free AdamW state: about 3x the weights) of
a freshly built kit ResNet through kit.files.files.hashed_write (hashing while writing), then times
verifying its recorded hash (one full read, SHA-256), torch.load, and plain SHA-256 throughput.
The file is read from the page cache, as it is right after a save; a cold read from a network
file system adds that file system's read time to both the hash and the load.

With `--features-gb` it also writes a cache entry of that many GB of float16 features
(kit.features' layout) and times a hit both ways: a full SHA-256 of the arrays (what verifying on
every read would cost) and the marker check kit.features makes (the files' change stamps).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import schedulefree
import torch

from kit import feature_cache, models
from kit.files import files


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument(
        "--features-gb",
        type=float,
        default=0.0,
        help="also time a feature-cache hit on an entry of this size",
    )
    args = parser.parse_args()
    checkpoint_costs(args)
    if args.features_gb > 0:
        cache_hit_costs(args.features_gb)


def checkpoint_costs(args: argparse.Namespace) -> None:
    model = models.build(args.model, 1000, args.width)
    optimizer = schedulefree.AdamWScheduleFree(model.parameters(), lr=1e-3)
    optimizer.train()
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    optimizer.step()
    optimizer.eval()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.pt"

        def save_plain() -> None:
            with files.atomic_write(path) as handle:
                torch.save(state, handle)

        def save_hashed() -> None:
            with files.hashed_write(path) as handle:
                torch.save(state, handle)

        plain_s, hashed_s = timed(save_plain), timed(save_hashed)
        size_gb = path.stat().st_size / 1e9
        verify_s = timed(lambda: files.verify(path, ""))
        load_s = timed(lambda: torch.load(path, map_location="cpu", weights_only=True))
    print(f"{args.model} width {args.width}: checkpoint {size_gb:.3f} GB")
    print(f"save without hash {plain_s:.2f} s, with hash while writing {hashed_s:.2f} s")
    print(
        f"verify on load {verify_s:.2f} s ({size_gb / verify_s:.2f} GB/s), "
        f"torch.load {load_s:.2f} s"
    )


def cache_hit_costs(size_gb: float) -> None:
    """A feature-cache entry of `size_gb` GB: a hit verified by hashing against one vouched for
    by its marker's change stamps (the marker written by a first, hashing hit)."""
    columns = 8192
    rows = max(1, int(size_gb * 1e9 / (2 * columns)))
    with tempfile.TemporaryDirectory() as folder:
        entry = Path(folder) / "entry"
        entry.mkdir()
        array = np.lib.format.open_memmap(
            entry / "features.npy", mode="w+", dtype=np.float16, shape=(rows, columns)
        )
        for start in range(0, rows, 4096):
            stop = min(start + 4096, rows)
            array[start:stop] = np.random.default_rng(start).standard_normal(
                (stop - start, columns), dtype=np.float32
            )
        array.flush()
        del array
        np.save(entry / "labels.npy", np.zeros(rows, dtype=np.int64))
        record = {"rows": rows, "content": feature_cache.array_content(entry)}
        (entry / "record.json").write_text(json.dumps(record))
        read_gb = sum((entry / name).stat().st_size for name in feature_cache.ARRAYS) / 1e9
        hash_s = timed(lambda: feature_cache.array_content(entry))
        first_s = timed(lambda: feature_cache.verified(entry))  # hashes, writes the marker
        repeats = 100
        stamp_s = timed(lambda: [feature_cache.verified(entry) for _ in range(repeats)]) / repeats
    print(
        f"feature-cache entry {read_gb:.2f} GB: hash on every hit {hash_s:.2f} s "
        f"({read_gb / hash_s:.2f} GB/s); first hit (hash, marker) {first_s:.2f} s; "
        f"later hits (change stamps) {stamp_s * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
