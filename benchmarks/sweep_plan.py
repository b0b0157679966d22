"""How the sweep should spend its replicates: for candidate plans of rounds, the expected number of
sweep cells decided after the first round and at the end, the expected rounds and the expected
wall time, by simulating the sweep from a recorded one, with each plan's error rates from the
group-sequential calibration.

Assumption: each cell's conditions (cat4 vs cat1, vs wide1-eq, vs random4) are paired per-replicate
values drawn as independent normals with that cell's recorded mean and sample spread (its
replicates' std, never below the recorded resolution): the recorded means and spreads stand in
for the true ones, the conditions of one replicate are drawn independently of each other, and no
probe cell is flagged (a flag's own rule is not simulated). Every simulated sweep runs through
the kit's own rounds: kit.stats.rounds.run_rounds trains the cells still undecided round after
round, and judge_round judges each look (kit.stats.sequential's repeated intervals), so a plan's
looks, stops and wall budget are the notebook's. A round's wall time is kit.experiments.timecat
.sweep_cost's cost model for the cells it trains (per world and replicate one training run, to
the highest budget still undecided in that world; features and probes per cell) at per-unit
rates, plus a notebook's fixed cost once. The rates are the ones a recorded sweep folder's first
round measured (`--rates-from`, its stage records: seconds over that round's work in the cost
model) or the recorded main job's (docs/results/cpu/rates.json); `--scale` multiplies them (0.6:
replicates at 0.6 of their cost). A cell counts as decided when its claim is reproduced or
contradicted.

Each plan's error rates come from benchmarks/sequential_calibration.py's simulation (its `row`):
a false `holds` (true effect 0) and a false `contradicted` (true effect the smallest of
interest), normal and heavy-tailed noise, at the calibration's spread.

    .venv/bin/python benchmarks/sweep_plan.py --rates-from outputs/sweep
    .venv/bin/python benchmarks/sweep_plan.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from kit.experiments.timecat import claims, sweep_cost, sweep_settings
from kit.experiments.timecat.sweep_settings import Cell
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu_records
from kit.params import params
from kit.readout.progress import stage_spans
from kit.runtime import machine
from kit.stats import outcomes, rounds, simulation, spending
from kit.stats.sequential import Rounds

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sequential_calibration  # noqa: E402  (a benchmark beside this one, not a package)

#: the recorded sweep whose cells are simulated by default (the one with the most replicates)
RECORD = REPO_ROOT / "docs" / "results" / "sweep" / "sweep_summary.json"
NOTEBOOK = "04_when_concat_helps"
#: the plans compared: (first, add, most), each with both spending functions
SHAPES = ((3, 3, 9), (4, 2, 8), (4, 2, 10), (4, 4, 12), (5, 3, 11), (6, 3, 12))
DECIDED = (outcomes.REPRODUCED, outcomes.CONTRADICTED)

Key = tuple[int, int]


def recorded(path: Path) -> dict[Key, list[dict]]:
    """Per cell (world seed, budget), its conditions' recorded means and spreads."""
    found: dict[Key, list[dict]] = defaultdict(list)
    for row in json.loads(path.read_text())["verdicts"]:
        values = row["values"] or []
        if len(values) < 2:
            raise ValueError(f"{path}: {row['condition']} of a cell has no spread")
        found[row["world_seed"], row["budget"]].append(
            {
                "name": row["condition"],
                "variant": row["variant"],
                "against": row["against"],
                "tasks": tuple(row["tasks"]),
                "margin": row["margin"],
                "resolution": row["resolution"],
                "mean": float(np.mean(values)),
                "std": float(np.std(values, ddof=1)),
            }
        )
    return dict(found)


