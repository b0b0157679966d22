"""What checking a checkpoint's hash costs, next to saving and loading it.

    python benchmarks/file_hash.py [--model resnet50] [--width 1.0]

Saves a training-style checkpoint (weights, schedule-free AdamW state: about 3x the weights) of
a freshly built kit ResNet through kit.core.files.hashed_write (hashing while writing), then times
verifying its recorded hash (one full read, SHA-256), torch.load, and plain SHA-256 throughput.
The file is read from the page cache, as it is right after a save; a cold read from a network
file system adds that file system's read time to both the hash and the load.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import schedulefree
import torch

from kit import models
from kit.core import files


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--width", type=float, default=1.0)
    args = parser.parse_args()
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
    print(f"verify on load {verify_s:.2f} s ({size_gb / verify_s:.2f} GB/s), "
          f"torch.load {load_s:.2f} s")


if __name__ == "__main__":
    main()
