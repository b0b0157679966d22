"""What one cell of notebook 04's sweep costs after training: extracting its features and
fitting its probes, with a profile of the probes.

    .venv/bin/python benchmarks/cell_cost.py OUTPUT_DIR [--profile sweep] [--world 0]
        [--budget 240] [--top 12] [--probes-only]

The cell is the profile's (world seed, budget) cell, as `kit run 04` builds it, with its runs in
OUTPUT_DIR (those missing are trained first, untimed; the cell of notebook 03's own world and
budget reads notebook 03's runs in OUTPUT_DIR/time_concat). Its features are extracted into a
fresh cache folder twice (timed: every checkpoint of the cell, the untrained networks included,
which the sweep extracts once per world and image pool), one backbone at a time on the process's
intra-op threads, then `side_by_side` at a time on one thread each; then every probe of the cell
is fitted from the second cache twice (timed, and profiled with cProfile: the functions with the
most time of their own; the side-by-side pass shows the main thread only), one at a time with the
label-free diagnostics as notebook 03 fits them, and `side_by_side` at a time without, as the
sweep does. Prints whether both passes' results are identical, and the load average after each
step, since the cores may be shared.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import time

from kit.experiments.timecat import measure, planning, sweep, sweep_settings
from kit.params import params as kit_params
from kit.readout.numbers import counted


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", help="the output folder holding (or to hold) the runs")
    parser.add_argument("--profile", default="sweep")
    parser.add_argument("--world", type=int, default=0)
    parser.add_argument("--budget", type=int, default=240)
    parser.add_argument("--top", type=int, default=12, help="profile rows printed")
    parser.add_argument(
        "--probes-only", action="store_true", help="keep the caches of an earlier call"
    )
    args = parser.parse_args()
    params, _ = kit_params.load(
        "04_when_concat_helps", args.profile, output_dir=str(args.output_dir)
    )
    assert isinstance(params, sweep_settings.SweepSettings)
    found = [
        c
        for c in sweep_settings.cells(params)
        if (c.world_seed, c.budget) == (args.world, args.budget)
    ]
    if not found:
        raise SystemExit(
            f"profile {args.profile} has no cell world {args.world}, budget {args.budget}"
        )
    cell = found[0]
    skipped, trained = sweep.train_all(params, [cell])
    print(f"runs: {skipped} finished before, {trained} trained now (untimed)")
    representations = planning.plan(cell.settings).representations
    tasks = cell.settings.tasks
    probes = sum(rep.task in (None, t.name) for t in tasks for rep in representations)
    print(
        f"cell world {cell.world_seed}, budget {cell.budget}: {len(representations)} "
        f"representations x {len(tasks)} tasks = {probes} {cell.settings.probe_kind} probes; "
        f"{load()}"
    )
    wide = cell.settings.side_by_side
    extraction, results = {}, []
    for side in dict.fromkeys((1, wide)):
        settings = cell.settings.model_copy(
            update={"side_by_side": side, "feature_cache": f"bench-cell-features-{side}"}
        )
        if not args.probes_only:
            shutil.rmtree(planning.features_dir(settings), ignore_errors=True)
        start = time.perf_counter()
        for task in tasks:
            measure.task_features(task, representations, settings)
        extraction[side] = time.perf_counter() - start
        print(
            f"extraction ({'cache kept' if args.probes_only else 'fresh cache'}), "
            f"{counted(side, 'backbone')} at a time: {extraction[side]:.1f} s; {load()}"
        )
    for workers, diagnose, name in (
        (1, True, "one probe at a time, with the diagnostics (as notebook 03)"),
        (wide, False, f"{wide} at a time, no diagnostics (as the sweep)"),
    ):
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()  # both read the last extraction's features
        measured = measure.probe_all(
            representations, settings.model_copy(update={"side_by_side": workers}), diagnose
        )
        profiler.disable()
        probing = time.perf_counter() - start
        results.append(measured.results)
        print(
            f"\nprobes, {name}: {probing:.1f} s, {probing / probes:.2f} s a probe; extraction "
            f"({workers} at a time) + probes {extraction[workers] + probing:.1f} s a cell; "
            f"{load()}"
        )
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
    print(f"identical probe results: {results[0].equals(results[1])}")


if __name__ == "__main__":
    main()
