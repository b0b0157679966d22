"""Which of the probes' and extraction's computations change their bits with torch's thread count.

In the reproducible CPU numerics (kit.numerics.numerics: MKL's COMPATIBLE branch, ATen and oneDNN
capped at AVX2) each computation below runs in a fresh process on 1, 2, 4 and 8 of torch's
intra-op threads (more threads than cores emulate a larger machine), and 4 threads pinned to one
core (taskset): first as torch computes it (its own threads), then as the kit does
(kit.numerics.blocked: one intra-op thread, large products cut into blocks that the shapes fix,
spread over the same threads). Prints, per computation, whether the bits were the same at every
thread count each way, the milliseconds of one call on 1 and 2 of torch's threads, and whether
the kit's blocks give the bits of the uncut computation on one thread (its products' tiles run
on OpenBLAS, kit.numerics.openblas, so theirs differ in the last bits; row gathers and images do
not).

    .venv/bin/python benchmarks/thread_bits.py            # about 5 minutes on 2 idle cores
    .venv/bin/python benchmarks/thread_bits.py --mkl-cbwr COMPATIBLE,STRICT --only L-BFGS

`--mkl-cbwr` runs every process with that MKL branch instead of the kit's, the other caps kept
(the mode's switch then says fast, so that `import kit` leaves the branch alone), and only
torch's own threads; MKL's strict mode (`,STRICT`) is documented to hold across thread counts
on its AVX2 and AVX-512 branches only. `--only` keeps the computations whose name contains the
text.

The shapes are those of benchmarks/probe_speed.py's fast probe (batches of 1,024 rows of
2,048 features, 100 classes), a float64 L-BFGS fit on its 45,000 fit rows, L-BFGS's vector
algebra on a head of that size, and extraction of 64 images of 32 px by a ResNet-50.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from kit.files.paths import REPO_ROOT
from kit.numerics import cpu, numerics

WORK = """
import contextlib, hashlib, json, os, sys, time
import kit, torch
import torch.nn.functional as F
from kit import models
from kit.numerics import blocked
from kit.numerics.threads import numerics_threads
threads, kit_way, timed = int(sys.argv[1]), sys.argv[2] == "kit", sys.argv[3] == "timed"
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
x = torch.randn(1024, 2048, generator=g)
w = (torch.randn(2048, 100, generator=g) / 2048**0.5).requires_grad_()  # logits of a head's size
y = torch.randint(0, 100, (1024,), generator=g)
logits_grad = torch.randn(1024, 100, generator=g)
xd = torch.randn(45_000, 2048, generator=g, dtype=torch.float64)
torch.manual_seed(0)
head = torch.nn.Linear(2048, 100).double()
yd = torch.randint(0, 100, (45_000,), generator=g)
u = torch.randn(204_900, generator=g, dtype=torch.float64)
v = torch.randn(204_900, generator=g, dtype=torch.float64)
torch.manual_seed(0)
net = models.build("resnet50", 100).eval().to(memory_format=torch.channels_last)
images = torch.randn(64, 3, 32, 32, generator=g).contiguous(memory_format=torch.channels_last)
mm = blocked.matmul if kit_way else torch.matmul
lin = blocked.linear if kit_way else F.linear

def step():
    F.cross_entropy(mm(x, w), y).backward()
    grad, w.grad = w.grad, None
    return grad

def closure():
    loss = F.cross_entropy(lin(xd, head.weight, head.bias), yd, reduction="sum")
    loss.backward()
    grads = (loss.detach(), head.weight.grad, head.bias.grad)
    head.zero_grad()
    return torch.cat([t.flatten() for t in grads])

def features():
    with torch.no_grad():
        return blocked.images(net.features, images) if kit_way else net.features(images)

