"""Large CPU computations cut into blocks that their shapes fix, the blocks spread over threads.

In the reproducible CPU numerics (kit.numerics.numerics) a library may not split a computation over
threads itself: MKL promises the same bits across thread counts only in its strict mode, on its
AVX2 and AVX-512 branches, which it replaces on a processor not made by Intel, and ATen sums a
whole tensor in per-thread parts. So a large product here is cut into tiles of its output: each
tile is one call of kit.numerics.openblas (OpenBLAS's Haswell kernels, the same instructions on
every processor with AVX2 and FMA) on one thread, reducing over the whole inner dimension, and
the tiles' bounds are multiples of ALIGN fixed by the shapes alone. The threads lent by
`kit.numerics.threads.numerics_threads` compute the tiles; how many there are decides when a tile
is computed, never its bits. A blocked product's bits are OpenBLAS's, not those of torch's
uncut product (they differ in the last bits). Nothing is cut in the fast mode, on a GPU, for
other types than float32 and float64. A product below BLOCKED_WORK multiply-adds is one
OpenBLAS call on the calling thread (a thread's hand-over would cost more than it gains): since
numerics version 3, not torch's product on MKL's COMPATIBLE branch, which takes about 1.6 times
as long on the probes' products (docs/benchmarks.md, "The probes' small products").
Batches of images and element-wise work are cut the same way, each block with torch's own
operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from kit.numerics import numerics, openblas
from kit.numerics.threads import each_block

#: a block's bounds fall on multiples of this many rows or columns, so that no block is a sliver
#: of a few rows (libraries take other kernels for those, with other bits and less speed)
ALIGN = 64
#: images of a batch are cut into blocks of a multiple of this many (oneDNN's convolutions take
#: other kernels for fewer images, with other bits)
IMAGE_ALIGN = 16
#: multiply-adds a block aims at: some milliseconds of one core, far more than a hand-over
BLOCK_WORK = 1 << 25
#: multiply-adds a product's tile aims at: OpenBLAS packs its operands once a call, so
#: fewer, larger tiles waste less (benchmarks/probe_speed.py)
TILE_WORK = 1 << 26
#: the types whose products are cut into tiles (the library's single and double precision)
PRODUCT_TYPES = (torch.float32, torch.float64)
#: a product of fewer multiply-adds is one call: it gains nothing from threads
BLOCKED_WORK = 1 << 26
#: a product of fewer multiply-adds is torch's: none since numerics version 3, where every
#: product of the reproducible numerics runs on OpenBLAS (under 2, BLOCKED_WORK)
PRODUCT_WORK = 0
#: pixels a block of images aims at (24 px images: 64 a block; 32 px: 32; 224 px: 16). In
#: extraction's order, every backbone of a replicate on each batch, the cpu profile's 24 px
#: forwards in blocks of 64 took 0.95 times the time of blocks of 32 and 0.97 of blocks of 112
#: (benchmarks/extract_arithmetic.py, two runs on a shared 2-core AMD EPYC 25/17); each image's
#: result is its own, the same bits whatever the block (tests/test_blocked.py)
BLOCK_PIXELS = 1 << 15
#: elements a block of rows aims at where each is copied or transformed on its own (a MB of
#: float32), and the fewest worth cutting
BLOCK_ELEMENTS, BLOCKED_ELEMENTS = 1 << 18, 1 << 20
#: elements of logits a block of row-wise work (a log-softmax, a top-k) aims at; a computation
#: of one block is not cut: over a dimension other than the last, ATen's log-softmax takes some
#: nanoseconds an element, a millisecond a block
LOGIT_ELEMENTS = 1 << 15


def bounds(size: int, work_per_row: int, align: int = ALIGN, work: int = BLOCK_WORK) -> list[int]:
    """Bounds [0, ..., size] of blocks of `size` rows, each a multiple of `align` rows (the
    last excepted) doing about `work` multiply-adds: fixed by the shapes, whatever the threads."""
    per = align * max(1, round(work / (max(work_per_row, 1) * align)))
    return [*range(0, size, per), size]


def even(size: int, work_per_row: int, work: int = TILE_WORK) -> list[int]:
    """Bounds [0, ..., size] of as many blocks as `work` multiply-adds each make up, of equal
    multiples of ALIGN rows (the last one short): fixed by the shapes, whatever the threads, and
    as even as the alignment allows, so that no thread waits on a long last block."""
    count = max(1, math.ceil(size * max(work_per_row, 1) / work))
    per = ALIGN * max(1, math.ceil(size / (count * ALIGN)))
    return [*range(0, size, per), size]


def tiles(rows: int, columns: int, inner: int) -> tuple[list[int], list[int]]:
    """The bounds of an output [rows, columns] of a product over `inner`: blocks of whole rows
    (`even`) where ALIGN rows do at most about TILE_WORK multiply-adds, else tiles of ALIGN
    rows and as many columns (a multiple of ALIGN) as do about TILE_WORK."""
    across = bounds(columns, ALIGN * inner, work=TILE_WORK)
    if len(across) == 2:
        return even(rows, inner * columns), across
    return bounds(rows, 1, work=ALIGN), across


def blocked(tensor: torch.Tensor, work: int) -> bool:
    """Whether a computation of `work` multiply-adds on `tensor`'s device is cut into blocks:
    in the reproducible CPU numerics, when large enough to gain from threads."""
    return tensor.device.type == "cpu" and numerics.reproducible() and work >= BLOCKED_WORK


def on_openblas(tensor: torch.Tensor, work: int) -> bool:
    """Whether a product of `work` multiply-adds on `tensor`'s device runs on kit.numerics.openblas
    (in tiles when `blocked`, else in one call): in the reproducible CPU numerics, from
    PRODUCT_WORK multiply-adds on."""
    return tensor.device.type == "cpu" and numerics.reproducible() and work >= max(PRODUCT_WORK, 1)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` of matrices [M, K] and [K, N] (b row-major), with `b`'s gradient, by tiles of
    the output when `blocked`; b's gradient is a^T @ grad, as autograd computes it, by tiles
    too. `a` takes no gradient on the blocked path (the kit's features never do); with one, or
    a column-major `b`, it is torch's product."""
    if (
        a.requires_grad
        or b.stride(1) != 1
        or a.dtype not in PRODUCT_TYPES
        or not on_openblas(a, a.shape[0] * a.shape[1] * b.shape[1])
    ):
        return a @ b
    product: torch.Tensor = _Product.apply(a, b)
    return product


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`torch.nn.functional.linear(x, weight, bias)` of rows [N, D], with the weight's and the
    bias's gradients, by tiles of the output when `blocked`; the weight's gradient is
    grad^T @ x, as autograd computes it, by tiles too, and the bias's is summed as autograd
    sums it. `x` takes no gradient on the blocked path."""
    work = x.shape[0] * x.shape[1] * weight.shape[0]
    if x.requires_grad or x.dim() != 2 or x.dtype not in PRODUCT_TYPES or not on_openblas(x, work):
        return torch.nn.functional.linear(x, weight, bias)
    out: torch.Tensor = _Linear.apply(x, weight, bias)
    return out


def rows(fill: Callable[[slice, torch.Tensor], object], out: torch.Tensor) -> torch.Tensor:
    """`out`, filled by `fill(rows, out[rows])` for blocks of its rows, with operations that
    make each element on its own (copies, gathers, element-wise arithmetic), so that the bits
    are the same however the rows are cut: on the lent threads in the reproducible CPU numerics
    when `out` holds at least BLOCKED_ELEMENTS, else in one call."""
    if out.device.type != "cpu" or not numerics.reproducible() or out.numel() < BLOCKED_ELEMENTS:
        fill(slice(None), out)
        return out
    edges = bounds(len(out), out[0].numel(), work=BLOCK_ELEMENTS)

    def block(i: int) -> None:
        fill(slice(edges[i], edges[i + 1]), out[edges[i] : edges[i + 1]])

    each_block(block, len(edges) - 1)
    return out


def log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """`torch.log_softmax(x, dim)` over a dimension other than the first, with its gradient, by
    blocks of x's first dimension on the lent threads in the reproducible CPU numerics, where it
    makes two blocks or more (`logit_blocks`): each block is ATen's own log-softmax (and its
    backward), which computes every slice along `dim` on its own, so the bits are those of the
    uncut call."""
    if (
        x.device.type != "cpu"
        or not numerics.reproducible()
        or dim % x.dim() == 0
        or len(logit_blocks(x)) < 3
    ):
        return torch.log_softmax(x, dim)
    out: torch.Tensor = _LogSoftmax.apply(x, dim % x.dim())
    return out


def logit_blocks(logits: torch.Tensor) -> list[int]:
    """Bounds of the blocks of rows (the first dimension) of `logits` for row-wise work: about
    LOGIT_ELEMENTS each (`even`)."""
    return even(len(logits), logits[0].numel(), LOGIT_ELEMENTS)


def counts(count: Callable[[slice], torch.Tensor], logits: torch.Tensor) -> torch.Tensor:
    """The sum over blocks of `logits`' rows of `count(rows)`, integer counts of what each row
    shows (a top-k's hits), on the lent threads in the reproducible CPU numerics: integers add
    up the same in any order, so the cut changes no count."""
    if logits.device.type != "cpu" or not numerics.reproducible():
        return count(slice(None))
    edges = logit_blocks(logits)
    parts: list[torch.Tensor | None] = [None] * (len(edges) - 1)

    def block(i: int) -> None:
        parts[i] = count(slice(edges[i], edges[i + 1]))

    each_block(block, len(parts))
    assert all(part is not None and not part.is_floating_point() for part in parts)
    return torch.stack([part for part in parts if part is not None]).sum(0)


def images(forward: Callable[[torch.Tensor], torch.Tensor], batch: torch.Tensor) -> torch.Tensor:
    """`forward(batch)` of a batch of images [B, C, H, W] without gradients, by blocks of a
    multiple of IMAGE_ALIGN images (about BLOCK_PIXELS pixels) in the reproducible CPU
    numerics: each image's result is its own, so the blocks' outputs are stacked."""
    if batch.device.type != "cpu" or not numerics.reproducible():
        return forward(batch)
    edges = bounds(len(batch), batch.shape[-1] * batch.shape[-2], IMAGE_ALIGN, BLOCK_PIXELS)
    if len(edges) == 2:
        return forward(batch)
    parts: list[torch.Tensor | None] = [None] * (len(edges) - 1)

    def block(i: int) -> None:
        parts[i] = forward(batch[edges[i] : edges[i + 1]])

    each_block(block, len(parts))
    return torch.cat([part for part in parts if part is not None])


def _product(
    left: torch.Tensor, right: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None = None
) -> None:
    """`out` = left @ right (+ bias), one call of kit.numerics.openblas per tile of `tiles` (it lets
    go of the interpreter while it computes), on the lent threads; the bias is added afterwards,
    element by element."""
    rows, columns = tiles(left.shape[0], right.shape[1], left.shape[1])
    across = len(columns) - 1

    def tile(i: int) -> None:
        r = slice(rows[i // across], rows[i // across + 1])
        c = slice(columns[i % across], columns[i % across + 1])
        openblas.gemm(left[r], right[:, c], out[r, c])
        if bias is not None:
            out[r, c] += bias[c]

    each_block(tile, (len(rows) - 1) * across)


class _Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        out = a.new_empty(a.shape[0], b.shape[1])
        _product(a, b, out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor | None]:
        if not ctx.needs_input_grad[1]:
            return None, None
        a, b = ctx.saved_tensors
        grad_b = b.new_empty(b.shape)
        _product(a.t(), grad, grad_b)
        return None, grad_b


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        out = x.new_empty(x.shape[0], weight.shape[0])
        _product(x, weight.t(), out, bias)
        return out

    @staticmethod
    def backward(
        ctx: Any, grad: torch.Tensor
    ) -> tuple[None, torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = grad.new_empty(weight.shape)
            _product(grad.t(), x, grad_weight)
        return None, grad_weight, grad.sum(0) if ctx.needs_input_grad[2] else None


class _LogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int) -> torch.Tensor:
        edges = logit_blocks(x)
        out = x.new_empty(x.shape)

        def block(i: int) -> None:
            part = slice(edges[i], edges[i + 1])
            torch._log_softmax(x[part], dim, False, out=out[part])

        each_block(block, len(edges) - 1)
        ctx.save_for_backward(out)
        ctx.dim, ctx.edges = dim, edges
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (out,) = ctx.saved_tensors
        edges, grad_x = ctx.edges, torch.empty_like(out)

        def block(i: int) -> None:
            part = slice(edges[i], edges[i + 1])
            torch._log_softmax_backward_data(
                grad[part], out[part], ctx.dim, out.dtype, out=grad_x[part]
            )

        each_block(block, len(edges) - 1)
        return grad_x, None
