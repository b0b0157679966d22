"""Where the spread of a claim's primary endpoint comes from, on a finished notebook 03 run.

The endpoint is cat*n* minus cat1 on the mean top-1 over the transfer tasks, one value per
replicate (docs: Concepts, "Verdicts and the claims"). Its variance over replicates has three
sources, measured here from the run's own feature cache (nothing is trained or extracted):

* the probe: every (replicate, variant, task) probe is fitted again with `--seeds` different
  held-out rows, by the run's probe settings and rule; the mean variance of the endpoint across
  those seeds within a replicate is what the choice of held-out rows adds;
* the evaluation rows: with the chosen heads' per-row correctness, the variance of the paired
  difference of one task is var(d) / rows, d = (catN right) - (cat1 right) on a row; averaged
  over the tasks as the endpoint is. The evaluation images are the same in every replicate, so
  this bounds the share they add to the spread from above;
* training: what remains of the variance between replicates.

Printed: each replicate's endpoint and its per-task parts, the three components as standard
deviations and shares of the variance, and the replicates the plan would need for the smallest
effect of interest at the measured spread and at the spread left if a component were removed
(a larger evaluation split; an endpoint without the held-out choice, a fixed weight decay).

    .venv/bin/python benchmarks/endpoint_spread.py outputs/cpu --variant cat4 --seeds 4
"""

from __future__ import annotations

import argparse
import math
import pickle
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import scipy.stats
import torch

from kit.experiments.timecat import measure, planning
from kit.experiments.timecat.settings import TimecatSettings
from kit.params import params as kit_params
from kit.probes.lbfgs import convex_fit, zero_head
from kit.probes.rows import Split
from kit.probes.selection import BOUNDED, select
from kit.probes.settings import LbfgsProbeSettings
from kit.stats.sequential import power


def fitted_heads(
    train: Split, evaluation: Split, classes: int, settings: LbfgsProbeSettings, seed: int
) -> tuple[dict[float, np.ndarray], pl.DataFrame]:
    """Each weight decay's per-row correctness on the evaluation rows, as `lbfgs_probe` fits
    them (a regularisation path on held-out rows drawn with `seed`), and the fits' scores."""
    rows = convex_fit(
        train, evaluation, classes, settings.heldout_fraction, seed, torch.device("cpu")
    )
    linear, right, history = zero_head(train.features.shape[1], classes), {}, []
    for decay in sorted(settings.weight_decays, reverse=True):
        scored = rows.fit(linear, decay, settings.max_iter, settings.tolerance_change)
        history.append({"weight_decay": decay, "epoch": 1, **scored})
        with torch.no_grad():
            logits = linear(rows.standardised(rows.evaluation.features))
        right[decay] = (logits.argmax(1) == rows.eval_labels).numpy().astype(float)
    return right, pl.DataFrame(history)


#: per (variant, replicate, task, held-out draw): each weight decay's per-row correctness on the
#: evaluation rows, and the fits' scores
Fits = dict[tuple[str, int, str, int], tuple[dict[float, np.ndarray], pl.DataFrame]]
#: which weight decay's head a probe reports, from (variant, task, draw, its fits' scores)
Pick = Callable[[str, str, int, pl.DataFrame], float]


def probe_settings(params: TimecatSettings) -> LbfgsProbeSettings:
    settings = measure.probe_settings(params)
    if not isinstance(settings, LbfgsProbeSettings):
        raise SystemExit(f"probe_kind {params.probe_kind}: this benchmark refits the lbfgs probe")
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", help="a finished notebook 03 output folder")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--variant", default="cat4")
    parser.add_argument("--seeds", type=int, default=4, help="held-out draws per probe")
    parser.add_argument("--smallest", type=float, default=2.9, help="effect of interest, points")
    parser.add_argument("--save", help="write the refitted heads' correctness here (pickle)")
    parser.add_argument("--load", help="report from a file --save wrote, without refitting")
    args = parser.parse_args()
    params, _ = kit_params.load("03_time_concat", args.profile, output_dir=args.output_dir)
    assert isinstance(params, TimecatSettings)
    settings, rule = probe_settings(params), params.probe_rule
    tasks = [t for t in params.tasks if t.role != "in-distribution"]
    wanted = (params.baseline, args.variant)
    reps = [r for r in planning.plan(params).representations if r.variant in wanted]
    replicates = sorted({r.replicate for r in reps})
    # right[(variant, replicate, task, seed)] = (per-row correctness by decay, choice by rule)
    right: Fits = {}
    if args.load:
        right = pickle.loads(Path(args.load).read_bytes())
    start = time.perf_counter()
    for task in tasks if not args.load else []:
        found = measure.task_features(task, reps, params)
        for rep, train, test in zip(found.probed, found.train, found.eval, strict=True):
            splits = (Split(*train.torch(), "train"), Split(*test.torch(), "eval"))
            for seed in range(args.seeds):
                right[rep.variant, rep.replicate, task.name, seed] = fitted_heads(
                    *splits, found.num_classes, settings, settings.seed + seed
                )
        print(f"{task.name}: refitted, {time.perf_counter() - start:.0f} s", flush=True)
    if args.save:
        Path(args.save).write_bytes(pickle.dumps(right))
    report(right, replicates, wanted, [t.name for t in tasks], args, rule, settings)


