"""What the L-BFGS probes' small products cost on MKL's COMPATIBLE branch, and what one call of
OpenBLAS's Haswell kernels would save and change.

Under version 2 of the reproducible CPU numerics a product under
kit.numerics.blocked.BLOCKED_WORK multiply-adds was torch's, on MKL's COMPATIBLE branch (SSE2, no
fused multiply-add); only larger ones were tiles on OpenBLAS's Haswell kernels (docs/decisions.md,
"Large products on OpenBLAS's Haswell kernels"). The cpu profile's L-BFGS probes multiply about
1,843 fit rows of 128 to 512 features into 10 classes, far under that threshold. Version 3 runs
them as one OpenBLAS call (kit.numerics.blocked.PRODUCT_WORK); this prints, on one thread:
- each shape's forward product and weight gradient, torch's against one OpenBLAS call, in ms and
  GFLOP/s;
- with a finished cpu run's folder, each L-BFGS path of the chosen replicates refitted as the kit
  fitted under numerics 2 (the small products on torch's, PRODUCT_WORK raised for this process
  only; benchmarks/probe_path.py) and as the kit fits it, every product on OpenBLAS: the paths'
  CPU seconds, their iterations, and how many held-out choices and evaluation top-1s the other
  bits move (docs/benchmarks.md).

    .venv/bin/python benchmarks/small_products.py
    .venv/bin/python benchmarks/small_products.py outputs/cpu --replicates 0
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from probe_path import paths

from kit.numerics import blocked, openblas
from kit.numerics.threads import one_thread

#: the cpu profile's fit rows (90 % of 2,048 kept), its feature widths and classes
ROWS, WIDTHS, CLASSES = 1843, (128, 256, 512), 10


def timed(call: Callable[[], object], repeats: int = 50) -> float:
    """Seconds a call of `call()` takes, the best mean of three rounds."""
    call()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def product_rates() -> list[str]:
    """Per width, the forward product and the weight gradient: torch's against OpenBLAS's."""
    lines = []
    generator = torch.Generator().manual_seed(0)
    for width in WIDTHS:
        x = torch.randn(ROWS, width, dtype=torch.float64, generator=generator)
        weight = torch.randn(CLASSES, width, dtype=torch.float64, generator=generator)
        grad = torch.randn(ROWS, CLASSES, dtype=torch.float64, generator=generator)
        out, grad_weight = x.new_empty(ROWS, CLASSES), x.new_empty(CLASSES, width)
        right = weight.t().contiguous()
        flop = 2 * ROWS * width * CLASSES
        calls = {
            "forward": (
                lambda: torch.nn.functional.linear(x, weight),  # noqa: B023
                lambda: openblas.gemm(x, right, out),  # noqa: B023
            ),
            "weight gradient": (
                lambda: grad.t() @ x,  # noqa: B023
                lambda: openblas.gemm(grad.t(), x, grad_weight),  # noqa: B023
            ),
        }
        for name, (torch_call, openblas_call) in calls.items():
            mkl, ob = timed(torch_call), timed(openblas_call)
            lines.append(
                f"{ROWS} x {width} -> {CLASSES}, {name}: torch (MKL COMPATIBLE) {mkl * 1e3:.2f} ms "
                f"({flop / mkl / 1e9:.1f} GFLOP/s), OpenBLAS Haswell {ob * 1e3:.2f} ms "
                f"({flop / ob / 1e9:.1f} GFLOP/s): {mkl / ob:.1f} times"
            )
    return lines


def path_comparison(output_dir: Path, replicates: list[int] | None) -> list[str]:
    """The L-BFGS paths refitted with torch's products, then with every product on OpenBLAS."""
    before = blocked.PRODUCT_WORK
    blocked.PRODUCT_WORK = blocked.BLOCKED_WORK  # numerics 2: small products on torch's
    try:
        kit_paths = paths(output_dir, replicates)
    finally:
        blocked.PRODUCT_WORK = before
    openblas_paths = paths(output_dir, replicates)
    cpu = [
        sum(s["cpu_s"] for p in found for s in p["path"]) for found in (kit_paths, openblas_paths)
    ]
    its = [
        sum(s["iterations"] for p in found for s in p["path"])
        for found in (kit_paths, openblas_paths)
    ]
    choices = moved = 0
    largest = 0.0
    for kit_probe, ob_probe in zip(kit_paths, openblas_paths, strict=True):
        picks = [
            max(
                sorted(probe["path"], key=lambda s: probe["order"].index(s["decay"])),  # noqa: B023
                key=lambda s: s["heldout_top1"],
            )
            for probe in (kit_probe, ob_probe)
        ]
        choices += picks[0]["decay"] != picks[1]["decay"]
        for a, b in zip(kit_probe["path"], ob_probe["path"], strict=True):
            moved += a["eval_top1"] != b["eval_top1"]
            largest = max(largest, 100 * abs(a["eval_top1"] - b["eval_top1"]))
    fits = sum(len(p["path"]) for p in kit_paths)
    return [
        f"{len(kit_paths)} probes, {fits} fits: CPU {cpu[0]:.1f} s with torch's products, "
        f"{cpu[1]:.1f} s with OpenBLAS's ({cpu[1] / cpu[0]:.2f} times)",
        f"iterations {its[0]} and {its[1]}; held-out choices changed: {choices} of "
        f"{len(kit_paths)}; evaluation top-1 moved in {moved} of {fits} fits, by at most "
        f"{largest:.2f} points",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", type=Path, nargs="?", help="a finished cpu run's folder")
    parser.add_argument("--replicates", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    with one_thread():
        print("\n".join(product_rates()))
    if args.output_dir:
        print("\n".join(path_comparison(args.output_dir, args.replicates)))
    print(f"load average {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