def measured_rates(out: Path, cells: list[Cell]) -> sweep_cost.Rates:
    """The per-unit rates a sweep folder's first round measured: its stage records' training,
    extraction and probes over the cost model's work for every cell's first round (a folder
    whose cells all stopped after one round, else the rates would mix rounds)."""
    summary = json.loads((out / "sweep_summary.json").read_text())
    if any(cell["rounds"] != 1 for cell in summary["cells"]):
        raise ValueError(f"{out}: some cell took more than one round; give a first-round run")
    stages = stage_spans(out / f".{NOTEBOOK}.stages.jsonl")
    extraction = sum(s for name, (s, _) in stages.items() if name.startswith("features"))
    work = sweep_cost.cost(cells)
    provenance = json.loads((out / f"{NOTEBOOK}.provenance.json").read_text())
    wall = float(provenance["wall_s"])
    numerics = provenance.get("cpu_numerics") or {}
    where = (
        f"the first round of a sweep under numerics {numerics.get('version', '?')} on "
        f"{numerics.get('cpu', 'an unnamed CPU')}, {provenance.get('cores', '?')} cores, load "
        f"average {(provenance.get('load_average') or ['?'])[0]}"
    )
    return sweep_cost.Rates(
        {
            "iteration": stages["training"][0] / work.iterations,
            "extraction": extraction / work.extractions,
            "probe": (stages["probes"][0] - extraction) / work.features,
        },
        max(wall - stages["training"][0] - stages["probes"][0], 0.0),
        where,
    )


class Pricer:
    """A round's wall seconds by the cost model, cached per world (worlds share no work)."""

    def __init__(self, cells: list[Cell], per: Mapping[str, float], fixed: float):
        self.by_key = {cell.key: cell for cell in cells}
        self.per = dict(per)
        #: a notebook's fixed seconds, counted once a sweep
        self.fixed = fixed
        self.seen: dict[tuple, float] = {}

    def __call__(self, pending: Mapping[Key, range]) -> float:
        worlds: dict[int, list] = defaultdict(list)
        for key, span in sorted(pending.items()):
            worlds[key[0]].append((key, span.start, span.stop))
        total = 0.0
        for part in worlds.values():
            signature = tuple(part)
            if signature not in self.seen:
                work = sweep_cost.cost([self.by_key[k].look(range(a, b)) for k, a, b in part])
                self.seen[signature] = sum(work.seconds(self.per).values())
            total += self.seen[signature]
        return total


def one_sweep(
    plan: Rounds,
    cells: Mapping[Key, list[dict]],
    smallest: float,
    price: Pricer,
    draws: dict[Key, np.ndarray],
    wall_s: float | None,
    memo: dict,
) -> dict:
    """One simulated sweep of `plan` on the drawn values (per cell: conditions x `most`);
    `memo` keeps the looks judged on these draws, which a sweep with another wall budget makes
    again."""
    clock = [0.0]
    first: dict[Key, bool] = {}

    def step(pending: Mapping[Key, range]) -> bool:
        clock[0] += price(pending)
        return True

    def judge(key: Key, counts: tuple[int, ...], halt: str | None) -> list[rounds.Round]:
        if (key, counts, halt) not in memo:
            conditions = [
                outcomes.Condition(
                    c["name"],
                    c["variant"],
                    c["against"],
                    c["tasks"],
                    outcomes.estimate(values[: counts[-1]], resolution=c["resolution"]),
                    c["margin"],
                )
                for c, values in zip(cells[key], draws[key], strict=True)
            ]
            memo[key, counts, halt] = rounds.judge_round(
                claims.TIME_CONCAT, conditions, smallest, plan, counts, halt
            )
        found = memo[key, counts, halt]
        if len(counts) == 1:
            first[key] = found.status in DECIDED
        return [found]

    done = rounds.run_rounds(list(cells), plan, wall_s, step, judge, clock=lambda: clock[0])
    return {
        "first": sum(first.values()),
        "end": sum(
            all(found.status in DECIDED for found in cell.claims.values()) for cell in done.values()
        ),
        "rounds": max(len(cell.counts) for cell in done.values()),
        "seconds": clock[0] + price.fixed,
    }


def simulate(
    plan: Rounds,
    cells: Mapping[Key, list[dict]],
    smallest: float,
    runs: list[tuple[Pricer, float | None]],
    args: argparse.Namespace,
) -> list[dict]:
    """`args.sweeps` simulated sweeps of `plan` at each (rates, wall budget) of `runs`, on the
    same draws (the same for every plan: common random numbers), summarised: the mean cells
    decided after the first round and at the end, the share of sweeps deciding every cell, the
    mean rounds and seconds, and the share deciding every cell within `args.wall_s` seconds."""
    rng = np.random.default_rng(args.seed)
    found: list[list[dict]] = [[] for _ in runs]
    for _ in range(args.sweeps):
        draws = {
            key: np.array([rng.normal(c["mean"], c["std"], args.longest) for c in conditions])
            for key, conditions in cells.items()
        }
        memo: dict = {}
        for kept, (price, wall_s) in zip(found, runs, strict=True):
            kept.append(one_sweep(plan, cells, smallest, price, draws, wall_s, memo))
    every = len(cells)
    return [
        {
            "first": float(np.mean([r["first"] for r in kept])),
            "end": float(np.mean([r["end"] for r in kept])),
            "all": float(np.mean([r["end"] == every for r in kept])),
            "rounds": float(np.mean([r["rounds"] for r in kept])),
            "seconds": float(np.mean([r["seconds"] for r in kept])),
            "within": float(
                np.mean([r["end"] == every and r["seconds"] <= args.wall_s for r in kept])
            ),
        }
        for kept in found
    ]


