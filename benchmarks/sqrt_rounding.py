"""How far torch's float32 square root is from the correctly rounded one under the kit's CPU
numerics, and what the correctly rounded roots of kit.numerics.rounding cost the optimizer.

Prints, for a million seeded values, how many of torch.sqrt's results differ from the correctly
rounded root (float64 root rounded once), and for the cpu profile's network (resnet10 at width
0.25) the time of a schedule-free AdamW step with torch's roots and with correctly rounded ones,
beside the time of a whole training step (forward, backward, optimizer), and the roots of the
optimizer's second moments by the two routes kit.numerics.rounding has (numpy's square-root
instruction, in place, where no gradient is needed; float64 rounded once to float32, where one
is) with whether their bits agree. One process, one intra-op thread, as the reproducible
numerics run.

    .venv/bin/python benchmarks/sqrt_rounding.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import schedulefree
import torch
import torch.nn.functional as F  # noqa: N812

from kit import models
from kit.numerics import numerics, rounding
from kit.numerics.threads import one_thread


def seconds(work: Callable[[], object], repeats: int = 50) -> float:
    """The median time of `work` over `repeats` calls, after two warm-up calls."""
    for _ in range(2):
        work()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    numerics.apply()
    print(numerics.describe())
    with one_thread():
        values = torch.rand(1_000_000, generator=torch.Generator().manual_seed(0)) + 1e-3
        exact = values.double().sqrt().float()
        off = int((values.sqrt() != exact).sum())
        with rounding.correctly_rounded_sqrt():
            fixed = int((values.sqrt() != exact).sum())
        print(f"torch.sqrt, float32: {off:,} of 1,000,000 roots not correctly rounded")
        print(f"within kit.numerics.rounding.correctly_rounded_sqrt: {fixed:,}")
        torch.manual_seed(0)
        net = models.build("resnet10", 10, width=0.25, image_size=24)
        net = net.to(memory_format=torch.channels_last)
        optimizer = schedulefree.AdamWScheduleFree(net.parameters(), lr=0.02, warmup_steps=4)
        optimizer.train()
        images = torch.randn(32, 3, 24, 24).to(memory_format=torch.channels_last)
        labels = torch.arange(32) % 10
        F.cross_entropy(net(images), labels).backward()

        def roots_as_torch() -> None:
            optimizer.step()

        def roots_rounded() -> None:
            with rounding.correctly_rounded_sqrt():
                optimizer.step()

        def training_step() -> None:
            optimizer.zero_grad()
            F.cross_entropy(net(images), labels).backward()
            roots_rounded()

        plain, exact_roots = seconds(roots_as_torch), seconds(roots_rounded)
        whole = seconds(training_step, repeats=20)
        moments = [optimizer.state[p]["exp_avg_sq"].abs() for p in net.parameters()]
        by_numpy = seconds(lambda: rounding._each(moments, inplace=False))
        by_float64 = seconds(lambda: [rounding._through_float64(m) for m in moments])
        agree = all(
            torch.equal(a, b)
            for a, b in zip(
                rounding._each(moments, inplace=False) or [],
                [rounding._through_float64(m) for m in moments],
                strict=True,
            )
        )
        print(
            f"the second moments' roots: numpy's instruction {by_numpy * 1e3:.2f} ms, float64 "
            f"rounded once {by_float64 * 1e3:.2f} ms, the same bits: {agree}"
        )
        params = sum(p.numel() for p in net.parameters())
        print(
            f"schedule-free AdamW step over {params:,} parameters: torch's roots "
            f"{plain * 1e3:.2f} ms, correctly rounded {exact_roots * 1e3:.2f} ms"
        )
        print(
            f"a whole training step (batch 32): {whole * 1e3:.1f} ms; the rounding adds "
            f"{100 * (exact_roots - plain) / whole:.1f}% of it"
        )


if __name__ == "__main__":
    main()
