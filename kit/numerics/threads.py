"""Intra-op threads of the kit's CPU computations, and the threads lent to their blocks.

torch splits an operation over its intra-op threads and joins them at its end. On tensors of a
few thousand elements (the toy's diagonal networks, an L-BFGS probe's head) that join costs more
than the work, and on a small machine shared with other processes far more (measured in
docs/benchmarks.md, "Small work on one thread"). In the reproducible CPU numerics
(kit.numerics.numerics) a split also changes the bits: a reduction split over threads sums in an
order that depends on how many there are. There every operation runs on one intra-op thread,
and the process's threads are lent instead to the blocks of a large computation
(kit.numerics.blocked), each block one single-threaded operation whose bounds the shapes fix.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar

import torch

from kit.numerics import numerics

#: threads the blocks of a computation may use in this context (1: one after the other)
_LENT: ContextVar[int] = ContextVar("kit_lent_threads", default=1)
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
# a forked child has none of its parent's pool threads: it starts pools of its own
os.register_at_fork(after_in_child=_POOLS.clear)


@contextmanager
def one_thread(small: bool = True) -> Iterator[None]:
    """Run the block on one intra-op thread when `small` (the caller's judgement that its
    tensors are small and on the CPU), restoring the process's setting after it. In the
    reproducible CPU numerics (kit.numerics.numerics) every block runs on one thread, whatever its
    size: a reduction split over threads sums in another order on a machine of other cores.
    Nothing is lent to blocks here (`numerics_threads` lends)."""
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


@contextmanager
def numerics_threads(on_cpu: bool = True, small: bool = False) -> Iterator[None]:
    """The block on the intra-op threads the CPU numerics mode asks for (kit.numerics.numerics).
    In the reproducible mode: one intra-op thread, and the process's threads (its torch setting
    on entry, or what an enclosing block lent) lent to the blocks of kit.numerics.blocked, whose
    bits do not depend on how many there are. In the fast mode: the process's own setting, or
    one thread where the caller judges its operations `small` (`one_thread`). A block
    computing on a GPU (`on_cpu` false) keeps the process's threads: its numbers are the GPU's,
    and its CPU-side work (batches, augmentation in the process) should not be held to one
    thread."""
    numerics.apply()
    if not on_cpu:
        yield
        return
    if not numerics.reproducible():
        with one_thread(small):
            yield
        return
    before = torch.get_num_threads()
    token = _LENT.set(max(before, _LENT.get()))
    torch.set_num_threads(numerics.REPRODUCIBLE_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        _LENT.reset(token)


def lent_threads() -> int:
    """Threads the blocks of a computation may use here: what `numerics_threads` lent in this
    thread's context, else 1."""
    return _LENT.get()


def each_block(work: Callable[[int], None], count: int) -> None:
    """`work(i)` for every block i < count, without gradients, spread over the lent threads
    (one after the other when one is lent), each on one intra-op thread; returns when all are
    done and raises the first block's error. Blocks must write disjoint outputs: the order in
    which they run is not fixed, only what each computes. The calling thread computes blocks
    too, and every thread takes the next block not yet taken: one hand-over a helper thread per
    call, not one a block (a hand-over costs tens of microseconds, a block some milliseconds)."""
    threads = min(lent_threads(), count)
    if threads <= 1:
        for index in range(count):
            _without_grad(work, index)
        return
    taken = itertools.count()
    lock = threading.Lock()
    errors: dict[int, Exception] = {}

    def run() -> None:
        token = _LENT.set(1)  # a block's own blocks run in it, one after the other
        try:
            while True:
                with lock:
                    index = next(taken)
                if index >= count:
                    return
                try:
                    _without_grad(work, index)
                except Exception as error:  # raised below, the first block's first
                    errors[index] = error
        finally:
            _LENT.reset(token)

    helpers = [_pool(threads - 1).submit(run) for _ in range(threads - 1)]
    try:
        run()
    finally:
        for helper in helpers:
            helper.result()
    if errors:
        raise errors[min(errors)]


def _without_grad(work: Callable[[int], None], index: int) -> None:
    """A block: autograd's switch is per thread, and a block records no graph."""
    with torch.no_grad():
        work(index)


def _pool(threads: int) -> ThreadPoolExecutor:
    """A pool of `threads` workers, each on one intra-op thread (torch's and MKL's settings
    are per thread), kept for the process's life."""
    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(
                threads,
                thread_name_prefix="kit-block",
                initializer=_one_intra_op_thread,
            )
        return _POOLS[threads]


def _one_intra_op_thread() -> None:
    """A pool worker's setting: torch first sets a new thread's threads from the process's
    (asked here, so that it cannot happen later, in a block), then one."""
    torch.get_num_threads()
    torch.set_num_threads(numerics.REPRODUCIBLE_THREADS)
