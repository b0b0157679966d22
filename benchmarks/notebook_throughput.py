"""Images/s of notebook 03's training, end to end, against the trainer's own step rate.

The notebook's figure is every image its runs train on divided by the wall-clock time of
`planning.launch` (workers starting, synthetic images rendered, evaluation, checkpoints: all of
it), for the time-concat runs of every replicate of a profile (default cpu: cat1, cat2, cat4 on
the synthetic world, 21 runs; `--replicates 1` for the first replicate's only). As in the
notebook, the worker processes are warmed (kit.launch.warm) before this process imports torch, so
their
imports overlap it; `--cold` starts them when training starts instead. The trainer's figure is its
step alone on one fixed batch of the same net,
in as many processes as the launcher has workers, each pinned to its worker's cores and threads
and all stepping at the same time: what the workers would reach if they did nothing but step
(also printed: one such process alone, times the workers, which ignores that they share the
machine's memory bandwidth). A ratio of at least 0.8 means the launch costs little beyond
the steps.

    .venv/bin/python benchmarks/notebook_throughput.py              # cpu profile, 2 workers
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time

from kit.launch import local as launch
from kit.params import params
from kit.readout.numbers import counted
from kit.runtime import distributed
from kit.train.settings import TrainSettings


def step_rate(config: TrainSettings, threads: int, steps: int = 20, repeats: int = 5) -> float:
    """The trainer's img/s on one device-resident batch, with `threads` torch threads."""
    import torch

    from kit.train.step import Replica

    torch.set_num_threads(threads)
    trainer = Replica(settings=config, process=distributed.start_process(config.device))
    size = config.data.image_size
    pixels = torch.randint(0, 256, (config.batch_size, 3, size, size), dtype=torch.uint8)
    ((images, labels),) = trainer.on_device(
        [(pixels, torch.randint(0, config.num_classes, (config.batch_size,)))]
    )
    rates = []
    for repeat in range(repeats + 1):  # the first is warm-up
        start = time.perf_counter()
        for _ in range(steps):
            trainer.step(images, labels)
        trainer.take_window(steps)
        if repeat:
            rates.append(steps * config.batch_size / (time.perf_counter() - start))
    return statistics.median(rates)


def pinned_step_rate(
    config: TrainSettings,
    slot: launch.Slot,
    start: multiprocessing.Event,
    rates: multiprocessing.Queue,
) -> None:
    os.sched_setaffinity(0, slot.cpus)
    start.wait()
    rates.put(step_rate(config, slot.threads))


def concurrent_step_rate(config: TrainSettings, slots: list[launch.Slot]) -> float:
    """The sum of the step rates of one process per slot, all stepping at once."""
    context = multiprocessing.get_context("spawn")
    start, rates = context.Event(), context.Queue()
    processes = [
        context.Process(target=pinned_step_rate, args=(config, slot, start, rates))
        for slot in slots
    ]
    for process in processes:
        process.start()
    start.set()
    total = sum(rates.get() for _ in processes)
    for process in processes:
        process.join()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--replicates", type=int, help="the first N replicates (default: all)")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="no warm workers: each imports torch once training has started",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        profile, _ = params.load("03_time_concat", args.profile, output_dir=folder)
        if not args.cold:  # as notebook 03 does, before importing torch
            launch.warm(profile.launch, profile.device)
        from kit.experiments.timecat import planning

        concat = {v.name for v in profile.variants if v.kind == "time-concat"}
        replicates = range(args.replicates or profile.replicates)
        trainings = [
            t
            for t in planning.plan(profile).trainings  # folders rep<r>/<variant>/seed<s>
            if t.output_dir.split("/")[-3:-1]
            in [[f"rep{r}", name] for r in replicates for name in concat]
        ]
        images = sum(t.iterations * t.batch_size for t in trainings)
        start = time.perf_counter()
        planning.launch(trainings, profile)
        notebook = images / (time.perf_counter() - start)
    workers = launch.slots(profile.launch)
    stepping = concurrent_step_rate(trainings[0], workers)
    alone = step_rate(trainings[0], workers[0].threads) * len(workers)
    print(
        f"profile {args.profile}: {len(trainings)} runs, {images} images, {len(workers)} "
        f"workers x {counted(workers[0].threads, 'thread')}"
    )
    print(f"notebook training, end to end:          {notebook:8.1f} img/s")
    print(f"trainer step, all workers at once:      {stepping:8.1f} img/s")
    print(f"trainer step, one worker alone x {len(workers)}:    {alone:8.1f} img/s")
    print(f"ratio notebook/trainer (workers at once): {notebook / stepping:.3f}")
    print(f"ratio notebook/trainer (one alone x {len(workers)}):  {notebook / alone:.3f}")


if __name__ == "__main__":
    main()
