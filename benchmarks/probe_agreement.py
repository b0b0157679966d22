"""How far the fast probe lands from a converged L-BFGS fit of the same cached features.

Every pair of cached training and evaluation features of one representation (same checkpoints,
same dataset) in a feature cache (`<run_root>/features`, written by notebook 03) is probed by
both: the same weight decays, held-out rows and standardisation. For each weight decay the fast
probe's fit closest to convergence (`kit.probes.fast.converged_heads`: the L-BFGS-finished fit with
`select_from: converged`, else the lowest-objective head at the last epoch) is set beside the
L-BFGS fit from zero; the figures are the largest |top-1 difference| in points and the largest
objective gap over the pairs, then the largest difference under the held-out rule (which, unless
the configuration sets `select_from: converged`, also picks the epoch and the learning rate),
and the mean L-BFGS iterations of both. The bar is at most 0.5 point.

    .venv/bin/python benchmarks/probe_agreement.py outputs/cpu/time_concat/features \\
        --config '{"lrs": [0.1], "epochs": 40, "batch_size": 128}'
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch

from kit.probes.fast import converged_heads, fast_probe
from kit.probes.lbfgs import lbfgs_probe
from kit.probes.rows import Split
from kit.probes.settings import FastProbeSettings, LbfgsProbeSettings


def cached_pairs(cache: Path) -> list[tuple[Path, Path]]:
    """(training, evaluation) folders of every representation cached with both splits."""
    found: dict[str, dict[str, Path]] = {}
    for record_file in sorted(cache.glob("*/record.json")):
        record = json.loads(record_file.read_text())
        key = json.dumps([record["checkpoints"], record["dataset"]])
        role = "eval" if record["split"] == "eval" else "train"
        found.setdefault(key, {})[role] = record_file.parent
    return [(both["train"], both["eval"]) for both in found.values() if len(both) == 2]


def split(folder: Path, name: str) -> Split:
    return Split(
        torch.from_numpy(np.load(folder / "features.npy")).float(),
        torch.from_numpy(np.load(folder / "labels.npy")).long(),
        name,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cache", type=Path, help="a feature cache folder (<run_root>/features)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="a FastProbeSettings as JSON (repeatable); default: the kit's defaults",
    )
    parser.add_argument("--weight-decays", type=float, nargs="+", default=[1e-3, 1e-2])
    parser.add_argument("--pairs", type=int, default=24, help="pairs drawn (seeded) from the cache")
    parser.add_argument("--heldout-fraction", type=float, default=0.1)
    args = parser.parse_args()
    pairs = cached_pairs(args.cache)
    if not pairs:
        raise SystemExit(f"{args.cache}: no representation has both splits cached")
    random.Random(0).shuffle(pairs)
    pairs = pairs[: args.pairs]
    shared = {"weight_decays": args.weight_decays, "heldout_fraction": args.heldout_fraction}
    configs = [FastProbeSettings(**(json.loads(text) | shared)) for text in args.config or ["{}"]]
    reference = LbfgsProbeSettings(**shared)
    loaded = [
        (train, evaluation, int(max(train.labels.max(), evaluation.labels.max())) + 1)
        for train, evaluation in ((split(t, "train"), split(e, "eval")) for t, e in pairs)
    ]
    exact, lbfgs_s = [], 0.0
    for train, evaluation, classes in loaded:
        start = time.perf_counter()
        exact.append(lbfgs_probe(train, evaluation, classes, reference))
        lbfgs_s += time.perf_counter() - start
    print(
        f"{len(pairs)} cached representations from {args.cache}; L-BFGS "
        f"{lbfgs_s / len(pairs):.2f} s a probe"
    )
    for config in configs:
        rows, fast_s = [], 0.0
        for (train, evaluation, classes), reference in zip(loaded, exact, strict=True):
            start = time.perf_counter()
            fast = fast_probe(train, evaluation, classes, config, progress=False)
            fast_s += time.perf_counter() - start
            heads = converged_heads(fast.history)
            for decay in args.weight_decays:
                head = heads.filter(pl.col("weight_decay") == decay).row(0, named=True)
                fit = reference.history.filter(pl.col("weight_decay") == decay).row(0, named=True)
                rows.append(
                    {
                        "weight_decay": decay,
                        "difference": 100 * (head["eval_top1"] - fit["eval_top1"]),
                        "objective_gap": head["train_loss"] - fit["train_loss"],
                        "iterations": head.get("iterations"),
                        "cold_iterations": fit["iterations"],
                    }
                )
            rows.append(
                {
                    "weight_decay": None,
                    "objective_gap": None,
                    "difference": 100 * (fast.top1("heldout") - reference.top1("heldout")),
                }
            )
        table = (
            pl.DataFrame(rows)
            .group_by("weight_decay", maintain_order=True)
            .agg(
                pl.col("difference").abs().max().alias("max |fast - L-BFGS| (points)"),
                pl.col("objective_gap").max().alias("max objective gap"),
                pl.col("iterations").mean(),
                pl.col("cold_iterations").mean(),
            )
        )
        print(
            f"\nfast probe {config.model_dump(exclude={'device', 'seed'})}: "
            f"{fast_s / len(pairs):.2f} s a probe"
        )
        for row in table.iter_rows(named=True):
            which = (
                f"weight decay {row['weight_decay']:g}" if row["weight_decay"] else "held-out rule"
            )
            gap, finished = row["max objective gap"], row["iterations"]
            print(
                f"  {which}: max |fast - L-BFGS| {row['max |fast - L-BFGS| (points)']:.2f} "
                f"points"
                + ("" if gap is None else f", max objective gap {gap:.2e}")
                + (
                    ""
                    if finished is None
                    else f"; L-BFGS iterations {finished:.0f} finishing"
                    f" the fast probe, {row['cold_iterations']:.0f} from zero"
                )
            )


if __name__ == "__main__":
    main()