def errors(plan: Rounds, name: str, args) -> dict[str, float]:
    """The plan's false `holds` and false `contradicted` rates, in %, under both noises
    (sequential_calibration's rows)."""
    found = {}
    rng = np.random.default_rng(args.seed)
    for noise in simulation.NOISES:
        calibration = argparse.Namespace(std=args.std, draws=args.draws, noise=noise)
        null = sequential_calibration.row(name, plan, 0.0, args.smallest, calibration, rng)
        edge = sequential_calibration.row(
            name, plan, args.smallest, args.smallest, calibration, rng
        )
        found[f"holds {noise}"] = 100 * null["rates"]["holds"]
        found[f"contr {noise}"] = 100 * edge["rates"]["contradicted"]
    return found


def plans(shapes: list[tuple[int, int, int]]) -> list[tuple[str, Rounds]]:
    """Each shape (first, add, most) with Pocock- and O'Brien-Fleming-type spending."""
    return [
        (f"{first}+{add}..{most} {kind}", Rounds(first, add, most, spending=kind))
        for first, add, most in shapes
        for kind in (spending.POCOCK, spending.OBRIEN_FLEMING)
    ]


def cpu() -> str:
    """The CPU's words for every time figure (kit.numerics.cpu_records names the model, with
    its vendor, family and model) and the cores this process may use."""
    return f"{cpu_records.describe(cpu_records.identity())}, {machine.usable_cores()} cores"


