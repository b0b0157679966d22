"""Intra-op threads for small tensor work on the CPU.

torch splits an operation over its intra-op threads and joins them at its end. On tensors of a
few thousand elements (the toy's diagonal networks, an L-BFGS probe's head) that join costs more
than the work, and on a small machine shared with other processes far more (measured in
docs/benchmarks.md, "Small work on one thread").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_thread(small: bool = True) -> Iterator[None]:
    """Run the block on one intra-op thread when `small` (the caller's judgement that its
    tensors are small and on the CPU), restoring the process's setting after it."""
    if not small:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
