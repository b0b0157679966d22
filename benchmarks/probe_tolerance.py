"""What L-BFGS's stopping tolerance costs: the L-BFGS probe at torch's default tolerance against a
looser one, on every representation of a feature cache.

Each (training, evaluation) pair of the cache (`probe_agreement.cached_pairs`: one checkpoint's
features, written by notebook 03) is probed twice with the same weight decays (a regularisation
path), held-out rows and standardisation, once per tolerance on the change of objective per
iteration. Prints the wall time and mean iterations of both, the largest |top-1 difference| in
points over every weight decay's head, and the largest under the held-out rule.

    .venv/bin/python benchmarks/probe_tolerance.py outputs/cpu/time_concat/features --loose 1e-7
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from probe_agreement import cached_pairs, split

from kit.probes.lbfgs import lbfgs_probe
from kit.probes.settings import TOLERANCE_CHANGE, LbfgsProbeSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cache", type=Path, help="a feature cache folder (<run_root>/features)")
    parser.add_argument("--loose", type=float, default=1e-7, help="the looser tolerance")
    parser.add_argument(
        "--weight-decays", type=float, nargs="+", default=[1e-3, 1e-2, 0.1, 1.0, 10.0]
    )
    parser.add_argument("--pairs", type=int, default=40, help="the first pairs of the cache")
    args = parser.parse_args()
    pairs = cached_pairs(args.cache)[: args.pairs]
    if not pairs:
        raise SystemExit(f"{args.cache}: no representation cached with both splits")
    seconds = {TOLERANCE_CHANGE: 0.0, args.loose: 0.0}
    iterations = {TOLERANCE_CHANGE: 0, args.loose: 0}
    worst_head = worst_rule = 0.0
    for train_folder, eval_folder in pairs:
        train, evaluation = split(train_folder, "train"), split(eval_folder, "eval")
        classes = int(max(train.labels.max(), evaluation.labels.max())) + 1
        found = {}
        for tolerance in seconds:
            settings = LbfgsProbeSettings(
                weight_decays=args.weight_decays, tolerance_change=tolerance
            )
            start = time.perf_counter()
            found[tolerance] = lbfgs_probe(train, evaluation, classes, settings)
            seconds[tolerance] += time.perf_counter() - start
            iterations[tolerance] += int(found[tolerance].history["iterations"].sum())
        tight, loose = found[TOLERANCE_CHANGE], found[args.loose]
        heads = (tight.history["eval_top1"] - loose.history["eval_top1"]).abs().max()
        worst_head = max(worst_head, 100 * float(heads))
        worst_rule = max(worst_rule, 100 * abs(tight.top1("heldout") - loose.top1("heldout")))
    fits = len(pairs) * len(args.weight_decays)
    for tolerance, spent in seconds.items():
        print(
            f"tolerance {tolerance:g}: {spent:.1f} s, "
            f"{iterations[tolerance] / fits:.0f} iterations per fit ({len(pairs)} pairs)"
        )
    print(
        f"time ratio {seconds[args.loose] / seconds[TOLERANCE_CHANGE]:.2f}; largest |top-1 "
        f"difference|: {worst_head:.2f} point over every head, {worst_rule:.2f} under the "
        "held-out rule"
    )


if __name__ == "__main__":
    main()
