"""What numerics 3's extraction arithmetic buys in extraction's own order: the forwards of one
replicate's backbones of a finished notebook 03 run (every kind: cat1, cat4's, random4's, wide1,
direct), each batch of the task's images through every backbone in turn as kit.features runs
them, under the earlier arithmetic (batch norm unfolded, blocks of 112 images) and numerics 3's
(folded) in blocks of 32, 64 and 112 images, and unfolded in blocks of 32, in alternation; one
thread, CPU seconds, the best of `--repeats` passes.

    .venv/bin/python benchmarks/extract_arithmetic.py outputs/cpu
    .venv/bin/python benchmarks/extract_arithmetic.py outputs/cpu --task texture --repeats 4

benchmarks/extract_blocks.py times one network over random images; here every backbone of a
replicate runs on each batch, as in a notebook's extraction, whose cost the wide backbone
dominates (about four times a narrow one's multiply-adds). CPU time is the thread's
(time.thread_time), which other jobs on the machine stretch less than wall time; the load average
is printed. The blocks' size changes no feature (each image's result is its own); folding does.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

import torch
from extract_cost import task_images

from kit import models
from kit.experiments import notebooks  # noqa: F401  (registers notebook 03's parameters)
from kit.experiments.timecat import planning
from kit.numerics import blocked
from kit.numerics.threads import one_thread
from kit.params import params
from kit.train import backbones

#: (batch norm folded, images a block of 24 px) of each arithmetic compared; numerics 3's
#: features are the folded ones, the same bits in blocks of any of these sizes
ARITHMETIC = {
    "unfolded, blocks of 112 (numerics 2)": (False, 112),
    "folded, blocks of 32": (True, 32),
    "folded, blocks of 112": (True, 112),
    "folded, blocks of 64": (True, 64),
    "unfolded, blocks of 32": (False, 32),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", type=Path, help="a finished cpu run's folder")
    parser.add_argument("--task", default="shape")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded, _ = params.load("03_time_concat", "cpu", output_dir=str(args.output_dir))
    task = next(t for t in loaded.tasks if t.name == args.task)
    reps = planning.plan(loaded).representations
    probed = [r for r in reps if r.replicate == 0 and r.task in (None, task.name)]
    kinds = {c: rep.variant for rep in probed for c in rep.checkpoints}
    plain = {c: backbones.load_backbone(c).to(memory_format=torch.channels_last) for c in kinds}
    folded = {
        c: models.fold_batch_norms(copy.deepcopy(m)).to(memory_format=torch.channels_last)
        for c, m in plain.items()
    }
    batches = task_images(loaded, task)
    pixels = batches[0].shape[-1] * batches[0].shape[-2]
    best = dict.fromkeys(ARITHMETIC, float("inf"))
    by_kind: dict[str, dict[str, float]] = {name: {} for name in ARITHMETIC}
    with one_thread(), torch.no_grad():
        for _ in range(args.repeats):
            for name, (fold, images) in ARITHMETIC.items():  # alternated: a drift hits each
                blocked.BLOCK_PIXELS = images * pixels
                spent: dict[str, float] = {}
                for batch in batches:
                    for checkpoint, kind in kinds.items():
                        network = (folded if fold else plain)[checkpoint]
                        start = time.thread_time()
                        blocked.images(network.features, batch)
                        spent[kind] = spent.get(kind, 0.0) + time.thread_time() - start
                best[name] = min(best[name], sum(spent.values()))
                for kind, seconds in spent.items():
                    by_kind[name][kind] = min(by_kind[name].get(kind, float("inf")), seconds)
    forwards = len(kinds) * sum(len(batch) for batch in batches)
    count = {kind: list(kinds.values()).count(kind) for kind in set(kinds.values())}
    first = next(iter(ARITHMETIC))
    print(
        f"{len(kinds)} backbones of replicate 0 on {forwards // len(kinds)} images of {task.name}, "
        f"one thread, best of {args.repeats}; load average {os.getloadavg()[0]:.1f}, "
        f"{os.cpu_count()} cores"
    )
    for name in ARITHMETIC:
        per_kind = ", ".join(
            f"{kind} {1e3 * seconds / (count[kind] * forwards / len(kinds)):.3f}"
            for kind, seconds in sorted(by_kind[name].items())
        )
        print(
            f"  {name}: {1e3 * best[name] / forwards:.3f} ms a forward, "
            f"{best[name] / best[first]:.2f} x; by kind, ms an image: {per_kind}"
        )


if __name__ == "__main__":
    main()