def shown(path: Path) -> str:
    """A path as the repository's own where it lies in it."""
    path = path.resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def markdown(rows: list[dict], scales: list[float], wall_s: float) -> str:
    """The rows as a Markdown table (seconds at each rate scale, error rates in %)."""
    head = (
        "| plan | decided after round 1 | decided at the end | all 18 | rounds | "
        + " | ".join(f"seconds at x{s:g} (all within {wall_s:.0f} s)" for s in scales)
        + " | "
        + " | ".join(f"rounds.wall_s {wall_s:.0f} at x{s:g}: decided (all)" for s in scales)
        + " | false holds, normal / t3 | false contradicted, normal / t3 |"
    )
    lines = [head, "|" + "---|" * (7 + 2 * len(scales))]
    for row in rows:
        free, bounded, errs = row["free"], row["bounded"], row["errors"]
        plan = row["plan"].replace(spending.OBRIEN_FLEMING, "O'Brien-Fleming")
        lines.append(
            f"| {plan.replace(spending.POCOCK, 'Pocock')} | {free[0]['first']:.1f} "
            f"| {free[0]['end']:.1f} | {100 * free[0]['all']:.0f} % | {free[0]['rounds']:.2f} | "
            + " | ".join(f"{f['seconds']:,.0f} ({100 * f['within']:.0f} %)" for f in free)
            + " | "
            + " | ".join(f"{b['end']:.1f} ({100 * b['within']:.0f} %)" for b in bounded)
            + f" | {errs['holds normal']:.2f} / {errs['holds t3']:.2f} "
            f"| {errs['contr normal']:.2f} / {errs['contr t3']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", type=Path, default=RECORD, help="a sweep_summary.json")
    parser.add_argument("--rates-from", type=Path, help="a first-round sweep output folder")
    parser.add_argument("--scale", type=float, nargs="+", default=[1.0, 0.6])
    parser.add_argument("--wall-s", type=float, default=2050.0, help="wall budget to test (s)")
    parser.add_argument("--sweeps", type=int, default=100, help="simulated sweeps per plan")
    parser.add_argument("--draws", type=int, default=100_000, help="calibration runs per row")
    parser.add_argument("--std", type=float, default=4.7, help="calibration spread (points)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shapes",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        nargs="+",
        default=list(SHAPES),
        help="plans as first,add,most (default: %(default)s)",
    )
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--quick", action="store_true", help="the first 2 shapes, 20 sweeps")
    args = parser.parse_args()
    if args.quick:
        args.sweeps, args.draws, args.shapes = 20, 10_000, args.shapes[:2]
    started = time.perf_counter()
    settings = params.load(NOTEBOOK, "sweep")[0]
    assert isinstance(settings, sweep_settings.SweepSettings)
    profile = sweep_settings.cells(settings)
    cells = recorded(args.record)
    smallest = profile[0].settings.smallest_effect
    args.smallest = smallest
    args.longest = max(most for _, _, most in args.shapes)
    rates = (
        measured_rates(args.rates_from, profile) if args.rates_from else sweep_cost.recorded_rates()
    )
    current = profile[0].settings.design
    print(
        f"{len(cells)} cells of {shown(args.record)} (normal replicates at each condition's "
        f"recorded mean and spread), {args.sweeps} simulated sweeps per plan, smallest effect "
        f"{smallest:g}; rates per unit at {rates.measured_on}: "
        + ", ".join(f"{k} {v:.4g} s" for k, v in rates.per.items())
        + f", fixed {rates.fixed:.0f} s; profile's plan {current.first}+{current.add}.."
        f"{current.most} {current.spending}; computed on {cpu()}, load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    scales = "/".join(f"x{s:g}" for s in args.scale)
    print(
        f"columns: cells decided after round 1 and at the end, share of sweeps deciding all "
        f"{len(cells)}, rounds (no wall budget); per rate scale ({scales}) the mean seconds and "
        f"the share deciding all within {args.wall_s:.0f} s (no wall budget); per scale, with "
        f"rounds.wall_s {args.wall_s:.0f} (the kit's rule: no round starts that would end past "
        "it at the last round's rate; the first round is not bounded), cells decided, the "
        "share deciding all within the budget and the mean seconds; the plan's false holds "
        "(true effect 0) and false contradicted (true effect the smallest) in %, normal and "
        "t3 noise"
    )
    print(
        f"{'plan':<24} {'1st':>5} {'end':>5} {'all':>5} {'rnds':>5}  "
        + " ".join(f"{'s x' + format(s, 'g'):>6} {'in':>4}" for s in args.scale)
        + "  "
        + " ".join(f"{'wall x' + format(s, 'g'):>16}" for s in args.scale)
        + "  holds(n t3)  contr(n t3)"
    )
    rows = []
    for name, plan in plans(args.shapes):
        runs: list[tuple[Pricer, float | None]] = []
        for scale in args.scale:
            price = Pricer(
                profile, {k: v * scale for k, v in rates.per.items()}, rates.fixed * scale
            )
            runs += [(price, None), (price, args.wall_s)]
        found = simulate(plan, cells, smallest, runs, args)
        free, bounded = found[0::2], found[1::2]
        rates_found = errors(plan, name, args)
        rows.append({"plan": name, "free": free, "bounded": bounded, "errors": rates_found})
        print(
            f"{name:<24} {free[0]['first']:5.1f} {free[0]['end']:5.1f} "
            f"{100 * free[0]['all']:4.0f}% {free[0]['rounds']:5.2f}  "
            + " ".join(f"{f['seconds']:6.0f} {100 * f['within']:3.0f}%" for f in free)
            + "  "
            + " ".join(
                f"{b['end']:5.1f} {100 * b['within']:3.0f}% {b['seconds']:5.0f}" for b in bounded
            )
            + f"  {rates_found['holds normal']:4.2f} {rates_found['holds t3']:4.2f}"
            f"  {rates_found['contr normal']:4.2f} {rates_found['contr t3']:4.2f}"
        )
    print(markdown(rows, args.scale, args.wall_s))
    if args.json:
        record = {
            "record": shown(args.record),
            "rates": rates.per,
            "fixed": rates.fixed,
            "measured_on": rates.measured_on,
            "cpu": cpu(),
            "scale": args.scale,
            "wall_s": args.wall_s,
            "sweeps": args.sweeps,
            "rows": rows,
        }
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    print(f"in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
