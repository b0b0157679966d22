"""Peak extra memory of the fast probe on memory-mapped fp16 features, old probe against new.

    python benchmarks/probe_memory.py [--rows 100000] [--eval 10000] [--dim 2048] [--epochs 1]
                                      [--baseline-rev ce8a1e6] [--device cpu]

On a GPU, the ImageNet-scale check (12 heads, new probe only; writes a 26 GB proxy):

    python benchmarks/probe_memory.py --rows 1281167 --dim 10240 --classes 1000 --device cuda \
        --lrs 0.01 0.03 0.1 0.3 --weight-decays 0 1e-5 1e-4 --baseline-rev ''

Writes proxy features (class means plus noise, fp16, as `kit.features` caches them) to .npy
memory maps, then runs each probe in a fresh subprocess: the baseline is that process's resident
set after importing torch and opening the maps, the peak is its `ru_maxrss` after the probe, and
the figure printed is (peak - baseline) / (fp16 size of the train and eval features). Pages of
the memory map that the probe reads count as resident, so a probe that reads every feature once
and copies nothing scores about 1.0. The old probe is `kit/probe.py` at `--baseline-rev` (the
last commit before the streaming probe), read with `git show`. The bar: new <= 1.3 on
100k x 2048, and the same accuracy as the old probe within 0.3 point. With `--device cuda` the
peak GPU memory (torch.cuda.max_memory_allocated) is printed as well.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import psutil

from kit.probes.settings import FastProbeSettings
from kit.readout.numbers import counted

ROOT = Path(__file__).resolve().parent.parent


def write_proxy(folder: Path, rows: int, eval_rows: int, dim: int, classes: int) -> None:
    """Gaussian classes in fp16, written chunk by chunk so the writer never holds them whole."""
    rng = np.random.default_rng(0)
    means = rng.standard_normal((classes, dim)).astype(np.float32) * 0.04
    for name, count in (("train", rows), ("eval", eval_rows)):
        features = np.lib.format.open_memmap(
            folder / f"{name}.npy", mode="w+", dtype=np.float16, shape=(count, dim)
        )
        labels = rng.integers(0, classes, count)
        for start in range(0, count, 8192):
            part = labels[start : start + 8192]
            noise = rng.standard_normal((len(part), dim), dtype=np.float32)
            features[start : start + 8192] = means[part] + noise
        features.flush()
        np.save(folder / f"{name}_labels.npy", labels)


def old_probe_module(revision: str) -> Path:
    """The probe module as it was at `revision`, as a file a child process can import."""
    source = subprocess.run(
        ["git", "show", f"{revision}:kit/probe.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "probe_at_revision.py"
    path.write_text(source)
    return path


def child(folder: Path, module: str, settings: dict) -> None:
    """One probe run in this (fresh) process; prints its memory and accuracy as JSON."""
    import torch

    if module == "kit":
        from kit.probes.fast import fast_probe
        from kit.probes.rows import Split

        probe = types.SimpleNamespace(
            Split=Split, FastProbeSettings=FastProbeSettings, fast_probe=fast_probe
        )
    else:
        spec = importlib.util.spec_from_file_location("probe_at_revision", module)
        probe = importlib.util.module_from_spec(spec)
        sys.modules["probe_at_revision"] = probe
        spec.loader.exec_module(probe)
    splits = []
    for name in ("train", "eval"):
        features = np.load(folder / f"{name}.npy", mmap_mode="r")
        labels = torch.from_numpy(np.load(folder / f"{name}_labels.npy"))
        if module != "kit":  # the old probe takes tensors: FeatureSet.torch()'s zero-copy view
            features = torch.from_numpy(np.load(folder / f"{name}.npy", mmap_mode="c"))
        splits.append(probe.Split(features, labels, name))
    config = probe.FastProbeSettings(
        lrs=settings["lrs"],
        weight_decays=settings["weight_decays"],
        epochs=settings["epochs"],
        device=settings["device"],
    )
    baseline = psutil.Process().memory_info().rss
    start = time.perf_counter()
    result = probe.fast_probe(*splits, settings["classes"], config, progress=False)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
    gpu = torch.cuda.max_memory_allocated() if settings["device"] == "cuda" else None
    print(
        json.dumps(
            {
                "extra_bytes": peak - baseline,
                "seconds": seconds,
                "gpu_bytes": gpu,
                "paper": result.top1("paper"),
                "heldout": result.top1("heldout"),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--eval", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lrs", type=float, nargs="+", default=list(FastProbeSettings().lrs))
    parser.add_argument(
        "--weight-decays", type=float, nargs="+", default=list(FastProbeSettings().weight_decays)
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--baseline-rev",
        default="ce8a1e6",
        help="git revision whose kit/probe.py is the old probe ('' to skip)",
    )
    parser.add_argument("--child", nargs=2, metavar=("FOLDER", "MODULE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = {
        "classes": args.classes,
        "epochs": args.epochs,
        "lrs": args.lrs,
        "weight_decays": args.weight_decays,
        "device": args.device,
    }
    if args.child:
        child(Path(args.child[0]), args.child[1], settings)
        return

    with tempfile.TemporaryDirectory() as folder:
        write_proxy(Path(folder), args.rows, args.eval, args.dim, args.classes)
        size = (args.rows + args.eval) * args.dim * 2
        print(
            f"proxy features: train {args.rows} x {args.dim}, eval {args.eval} x {args.dim}, "
            f"fp16 {size / 2**20:.0f} MiB; {args.classes} classes, "
            f"{len(args.lrs) * len(args.weight_decays)} heads, {counted(args.epochs, 'epoch')}, "
            f"{args.device}"
        )
        probes = [("new (this tree)", "kit")]
        if args.baseline_rev:
            old = old_probe_module(args.baseline_rev)
            probes.insert(0, (f"old ({args.baseline_rev})", str(old)))
        for label, module in probes:
            command = [sys.executable, *sys.argv, "--child", folder, module]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            figures = json.loads(out.strip().splitlines()[-1])
            print(
                f"{label:>20}: peak extra memory {figures['extra_bytes'] / 2**20:7.0f} MiB = "
                f"{figures['extra_bytes'] / size:.2f} x fp16 features; {figures['seconds']:6.1f}"
                f" s; top-1 paper {100 * figures['paper']:.2f}%, heldout "
                f"{100 * figures['heldout']:.2f}%"
            )
            if figures["gpu_bytes"] is not None:
                print(
                    f"{'':>20}  peak GPU memory {figures['gpu_bytes'] / 2**30:.1f} GiB = "
                    f"{figures['gpu_bytes'] / size:.2f} x fp16 features"
                )


if __name__ == "__main__":
    main()