def endpoint(
    right: Fits, replicate: int, tasks: list[str], wanted: tuple[str, str], seed: int, pick: Pick
) -> tuple[float, list[float], float]:
    """One replicate's endpoint (points), its per-task parts and its evaluation-row variance,
    with each probe's head chosen by `pick(variant, task, seed, scores)`."""
    parts, row_variance = [], 0.0
    for task in tasks:
        base, other = (
            right[v, replicate, task, seed][0][
                pick(v, task, seed, right[v, replicate, task, seed][1])
            ]
            for v in wanted
        )
        difference = 100 * (other - base)
        parts.append(float(difference.mean()))
        row_variance += float(difference.var(ddof=1)) / len(difference)
    return statistics.fmean(parts), parts, row_variance / len(tasks) ** 2


def pooled(right: Fits, rule: str, max_gap: float | None) -> Pick:
    """The rule applied once per (variant, task, held-out draw) to the fits' scores averaged
    over the replicates: one weight decay for every replicate, still chosen on training rows."""
    chosen = {(variant, task, seed): 0.0 for variant, _, task, seed in right}
    for variant, task, seed in chosen:
        tables = [s for (v, _, t, d), (_, s) in right.items() if (v, t, d) == (variant, task, seed)]
        mean = pl.concat(tables).group_by("weight_decay", maintain_order=True).mean()
        picked = select(mean.with_columns(epoch=pl.lit(1)), ["weight_decay"], 11, max_gap)
        chosen[variant, task, seed] = picked.filter(pl.col("rule") == rule)["weight_decay"][0]
    return lambda v, t, s, _: chosen[v, t, s]


def report(right: Fits, replicates, wanted, tasks, args, rule, settings) -> None:
    def by(name: str) -> Pick:
        def pick(_v: str, _t: str, _s: int, scores: pl.DataFrame) -> float:
            picked = select(scores, ["weight_decay"], 11, settings.max_gap)
            return picked.filter(pl.col("rule") == name)["weight_decay"][0]

        return pick

    first = [endpoint(right, r, tasks, wanted, 0, by(rule)) for r in replicates]
    print(f"\n{args.variant} minus {wanted[0]}, rule {rule}, held-out draw 0:")
    for r, (value, parts, _) in zip(replicates, first, strict=True):
        shown = ", ".join(f"{t} {p:+.1f}" for t, p in zip(tasks, parts, strict=True))
        print(f"  replicate {r}: {value:+.1f} ({shown})")
    choices = [(f"rule {name}", by(name)) for name in ("paper", "heldout", BOUNDED)]
    choices.append((f"rule {rule}, pooled over replicates", pooled(right, rule, settings.max_gap)))
    choices += [
        (f"weight decay {d:g} fixed", lambda _v, _t, _s, _c, d=d: d) for d in settings.weight_decays
    ]
    print(
        "\nendpoint | mean | sd over replicates | from the held-out draw | from the evaluation "
        "rows (bound) | from training (the rest) | replicates for the smallest effect"
    )
    for name, pick in choices:
        values = [
            [endpoint(right, r, tasks, wanted, s, pick) for r in replicates]
            for s in range(args.seeds)
        ]
        total = statistics.fmean(statistics.variance(v for v, _, _ in draw) for draw in values)
        probe = statistics.fmean(
            statistics.variance(draw[i][0] for draw in values) for i in range(len(replicates))
        )
        rows_part = statistics.fmean(part for draw in values for _, _, part in draw)
        mean = statistics.fmean(v for draw in values for v, _, _ in draw)
        training = total - probe - rows_part
        print(
            f"{name} | {mean:+.1f} | {math.sqrt(total):.2f} | {share(probe, total)} | "
            f"{share(rows_part, total)} | {share(training, total)} | "
            f"{needed(math.sqrt(total), args.smallest)}"
        )


def share(part: float, total: float) -> str:
    """A component as a standard deviation and share of the variance (negative: within noise)."""
    return f"{math.sqrt(max(part, 0.0)):.2f} ({part / total:.0%})"


def needed(sd: float, effect: float) -> int:
    """Replicates for 80% power at `effect` with a paired two-sided 95% t-test at spread sd
    (one look: a plan in rounds needs somewhat more)."""
    for n in range(3, 400):
        if power(effect, sd, n, float(scipy.stats.t.ppf(0.975, n - 1))) >= 0.8:
            return n
    return 400


if __name__ == "__main__":
    main()
