"""Could each L-BFGS probe's weight-decay path stop once its held-out choice is settled? Refits
every probe of a finished notebook 03 run from its feature cache along the path the probe fits
(strongest decay first, each weaker one from the previous fit), and prints where the held-out
rule's choice lies on the path, the share of the path's CPU time each decay takes, the share
spent after the choice (what a stop that knew the choice could save at most) and what a stop at
the first fall of the held-out top-1 would save and how many choices it would change.

    .venv/bin/python benchmarks/probe_path.py outputs/cpu
    .venv/bin/python benchmarks/probe_path.py outputs/cpu --replicates 0 1 --json paths.json
    .venv/bin/python benchmarks/probe_path.py outputs/cpu --replicates 0 1 --tolerance 1e-6 \
        --against paths.json

`--tolerance` fits at another L-BFGS tolerance on the change of objective than the profile's,
and `--against` compares the paths with those of an earlier `--json` (the profile's tolerance):
the CPU of the probes both hold, how many held-out choices differ and the largest move of a
chosen head's evaluation top-1.

Times are the fitting thread's CPU seconds (time.thread_time), one fit at a time on one thread,
so that other jobs on the machine change them less than wall time; the load average is printed.
A fit's choice under the held-out rule is kit.probes.selection's: the highest held-out top-1,
ties to the weakest decay (the first row of the probe's table, in the profile's order).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from kit.experiments import notebooks  # noqa: F401  (registers notebook 03's parameters)
from kit.experiments.timecat import measure, planning
from kit.numerics.threads import one_thread
from kit.params import params
from kit.probes import lbfgs


def paths(
    output_dir: Path, replicates: list[int] | None, tolerance: float | None = None
) -> list[dict]:
    """Each probe's path: per decay, strongest first, its iterations, CPU seconds and top-1s
    (at the profile's L-BFGS tolerance, or at `tolerance`)."""
    loaded, _ = params.load("03_time_concat", "cpu", output_dir=str(output_dir))
    settings = measure.probe_settings(loaded)
    if tolerance is not None:
        settings = settings.model_copy(update={"tolerance_change": tolerance})
    plan = planning.plan(loaded)
    reps = [r for r in plan.representations if replicates is None or r.replicate in replicates]
    found = []
    for task in loaded.tasks:
        cached = measure.task_features(task, reps, loaded)
        for rep, (train, evaluation, extra) in zip(cached.probed, cached.splits(), strict=True):
            rows = lbfgs.convex_fit(
                train,
                evaluation,
                cached.num_classes,
                settings.heldout_fraction,
                settings.seed,
                torch.device("cpu"),
                extra,
            )
            head = lbfgs.zero_head(train.features.shape[1], cached.num_classes)
            path = []
            with one_thread():
                for decay in sorted(settings.weight_decays, reverse=True):
                    start = time.thread_time()
                    fit = rows.fit(head, decay, settings.max_iter, settings.tolerance_change)
                    path.append(
                        {
                            "decay": decay,
                            "cpu_s": time.thread_time() - start,
                            "iterations": fit["iterations"],
                            "heldout_top1": fit["heldout_top1"],
                            "eval_top1": fit["eval_top1"],
                        }
                    )
            found.append(
                {"task": task.name, "variant": rep.variant, "replicate": rep.replicate}
                | {"path": path, "order": list(settings.weight_decays)}
            )
    return found


def choice(probe: dict) -> dict:
    """The held-out rule's step of a probe's path: the highest held-out top-1, ties to the
    first decay in the profile's order."""
    table_order = sorted(probe["path"], key=lambda step: probe["order"].index(step["decay"]))
    return max(table_order, key=lambda step: step["heldout_top1"])


def compared(found: list[dict], earlier: list[dict]) -> list[str]:
    """`found`'s paths against `earlier`'s of the same probes (task, variant, replicate): CPU,
    held-out choices that differ and the largest move of a chosen head's evaluation top-1."""
    key = lambda probe: (probe["task"], probe["variant"], probe["replicate"])  # noqa: E731
    before = {key(probe): probe for probe in earlier}
    both = [(probe, before[key(probe)]) for probe in found if key(probe) in before]
    cpu = [sum(step["cpu_s"] for step in p["path"]) for pair in both for p in pair]
    steps = [sum(step["iterations"] for step in p["path"]) for pair in both for p in pair]
    differ = sum(choice(new)["decay"] != choice(old)["decay"] for new, old in both)
    moved = max(
        (abs(choice(new)["eval_top1"] - choice(old)["eval_top1"]) for new, old in both),
        default=0.0,
    )
    return [
        f"against the earlier paths ({len(both)} probes in both): "
        f"{sum(cpu[::2]) / sum(cpu[1::2]):.2f} times their CPU and "
        f"{sum(steps[::2]) / sum(steps[1::2]):.2f} times their iterations, {differ} of "
        f"{len(both)} held-out choices differ, a chosen head's evaluation top-1 moves by at most "
        f"{100 * moved:.2f} points"
    ]


def summary(found: list[dict]) -> list[str]:
    """Where the held-out choices lie and what stopping the path early would save or change."""
    total = sum(step["cpu_s"] for probe in found for step in probe["path"])
    by_decay: dict[float, float] = {}
    after_choice = first_fall_saved = 0.0
    changed = at_weakest = 0
    for probe in found:
        path = probe["path"]
        chosen = choice(probe)
        at_weakest += chosen["decay"] == min(probe["order"])
        index = path.index(chosen)
        after_choice += sum(step["cpu_s"] for step in path[index + 1 :])
        for step in path:
            by_decay[step["decay"]] = by_decay.get(step["decay"], 0.0) + step["cpu_s"]
        stop = next(
            (
                i
                for i in range(1, len(path))
                if path[i]["heldout_top1"] < path[i - 1]["heldout_top1"]
            ),
            len(path),
        )
        kept = path[:stop]
        first_fall_saved += sum(step["cpu_s"] for step in path[stop:])
        kept_order = sorted(kept, key=lambda step: probe["order"].index(step["decay"]))
        changed += max(kept_order, key=lambda step: step["heldout_top1"]) is not chosen
    probes = len(found)
    return [
        f"{probes} probes, {total:.1f} s of CPU on their paths",
        "share of the CPU by weight decay (strongest first): "
        + ", ".join(f"{d:g} {s / total:.0%}" for d, s in sorted(by_decay.items(), reverse=True)),
        f"held-out choice at the weakest decay (the path's last, costliest fit): {at_weakest} of "
        f"{probes}",
        f"CPU after each probe's held-out choice (the most a stop that knew it could save): "
        f"{after_choice / total:.0%}",
        f"stopping at the first fall of the held-out top-1: saves {first_fall_saved / total:.0%} "
        f"of the CPU and changes {changed} of {probes} choices",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", type=Path, help="a finished cpu run's folder")
    parser.add_argument("--replicates", type=int, nargs="+", help="default: every replicate")
    parser.add_argument("--json", type=Path, help="write every probe's path here")
    parser.add_argument("--tolerance", type=float, help="default: the profile's")
    parser.add_argument("--against", type=Path, help="an earlier --json's paths to compare")
    args = parser.parse_args()
    found = paths(args.output_dir, args.replicates, args.tolerance)
    print(f"load average {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores")
    print("\n".join(summary(found)))
    if args.against:
        print("\n".join(compared(found, json.loads(args.against.read_text()))))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
