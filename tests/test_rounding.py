"""The correctly rounded square roots (kit.numerics.rounding): both of its routes, numpy's
square-root instruction where no gradient is needed and float64 rounded once where one is,
give the one root IEEE 754 defines, in place or not, for a list as for a tensor."""

from __future__ import annotations

import numpy as np
import torch

from kit.numerics import rounding


def _bit_patterns(count: int = 200_000) -> torch.Tensor:
    """Finite non-negative float32 values drawn over their bit patterns (every exponent)."""
    bits = np.random.default_rng(0).integers(0, 0x7F800000, count, dtype=np.int64)
    return torch.from_numpy(bits.astype(np.int32).view(np.float32).copy())


def _exact(values: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.sqrt(values.numpy().astype(np.float64)).astype(np.float32))


def test_every_route_gives_the_correctly_rounded_root() -> None:
    values = _bit_patterns()
    exact = _exact(values)
    with rounding.correctly_rounded_sqrt() as mode:
        assert torch.equal(values.sqrt(), exact)
        assert torch.equal(torch.sqrt(values), exact)
        copy = values.clone()
        copy.sqrt_()
        assert torch.equal(copy, exact)
        parts = list(values.split(1000))
        roots = torch._foreach_sqrt(parts)
        assert all(torch.equal(a, b) for a, b in zip(roots, exact.split(1000), strict=True))
        torch._foreach_sqrt_(parts)  # in place on views of `values`
        assert torch.equal(values, exact)
    assert mode.calls == 5
    assert torch.equal(rounding._through_float64(_bit_patterns()), exact)


def test_a_root_that_needs_a_gradient_keeps_it_and_its_bits() -> None:
    values = (_bit_patterns(1000).abs() + 1.0).requires_grad_()
    with rounding.correctly_rounded_sqrt():
        root = values.sqrt()
    assert torch.equal(root.detach(), _exact(values.detach()))
    root.sum().backward()
    assert values.grad is not None and torch.isfinite(values.grad).all()


def test_non_contiguous_and_other_dtypes() -> None:
    values = _bit_patterns(4096).view(64, 64).t()  # a strided view
    with rounding.correctly_rounded_sqrt():
        assert torch.equal(values.sqrt(), _exact(values.contiguous()))
        strided = _bit_patterns(4096).view(64, 64).t()
        strided.sqrt_()
        assert torch.equal(strided, _exact(_bit_patterns(4096).view(64, 64).t().contiguous()))
        doubles = torch.rand(100, dtype=torch.float64)
        inside = doubles.sqrt()
    assert torch.equal(inside, doubles.sqrt())  # other dtypes: torch's own, unchanged
