"""The power curve of the primary endpoint's verdict: how often a claim's primary condition comes
out reproduced, contradicted or inconclusive, by replicates and true effect, at a given spread.

The per-replicate values of the endpoint (catN minus cat1 on the mean over the transfer tasks)
are drawn from a normal distribution with the given spread; each draw is judged as notebook 03
judges its run (kit.stats.outcomes: 95% t interval, smallest effect of interest), so this is the
primary condition alone (controls far from their margins). The spread defaults to what a run
measured: pass an output folder and its `time_concat_verdicts.parquet` gives it (the primary
condition's sample std); or give `--std`. Prints, per replicate count, the minimum detectable
effect (80% power) and the rates at each true effect; `--chart FILE` also writes the curve
(reproduced rate against the true effect, one line per replicate count) as SVG or PNG.

    .venv/bin/python benchmarks/verdict_power.py outputs/cpu
    .venv/bin/python benchmarks/verdict_power.py --std 3.0 --chart docs/images/verdict_power.svg
"""

from __future__ import annotations

import argparse
from pathlib import Path

import altair as alt
import numpy as np
import polars as pl

from kit.stats import outcomes


def measured_std(folder: Path) -> float:
    """The primary condition's spread recorded by notebook 03 in `folder`."""
    path = folder / "time_concat_verdicts.parquet"
    if not path.exists():
        raise SystemExit(f"{path}: missing; run notebook 03 there first or give --std")
    primary = pl.read_parquet(path).filter(pl.col("claim") == "time-concat").row(0, named=True)
    if primary["std"] is None:
        raise SystemExit(f"{path}: the primary condition has no spread (one replicate?)")
    return float(primary["std"])


def rates(
    effect: float,
    std: float,
    replicates: int,
    smallest: float,
    draws: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    """Share of draws whose primary condition holds, is contradicted, or cannot tell."""
    found = [
        outcomes.judge(
            outcomes.Condition(
                "c", "a", "b", ("t",), outcomes.estimate(rng.normal(effect, std, replicates))
            ),
            smallest,
        )
        for _ in range(draws)
    ]
    return {
        name: float(np.mean([f == name for f in found]))
        for name in (outcomes.HOLDS, outcomes.CONTRADICTED, outcomes.INCONCLUSIVE)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, nargs="?", help="an output folder of notebook 03")
    parser.add_argument("--std", type=float, help="spread of the endpoint (points)")
    parser.add_argument(
        "--smallest", type=float, default=2.9, help="smallest effect of interest (points)"
    )
    parser.add_argument("--replicates", type=int, nargs="+", default=[3, 5, 8, 12])
    parser.add_argument(
        "--effects", type=float, nargs="+", default=[0.0, 1.0, 2.0, 2.9, 4.0, 5.8, 8.0]
    )
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--chart", type=Path, help="write the curve here (.svg or .png)")
    args = parser.parse_args()
    if args.std is None and args.folder is None:
        raise SystemExit("give an output folder of notebook 03 or --std")
    std = args.std if args.std is not None else measured_std(args.folder)
    rng = np.random.default_rng(0)
    print(
        f"spread of the endpoint {std:.2f} points, smallest effect of interest "
        f"{args.smallest:g}, {args.draws} draws per point"
    )
    rows = []
    for count in args.replicates:
        mde = outcomes.detectable(std, count)
        print(f"{count} replicates: detectable at 80% power {mde:.1f} points")
        for effect in args.effects:
            found = rates(effect, std, count, args.smallest, args.draws, rng)
            rows.append({"replicates": count, "true effect": effect, **found})
            print(
                f"  true effect {effect:4.1f}: reproduced {found[outcomes.HOLDS]:.3f}, "
                f"contradicted {found[outcomes.CONTRADICTED]:.3f}, inconclusive "
                f"{found[outcomes.INCONCLUSIVE]:.3f}"
            )
    if args.chart:
        data = (
            pl.DataFrame(rows)
            .unpivot(
                index=["replicates", "true effect"],
                on=[outcomes.HOLDS, outcomes.CONTRADICTED],
                variable_name="outcome",
                value_name="rate",
            )
            .with_columns(pl.col("outcome").replace({outcomes.HOLDS: "reproduced"}))
        )
        base = (
            alt.Chart()
            .mark_line(point=True)
            .encode(
                x=alt.X("true effect:Q", title="true gain on the endpoint (points)"),
                y=alt.Y("rate:Q", title="share of runs", scale=alt.Scale(domain=[0, 1])),
                color=alt.Color("replicates:O", title="replicates"),
            )
        )
        rule = (
            alt.Chart()
            .mark_rule(color="grey", strokeDash=[2, 2])
            .encode(x=alt.datum(args.smallest))
        )
        chart = (
            alt.layer(base, rule, data=data)
            .properties(width=300, height=220)
            .facet(column=alt.Column("outcome:N", title=None))
            .properties(
                title=f"Primary endpoint at a spread of {std:.1f} points; dotted: the smallest "
                f"effect of interest ({args.smallest:g})"
            )
        )
        chart.save(str(args.chart))
        print(f"wrote {args.chart}")


if __name__ == "__main__":
    main()
