"""What notebook 04's sweep costs per unit of work on this machine, from a small real sweep, and
the full sweep's expected wall time at those rates.

Runs the sweep profile's cells shrunk by `--set`-style overrides (default: world 0, budgets 60 and
120, the profile's replicates) into a temporary output folder: trains their merged plan in one
launch (kit.experiments.timecat.sweep.train_all), extracts every cell's features, then probes
every cell from the cached features, timing each phase. Prints the seconds per iteration of
cat1's compute, per checkpoint extraction (one checkpoint's features on one task) and per base
network's features probed on a task, and kit.experiments.timecat.sweep_cost.cost_line for the full
profile at those rates (with the recorded main job's fixed cost of a notebook): the units of the
rates the main job records (docs/results/cpu/rates.json), which estimates use before notebook 03
has run on a machine.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sweep_cost.py
    .venv/bin/python benchmarks/sweep_cost.py --budgets 60 480 --worlds 0
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from kit.experiments.timecat import measure, sweep, sweep_cost, sweep_settings
from kit.params import params
from kit.readout.numbers import counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="sweep")
    parser.add_argument("--budgets", type=int, nargs="+", default=[60, 120])
    parser.add_argument("--worlds", type=int, nargs="+", default=[0])
    parser.add_argument("--keep", help="output folder to keep (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or scratch
        small = params.load(
            "04_when_concat_helps",
            args.profile,
            output_dir=out,
            overrides={"budgets": args.budgets, "world_seeds": args.worlds},
        )[0]
        cells = sweep_settings.cells(small)
        work = sweep_cost.cost(cells)
        start = time.perf_counter()
        sweep.train_all(small, cells)
        trained = time.perf_counter()
        merged = sweep.plan_cells(cells)
        for cell in cells:
            for task in cell.settings.tasks:
                measure.task_features(
                    task, merged.representations[cell.world_seed, cell.budget], cell.settings
                )
        extracted = time.perf_counter()
        sweep.probe_cells(small, cells)
        probed = time.perf_counter()
    per = {
        "iteration": (trained - start) / work.iterations,
        "extraction": (extracted - trained) / work.extractions,
        "probe": (probed - extracted) / work.features,
    }
    print(
        f"{counted(len(cells), 'cell')} (worlds {args.worlds}, budgets {args.budgets}) on "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}: training "
        f"{trained - start:.0f} s, extraction {extracted - trained:.0f} s, probes "
        f"{probed - extracted:.0f} s"
    )
    print(f"  {work}")
    print("  seconds per unit: " + ", ".join(f"{k} {v:.4g}" for k, v in per.items()))
    full = params.load("04_when_concat_helps", args.profile)[0]
    print(
        f"the full {args.profile} sweep: "
        + sweep_cost.cost_line(
            sweep_cost.cost(sweep_settings.cells(full)),
            sweep_cost.Rates(
                per,
                sweep_cost.recorded_rates().fixed,
                f"this machine now (load average {os.getloadavg()[0]:.1f})",
            ),
        )
    )


if __name__ == "__main__":
    main()
