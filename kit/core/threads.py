"""Intra-op threads for small tensor work on the CPU.

torch splits an operation over its intra-op threads and joins them at its end. On tensors of a
few thousand elements (the toy's diagonal networks, an L-BFGS probe's head) that join costs more
than the work, and on a small machine shared with other processes far more (measured in
docs/benchmarks.md, "Small work on one thread").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

from kit.core import numerics


@contextmanager
def one_thread(small: bool = True) -> Iterator[None]:
    """Run the block on one intra-op thread when `small` (the caller's judgement that its
    tensors are small and on the CPU), restoring the process's setting after it. In the
    reproducible CPU numerics (kit.core.numerics) every block runs on one thread, whatever its
    size: a reduction split over threads sums in another order on a machine of other cores."""
    numerics.apply()
    if not small and not numerics.reproducible():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(numerics.REPRODUCIBLE_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def numerics_threads(on_cpu: bool = True) -> AbstractContextManager[None]:
    """The block on the intra-op threads the CPU numerics mode asks for (kit.core.numerics):
    one in the reproducible mode, the process's own setting in the fast mode. A block computing
    on a GPU (`on_cpu` false) keeps the process's threads: its numbers are the GPU's, and its
    CPU-side work (batches, augmentation in the process) should not be held to one thread."""
    if not on_cpu:
        numerics.apply()
        return nullcontext()
    return one_thread(small=False)
