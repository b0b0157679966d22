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

Within `correctly_rounded_sqrt()`, every square root of a float32 CPU tensor is computed in
float64 and rounded once to float32. MKL's float64 root is within one unit of float64's last
place, and the square root of a float32 number never lies that close to a float32 rounding
boundary (rounding twice, to 53 bits and then to 24, is innocuous for square roots: S. A.
Figueroa, "When is double rounding innocuous?", ACM SIGNUM Newsletter 30(3), 1995), so the
result is the correctly rounded float32 root IEEE 754 defines: one value, on every CPU. Other
dtypes and devices pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


def _rounded(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.double().sqrt().float()


def _portable(tensor: object) -> bool:
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.dtype == torch.float32
        and tensor.device.type == "cpu"
    )


def _each(tensors: Sequence[torch.Tensor], inplace: bool) -> list[torch.Tensor] | None:
    """A list's roots: the float32 CPU tensors' in one float64 pass over them all (an
    optimizer's list holds a tensor per parameter), the others as torch computes them."""
    mine = [t for t in tensors if _portable(t)]
    flat = torch.cat([t.reshape(-1) for t in mine]) if mine else torch.empty(0)
    parts = iter(_rounded(flat).split([t.numel() for t in mine]))
    roots = [next(parts).view_as(t) if _portable(t) else t.sqrt() for t in tensors]
    if not inplace:
        return roots
    torch._foreach_copy_(list(tensors), roots)
    return None


#: the square roots the mode replaces, each by what computes it correctly rounded
_REPLACED: dict[Callable[..., Any], Callable[..., Any]] = {
    torch.sqrt: _rounded,
    torch.Tensor.sqrt: _rounded,
    torch.Tensor.sqrt_: lambda tensor: tensor.copy_(_rounded(tensor)),
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