COMPUTATIONS = {name: compute for name, compute in {
    "fast probe: logits (1,024 x 2,048 @ 2,048 x 100, float32)": lambda: mm(x, w).detach(),
    "fast probe: step's weight gradient (X^T G)": step,
    "fast probe: step's bias gradient (sum over 1,024 rows)": lambda: logits_grad.sum(0),
    "L-BFGS: logits of 45,000 rows (float64)": lambda: lin(xd, head.weight, head.bias).detach(),
    "L-BFGS: loss and gradients on 45,000 rows (float64)": closure,
    "L-BFGS: dot product of two 204,900-vectors": lambda: u.dot(v),
    "L-BFGS: sum of squares (the penalty)": lambda: u.square().sum(),
    "L-BFGS: direction update (u + 0.5 v)": lambda: u.add(v, alpha=0.5),
    "extraction: ResNet-50 features of 64 images of 32 px": features,
}.items() if sys.argv[4] in name}
out = {}
for name, compute in COMPUTATIONS.items():
    with numerics_threads() if kit_way else contextlib.nullcontext():
        start = time.perf_counter()
        result = compute()
        if timed:  # a second call, warm
            start = time.perf_counter()
            compute()
        seconds = time.perf_counter() - start
    digest = hashlib.sha256(result.detach().contiguous().numpy().tobytes()).hexdigest()[:16]
    out[name] = {"hash": digest, "ms": 1000 * seconds}
print(json.dumps(out))
"""

RUNS = (("1", 1, None), ("2", 2, None), ("4", 4, None), ("8", 8, None), ("4 on 1 core", 4, "0"))


def measure(
    threads: int, way: str, cores: str | None, args: argparse.Namespace
) -> dict[str, dict[str, float | str]]:
    timed = "timed" if way == "torch" and threads <= 2 and cores is None else "once"
    command = [sys.executable, "-c", WORK, str(threads), way, timed, args.only]
    if cores is not None and shutil.which("taskset"):
        command = ["taskset", "-c", cores, *command]
    done = subprocess.run(
        command,
        env=numerics.without_variables() | {"PYTHONPATH": str(REPO_ROOT)} | branch(args),
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, dict[str, float | str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def branch(args: argparse.Namespace) -> dict[str, str]:
    """The variables of `--mkl-cbwr`: the kit's caps with that MKL branch."""
    if not args.mkl_cbwr:
        return {}
    caps = numerics.REPRODUCIBLE_ENVIRONMENT | {"MKL_CBWR": args.mkl_cbwr}
    return caps | {numerics.SWITCH: numerics.FAST}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mkl-cbwr", default="", help="MKL_CBWR instead of the kit's")
    parser.add_argument("--only", default="", help="computations whose name contains this")
    args = parser.parse_args()
    mkl = f"MKL_CBWR={args.mkl_cbwr}" if args.mkl_cbwr else "the kit's MKL branch"
    print(
        f"{cpu.cpu_model()} ({cpu.best_isa()}), {len(os.sched_getaffinity(0))} cores, "
        f"load {os.getloadavg()[0]:.1f}; ATen and oneDNN at AVX2, {mkl}"
    )
    ways = ("torch",) if args.mkl_cbwr else ("torch", "kit")
    found = {
        (way, name): measure(threads, way, cores, args)
        for way in ways
        for name, threads, cores in RUNS
    }
    print(
        f"{'computation':<58} {'torch threads':>13} {'kit blocks':>10} {'uncut':>6} "
        f"{'ms, 1':>7} {'ms, 2':>7}"
    )
    for computation in found[("torch", "1")]:

        def same(way: str, computation: str = computation) -> str:
            hashes = {found[(way, name)][computation]["hash"] for name, _, _ in RUNS}
            return "same" if len(hashes) == 1 else "differ"

        one, two = (float(found[("torch", n)][computation]["ms"]) for n in ("1", "2"))
        kit, uncut = "-", "-"
        if "kit" in ways:
            hashes = {found[(way, "1")][computation]["hash"] for way in ways}
            kit, uncut = same("kit"), "yes" if len(hashes) == 1 else "no"
        print(f"{computation:<58} {same('torch'):>13} {kit:>10} {uncut:>6} {one:7.1f} {two:7.1f}")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
