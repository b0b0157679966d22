"""The flagged-cell rule's error rates, by simulation on planted worlds of probe heads.

A claim's condition that reads a flagged probe cell keeps only the judgement its flag's bias
cannot have made (kit.stats.outcomes, docs/concepts.md "Flagged cells"): a `holds` with the
treatment's cell flagged, a `contradicted` with the reference's. The argument: the evaluation
rows take no part in the choice among heads, so a noisy choice can only pick a head no better
than the best one, and a flagged cell's evaluation top-1 is biased down, never up. This script
checks it with the kit's own code on planted runs rather than on the argument alone.

Each simulated run has `replicates` replicates of two variants (cat4, the treatment, and cat1,
the reference) probed on one task. A variant's probe path has five heads (weight decays) whose
true accuracies lie 0, 1, 2, 4 and 8 points below its best head; the true effect is cat4's best
head minus cat1's. A probe chooses the head with the highest top-1 on its held-out rows (binomial
draws) and is scored on 512 evaluation rows drawn apart from them. The side a scenario makes
noisy chooses on few held-out rows (and their draw is optimistic for its chosen head), so its
cells get flagged; the other side chooses on 205 rows, as the cpu profile does. The kit then
flags cells (kit.experiments.timecat.cells.probe_cells, max_probe_optimism 2.9) and judges the
condition cat4 vs cat1 (kit.experiments.timecat.claims.condition, kit.stats.outcomes.judge).

Printed per scenario: the true effect, which side is noisy, the share of runs with a flagged
cell, and the rates of each judgement among flagged runs beside the level they must stay under:
a false `holds` (true effect at the margin, 0) at most 2.5 %, a false `contradicted` (true
effect at the smallest effect of interest, 2.9) at most 2.5 %. The rows the rule blocks are
shown too, with the rate they would have had: the reason they are blocked.

    .venv/bin/python benchmarks/flag_calibration.py            # 2,000 runs a scenario
    .venv/bin/python benchmarks/flag_calibration.py --runs 500
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import polars as pl

from kit.experiments.timecat import cells, claims
from kit.stats import outcomes

#: how far each head of a path lies below the best one (points)
HEAD_GAPS = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
#: held-out rows of a sure choice (the cpu profile: 10 % of 2,048) and of a noisy one
SURE_ROWS, NOISY_ROWS = 205, 12
EVAL_ROWS, BASE, SMALLEST, MAX_OPTIMISM = 512, 60.0, 2.9, 2.9
#: (name, true effect, noisy side, the judgement whose rate is checked, whether the rule keeps it)
SCENARIOS = (
    ("treatment flagged, no effect", 0.0, "cat4", outcomes.HOLDS, True),
    ("reference flagged, effect of interest", SMALLEST, "cat1", outcomes.CONTRADICTED, True),
    ("reference flagged, no effect", 0.0, "cat1", outcomes.HOLDS, False),
    ("treatment flagged, effect of interest", SMALLEST, "cat4", outcomes.CONTRADICTED, False),
)


def probe(best: float, rows: int, rng: np.random.Generator) -> tuple[float, float]:
    """One probe path: the chosen head's held-out and evaluation top-1 (fractions)."""
    truth = (best - HEAD_GAPS) / 100
    heldout = rng.binomial(rows, truth) / rows
    chosen = int(np.argmax(heldout))
    return float(heldout[chosen]), float(rng.binomial(EVAL_ROWS, truth[chosen]) / EVAL_ROWS)


def one_run(effect: float, noisy: str, replicates: int, rng: np.random.Generator) -> pl.DataFrame:
    """A planted run's probe results in the kit's schema (one task, the held-out rule)."""
    rows = []
    for replicate in range(replicates):
        for variant, best in (("cat4", BASE + effect), ("cat1", BASE)):
            held, top1 = probe(best, NOISY_ROWS if variant == noisy else SURE_ROWS, rng)
            rows.append(
                {
                    "variant": variant,
                    "task": "shape",
                    "role": "in-mixture",
                    "rule": "heldout",
                    "replicate": replicate,
                    "top1": top1,
                    "heldout_top1": held,
                    "train_top1": top1,
                    "eval_rows": EVAL_ROWS,
                }
            )
    return pl.DataFrame(rows)


def judged(results: pl.DataFrame) -> tuple[bool, str, str]:
    """Whether a cell is flagged, the interval's own judgement and the rule's."""
    marked = cells.flagged(cells.probe_cells(results, "heldout", MAX_OPTIMISM))
    condition = claims.condition(
        results, "heldout", "cat4 vs cat1", "cat4", "cat1", ["in-mixture"], flagged=marked
    )
    raw = outcomes.raw_judgement(condition, SMALLEST)
    return bool(marked), raw, outcomes.judge(condition, SMALLEST)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="simulated runs a scenario")
    parser.add_argument("--replicates", type=int, default=6, help="replicates a run (cpu: 6)")
    parser.add_argument("--seed", type=int, default=2506_18221)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    level = outcomes.LEVEL / 2
    print(
        f"{args.runs:,} runs a scenario, {args.replicates} replicates, one task; noisy side "
        f"chooses on {NOISY_ROWS} held-out rows, the other on {SURE_ROWS}; level {level:.1%}"
    )
    print(
        f"| {'scenario':<40} | flagged runs | {'judgement':<12} | rate among flagged | "
        "the rule  | at most |"
    )
    print(f"|{'-' * 42}|{'-' * 14}|{'-' * 14}|{'-' * 20}|{'-' * 11}|{'-' * 9}|")
    for name, effect, noisy, judgement, kept in SCENARIOS:
        found = [judged(one_run(effect, noisy, args.replicates, rng)) for _ in range(args.runs)]
        flagged = [(raw, ruled) for hit, raw, ruled in found if hit]
        rate = sum(raw == judgement for raw, _ in flagged) / max(len(flagged), 1)
        slack = 3 * math.sqrt(level * (1 - level) / max(len(flagged), 1))
        verdict = "keeps it" if kept else "blocks it"
        bound = f"{level:.1%}" if kept else "n/a"
        ok = "" if not kept else (" ok" if rate <= level + slack else " EXCEEDED")
        print(
            f"| {name:<40} | {len(flagged) / args.runs:12.0%} | {judgement:<12} | "
            f"{rate:18.2%} | {verdict:<9} | {bound:>7} |{ok}"
        )


if __name__ == "__main__":
    main()
