"""How many cores' worth of arithmetic the process's cores give when all of them compute at once.

    .venv/bin/python benchmarks/core_scaling.py [--seconds 3] [--repeats 3]

A machine's cores are not always independent: two virtual CPUs of a cloud machine may be the two
hyperthreads of one physical core, which share its fused multiply-add units, and a loaded host
takes time from them. Every speed the kit measures on 2 cores (the fast probe against
scikit-learn, a replicate of notebook 03, the main job's minutes) depends on this. The script
runs the same compute-bound work, single-precision products of 512 x 2,048 by 2,048 x 512 on
OpenBLAS's Haswell kernels (kit.numerics.openblas, one thread each), first on one thread alone, then
on one thread per core of the process side by side, in alternating slices so that a drift of
the host's speed hits both, and prints the products a second of each, their ratio (the cores'
worth: 2.0 for two independent cores), the CPU time the threads got against the wall time, and
the load average; `--repeats` times, since the host's share moves.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import torch

from kit.numerics import openblas
from kit.readout.numbers import counted

ROWS, INNER, COLUMNS = 512, 2048, 512
#: each measurement is cut into this many slices, alone and together alternating
SLICES = 6


def products(seconds: float) -> int:
    """How many products one thread completes in `seconds`."""
    left, right = torch.randn(ROWS, INNER), torch.randn(INNER, COLUMNS)
    out = torch.empty(ROWS, COLUMNS)
    openblas.gemm(left, right, out)  # warm: the library loaded and its buffers made
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        openblas.gemm(left, right, out)
        done += 1
    return done


def side_by_side(threads: int, seconds: float) -> tuple[float, float]:
    """Products a second of `threads` threads computing at once, and the CPU seconds the
    process got per wall second meanwhile."""
    counts = [0] * threads

    def work(index: int) -> None:
        counts[index] = products(seconds)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    start, cpu = time.perf_counter(), time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - start
    return sum(counts) / wall, (time.process_time() - cpu) / wall


def cores_worth(cores: int, seconds: float) -> tuple[float, float, float]:
    """Products a second of one thread alone and of `cores` threads at once, each measured for
    `seconds` in SLICES slices alternating with the other (a drift of the host's speed hits
    both), and the CPU seconds a wall second the threads got together."""
    alone, together, busy = 0.0, 0.0, 0.0
    for _ in range(SLICES):
        alone += side_by_side(1, seconds / SLICES)[0] / SLICES
        rate, cpu = side_by_side(cores, seconds / SLICES)
        together, busy = together + rate / SLICES, busy + cpu / SLICES
    return alone, together, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each measurement's length")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    gflop = 2 * ROWS * INNER * COLUMNS / 1e9
    print(
        f"{counted(cores, 'core')} for this process; {openblas.describe()}; products of "
        f"{ROWS} x {INNER} by {INNER} x {COLUMNS} ({gflop:.2f} GFLOP each)"
    )
    for repeat in range(1, args.repeats + 1):
        load = os.getloadavg()[0]
        alone, together, busy = cores_worth(cores, args.seconds)
        print(
            f"{repeat}: one thread {alone * gflop:5.1f} GFLOP/s; {counted(cores, 'thread')} "
            f"at once {together * gflop:5.1f} GFLOP/s: {together / alone:.2f} cores' worth "
            f"(CPU {busy:.2f} s a wall second; load average {load:.1f} before)"
        )


if __name__ == "__main__":
    main()
