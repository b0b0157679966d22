"""The group-sequential rule's calibration: how often it ends holds, contradicted, no effect of
interest or inconclusive, how many replicates it uses and at which look it stops, by simulation
at the looks the kit makes.

Each simulated run draws paired per-replicate values of a claim's endpoint (a true effect above
the margin of 0 plus noise of the given spread, normal or Student's t with 3 degrees of freedom
scaled to the same spread) and is judged look by look as kit.stats.sequential judges a
condition. Rows: the plans (rounds of 3 up to 12 and up to 24, O'Brien-Fleming-type spending by
default and Pocock-type for comparison) and, for each, the fixed design of as many replicates
as the plan's maximum; true effects 0 (the false-positive rate of `holds`), the smallest effect
of interest (the rate of a false `contradicted`, and power) and larger ones; and a worst case
for false positives, a smallest effect of interest so small that no other stop intervenes. The
spread defaults to the 4.7 points of the default job's primary endpoint (docs/benchmarks.md)
and the smallest effect of interest to the kit's 2.9 points.

    .venv/bin/python benchmarks/sequential_calibration.py
    .venv/bin/python benchmarks/sequential_calibration.py \
        --json docs/data/sequential_calibration.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import numpy as np

from kit.files.paths import REPO_ROOT
from kit.stats import sequential, simulation, spending
from kit.stats.sequential import Rounds

#: the effects simulated, as multiples of the smallest effect of interest
MULTIPLES = (0.0, 1.0, 2.0, 3.0)
#: the stand-in for "no smallest effect": only `holds` can stop a run early
TINY = 1e-6


def plans(most: list[int], first: int, add: int) -> list[tuple[str, Rounds]]:
    """The plans simulated: per maximum, both spending functions, then its fixed design."""
    found = []
    for limit in most:
        for kind in (spending.OBRIEN_FLEMING, spending.POCOCK):
            found.append(
                (
                    f"rounds of {add} from {first} to {limit}, {kind}",
                    Rounds(first, add, limit, spending=kind),
                )
            )
        found.append((f"fixed {limit}", Rounds.fixed(limit)))
    return found


def commit() -> str:
    """The kit's commit, for the record (empty outside a git checkout)."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    return done.stdout.strip()


def row(name: str, rounds: Rounds, effect: float, smallest: float, args, rng) -> dict:
    """One simulated setting as a row of the table."""
    found = simulation.simulate(rounds, effect, args.std, smallest, args.draws, rng, args.noise)
    return {
        "plan": name,
        "looks": list(rounds.looks),
        "spent_level": rounds.spent_level,
        "noise": args.noise,
        "true_effect": effect,
        "smallest_effect": smallest,
        **asdict(found),
    }


def show(entry: dict) -> str:
    rates = entry["rates"]
    stopped = " ".join(f"{100 * s:.0f}" for s in entry["stopped"])
    return (
        f"{entry['plan']:<44} {entry['noise']:<6} {entry['true_effect']:>5.1f} "
        f"{entry['smallest_effect']:>5.1f}  {100 * rates['holds']:5.1f} "
        f"{100 * rates['contradicted']:5.1f} {100 * rates['no effect of interest']:5.1f} "
        f"{100 * rates['inconclusive']:5.1f}  {entry['replicates']:5.1f}  [{stopped}]"
    )


def markdown(rows: list[dict]) -> str:
    """The rows as the Markdown table of docs/sequential.md (rates and stops in %)."""
    lines = [
        "| noise | plan | true effect | holds | contradicted | no effect of interest "
        "| inconclusive | mean replicates | stopping at each look |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in rows:
        rates = entry["rates"]
        stops = " / ".join(f"{100 * s:.0f}" for s in entry["stopped"])
        effect = f"{entry['true_effect']:.1f}"
        if entry["smallest_effect"] == TINY:
            effect += " (no other stop)"
        plan = entry["plan"].replace(spending.OBRIEN_FLEMING, "O'Brien-Fleming")
        lines.append(
            f"| {entry['noise']} | {plan.replace(spending.POCOCK, 'Pocock')} | {effect} "
            f"| {100 * rates['holds']:.2f} | {100 * rates['contradicted']:.2f} "
            f"| {100 * rates['no effect of interest']:.2f} | {100 * rates['inconclusive']:.1f} "
            f"| {entry['replicates']:.1f} | {stops} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--std", type=float, default=4.7, help="spread of the endpoint (points)")
    parser.add_argument("--smallest", type=float, default=2.9, help="smallest effect (points)")
    parser.add_argument("--first", type=int, default=3)
    parser.add_argument("--add", type=int, default=3)
    parser.add_argument("--most", type=int, nargs="+", default=[12, 24])
    parser.add_argument("--draws", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(
        f"spread {args.std:g} points, smallest effect of interest {args.smallest:g}, "
        f"{args.draws} runs per row, two-sided level {sequential.LEVEL}; rates in %, "
        "[share stopping at each look, %]"
    )
    print(
        f"{'plan':<44} {'noise':<6} {'true':>5} {'small':>5}  {'holds':>5} {'contr':>5} "
        f"{'no-int':>5} {'incon':>5}  {'reps':>5}"
    )
    rows = []
    for noise in simulation.NOISES:
        args.noise = noise
        for name, rounds in plans(args.most, args.first, args.add):
            settings = [(m * args.smallest, args.smallest) for m in MULTIPLES]
            for effect, smallest in [*settings, (0.0, TINY)]:
                rows.append(row(name, rounds, effect, smallest, args, rng))
                print(show(rows[-1]))
    print(markdown(rows))
    if args.json:
        record = {
            "kit_commit": commit(),
            "std": args.std,
            "smallest_effect": args.smallest,
            "draws": args.draws,
            "seed": args.seed,
            "level": sequential.LEVEL,
            "futility_power": sequential.FUTILITY_POWER,
            "rows": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
