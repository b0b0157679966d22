"""Square roots with the same bits on every CPU: the correctly rounded ones.

A torch built with MKL, as the pip wheels are, computes `sqrt` of a float32 CPU tensor with
MKL's vector math functions. In the reproducible numerics (kit.numerics.numerics) MKL runs its
COMPATIBLE branch, whose float32 square root is not correctly rounded (about one result in five
is one unit in the last place off; `benchmarks/sqrt_rounding.py`) and rests on an instruction
whose result is the processor's own: the same inputs gave other bits under QEMU's emulation of
an x86-64 CPU than on an Intel Xeon, whatever vendor the emulated CPU named. MKL's exp and log
gave the same bits in both. Schedule-free AdamW takes a square root of its second moment at
every step, so two processors that agree on every other operation trained different models
(docs/reproducibility.md, "Across CPU models").

Within `correctly_rounded_sqrt()`, every square root of a float32 CPU tensor is the correctly
rounded float32 root IEEE 754 defines: one value, on every CPU. Where it needs no gradient (an
optimizer's state), numpy computes it with the processor's square-root instruction, which IEEE
754 requires to round correctly (x86's SQRTSS/SQRTPS and their AVX forms, whatever the vector
width numpy dispatches to); in place, with no copy, about a tenth of the time of the float64
route below on schedule-free AdamW's state (`benchmarks/sqrt_rounding.py`). Where it needs a
gradient, it is computed in float64 and rounded once to float32: MKL's float64 root is within
one unit of float64's last place, and the square root of a float32 number never lies that close
to a float32 rounding boundary (rounding twice, to 53 bits and then to 24, is innocuous for
square roots: S. A. Figueroa, "When is double rounding innocuous?", ACM SIGNUM Newsletter 30(3),
1995). Both routes give the same bits (tests/test_rounding.py). Other dtypes and devices pass
through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode


def _through_float64(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.double().sqrt().float()


def _needs_gradient(tensor: torch.Tensor) -> bool:
    return tensor.requires_grad and torch.is_grad_enabled()


def _rounded(tensor: torch.Tensor) -> torch.Tensor:
    """The correctly rounded roots of a float32 CPU tensor, in a new tensor."""
    if _needs_gradient(tensor):
        return _through_float64(tensor)
    return torch.from_numpy(np.sqrt(tensor.detach().numpy()))


def _rounded_(tensor: torch.Tensor) -> torch.Tensor:
    """The same, in place."""
    if _needs_gradient(tensor) or not tensor.is_contiguous():
        return tensor.copy_(_through_float64(tensor))
    values = tensor.detach().numpy()
    np.sqrt(values, out=values)
    return tensor


def _portable(tensor: object) -> bool:
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.dtype == torch.float32
        and tensor.device.type == "cpu"
    )


def _each(tensors: Sequence[torch.Tensor], inplace: bool) -> list[torch.Tensor] | None:
    """A list's roots (an optimizer's list holds a tensor per parameter): the float32 CPU
    tensors' correctly rounded, the others as torch computes them."""
    if not inplace:
        return [_rounded(t) if _portable(t) else t.sqrt() for t in tensors]
    for t in tensors:
        if _portable(t):
            _rounded_(t)
        else:
            t.sqrt_()
    return None


#: the square roots the mode replaces, each by what computes it correctly rounded
_REPLACED: dict[Callable[..., Any], Callable[..., Any]] = {
    torch.sqrt: _rounded,
    torch.Tensor.sqrt: _rounded,
    torch.Tensor.sqrt_: _rounded_,
    torch._foreach_sqrt: lambda tensors: _each(tensors, inplace=False),
    torch._foreach_sqrt_: lambda tensors: _each(tensors, inplace=True),
}


class correctly_rounded_sqrt(TorchFunctionMode):  # noqa: N801 (used as a context manager)
    """The block's float32 CPU square roots correctly rounded (see the module docstring);
    `calls` counts those it computed, so a test can tell that the block took any."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        replaced = _REPLACED.get(func)
        first = args[0] if args else None
        portable = (
            any(_portable(t) for t in first)
            if isinstance(first, list | tuple)
            else _portable(first)
        )
        if replaced is not None and portable and not kwargs:
            self.calls += 1
            return replaced(*args)
        return func(*args, **kwargs)
