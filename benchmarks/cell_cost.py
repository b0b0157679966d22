"""What one cell of notebook 04's sweep costs after training: extracting its features and
fitting its probes, with a profile of the probes.

    .venv/bin/python benchmarks/cell_cost.py OUTPUT_DIR [--profile sweep] [--world 0]
        [--budget 240] [--top 15]

The cell is the profile's (world seed, budget) cell, as `kit run 04` builds it, with its runs in
OUTPUT_DIR (those missing are trained first, untimed; the cell of notebook 03's own world and
budget reads notebook 03's runs in OUTPUT_DIR/time_concat). Its features are extracted into a
fresh cache folder (timed: every checkpoint of the cell, the untrained networks included, which
the sweep extracts once per world), then every probe of the cell is fitted from that cache
(timed, and profiled with cProfile: the functions with the most time of their own). Prints the
load average before and after, since the cores are shared.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import time

from kit.core import params as kit_params
from kit.experiments.timecat import measure, planning, sweep, sweep_settings


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
        "--probes-only", action="store_true", help="keep the cache of an earlier call"
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
    settings = cell.settings.model_copy(update={"feature_cache": "bench-cell-features"})
    cache = planning.features_dir(settings)
    if not args.probes_only:
        shutil.rmtree(cache, ignore_errors=True)
    representations = planning.plan(settings).representations
    probes = sum(rep.task in (None, t.name) for t in settings.tasks for rep in representations)
    print(
        f"cell world {cell.world_seed}, budget {cell.budget}: {len(representations)} "
        f"representations x {len(settings.tasks)} tasks = {probes} {settings.probe_kind} probes; "
        f"{load()}"
    )
    start = time.perf_counter()
    for task in settings.tasks:
        measure.task_features(task, representations, settings)
    extraction = time.perf_counter() - start
    print(
        f"extraction ({'cache kept' if args.probes_only else 'fresh cache, every checkpoint'}): "
        f"{extraction:.1f} s; {load()}"
    )
    timed = {}
    for name, workers, diagnose in (
        ("as notebook 03: one probe at a time, with the diagnostics", 1, True),
        (f"as the sweep: {settings.side_by_side} at a time, no diagnostics", None, False),
    ):
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        chosen = settings if workers is None else settings.model_copy(update={"side_by_side": 1})
        measured = measure.probe_all(representations, chosen, diagnose=diagnose)
        profiler.disable()
        seconds = time.perf_counter() - start
        timed[name] = measured.results
        print(
            f"\nprobes {name}: {seconds:.1f} s, {seconds / probes:.2f} s a probe; extraction + "
            f"probes {extraction + seconds:.1f} s a cell; {load()}"
        )
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
    first, second = timed.values()
    print(f"identical probe results: {first.equals(second)}")


if __name__ == "__main__":
    main()
