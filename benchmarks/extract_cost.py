"""What notebook 03's feature extraction should cost, and what it costs: one backbone's forward
pass against one training step of the same network (CPU seconds an image, one thread), the
forward of each kind of backbone the task extracts (cat1, cat4's, random4's, wide1, direct) as
extraction computes it, on the task's own images, the forward cost of a task's extraction at
those rates (each checkpoint at its kind's), and a real extraction of one task of a finished run
into a fresh cache (wall time, the process's CPU time, the forwards' share of it); and each
operator's share of a forward (torch's profiler).

A forward here is extraction's (kit.features): batch norm folded into the convolutions,
channels-last, each batch of 256 cut into blocks of images (kit.numerics.blocked.images), one
intra-op thread. The kinds' rates differ (wide1 is twice as wide: about four times the
multiply-adds), so a task's expected cost is summed checkpoint by checkpoint, not one network's
rate times the checkpoints.

    .venv/bin/python benchmarks/extract_cost.py outputs/cpu --task shape

The extraction is notebook 03's own call (kit.experiments.timecat.measure.task_features) over
every replicate's checkpoints, after a first call has rendered the task's images (as notebook
03's first pass does). CPU seconds are the process's (every thread) and, for the forwards, the
summed thread time inside each backbone's forward: the rest is reading batches, writing the
entries, hashing and copying. With other jobs on the machine, wall time stretches while CPU
seconds change less; the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from kit import features, models
from kit.data import pipeline
from kit.data.prefetch import normalise
from kit.experiments import notebooks  # noqa: F401  (registers notebook 03's parameters)
from kit.experiments.timecat import measure, planning
from kit.numerics import blocked
from kit.numerics.threads import one_thread
from kit.params import params
from kit.train import backbones


def process_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def extraction_forward(checkpoint: Path) -> models.KitResNet:
    """The backbone of `checkpoint` as a CPU extraction runs it: batch norm folded, channels
    last (kit.features._place)."""
    model = models.fold_batch_norms(backbones.load_backbone(checkpoint))
    return model.to(memory_format=torch.channels_last)


def forward_rate(model: models.KitResNet, batches: list[torch.Tensor], repeats: int = 3) -> float:
    """CPU seconds an image of extraction's forward of `model` over `batches` (blocks of
    images, kit.numerics.blocked.images), one thread, the best of `repeats` passes."""
    best = float("inf")
    with one_thread(), torch.no_grad():
        blocked.images(model.features, batches[0])
        for _ in range(repeats):
            start = time.thread_time()
            for images in batches:
                blocked.images(model.features, images)
            best = min(best, time.thread_time() - start)
    return best / sum(len(images) for images in batches)


def task_images(loaded: Any, task: Any, count: int = 512) -> list[torch.Tensor]:
    """The first `count` images of the task's probe training pool, standardised and
    channels-last as extraction reads them, in batches of 256."""
    task_data, num_classes = loaded.task_data(task)
    train, _ = pipeline.probe_datasets(task_data, num_classes)
    found = []
    for images, _ in DataLoader(train, batch_size=256):
        found.append(normalise(images, torch.channels_last))
        if sum(len(b) for b in found) >= count:
            break
    return found


def forward_and_step(
    checkpoint: Path, batches: list[torch.Tensor], batch: int
) -> tuple[float, float]:
    """CPU seconds an image of extraction's forward pass (`forward_rate`) and of a training step
    (`batch` images, cross-entropy, AdamW; the network as trained: batch norm unfolded), one
    thread, channels last."""
    forward = forward_rate(extraction_forward(checkpoint), batches)
    model = backbones.load_backbone(checkpoint).to(memory_format=torch.channels_last)
    images = batches[0]
    model.train()
    optimizer = torch.optim.AdamW(model.parameters())
    x = images[:batch]
    y = torch.randint(0, 10, (batch,))
    with one_thread():
        for step in range(23):
            if step == 3:
                start = time.thread_time()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        trained = (time.thread_time() - start) / (20 * batch)
    return forward, trained


def operator_shares(checkpoint: Path, images: torch.Tensor) -> dict[str, float]:
    """Each operator's share of extraction's forward pass's CPU time (torch's profiler, batch
    256, one thread), largest first."""
    from torch.profiler import ProfilerActivity, profile

    model = extraction_forward(checkpoint)
    with one_thread(), torch.no_grad():
        blocked.images(model.features, images)
        with profile(activities=[ProfilerActivity.CPU]) as found:
            for _ in range(4):
                blocked.images(model.features, images)
    times = {e.key: e.self_cpu_time_total for e in found.key_averages()}
    total = sum(times.values())
    return {k: v / total for k, v in sorted(times.items(), key=lambda kv: -kv[1])}


def kind_rates(
    probed: list[planning.Representation], batches: list[torch.Tensor]
) -> tuple[dict[Path, str], dict[str, float]]:
    """Each checkpoint's kind (the variant of the first representation holding it) and each
    kind's forward rate (`forward_rate` of its first checkpoint)."""
    kind_of: dict[Path, str] = {}
    for rep in probed:
        for checkpoint in rep.checkpoints:
            kind_of.setdefault(checkpoint, rep.variant)
    first = {kind: c for c, kind in reversed(list(kind_of.items()))}
    rates = {kind: forward_rate(extraction_forward(c), batches) for kind, c in first.items()}
    return kind_of, rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", type=Path, help="a finished cpu run's folder")
    parser.add_argument("--task", default="shape")
    args = parser.parse_args()
    loaded, _ = params.load("03_time_concat", "cpu", output_dir=str(args.output_dir))
    assert loaded.train is not None
    reps = planning.plan(loaded).representations
    task = next(t for t in loaded.tasks if t.name == args.task)
    trained = next(r for r in reps if r.iterations_per_model and r.n == 1)
    in_forwards = [0.0]
    lock = threading.Lock()
    real = models.KitResNet.features

    def timed(model: models.KitResNet, x: torch.Tensor) -> torch.Tensor:
        start = time.thread_time()
        out = real(model, x)
        with lock:
            in_forwards[0] += time.thread_time() - start
        return out

    with tempfile.TemporaryDirectory(dir=args.output_dir.resolve()) as scratch:
        cache = Path(scratch).relative_to(args.output_dir.resolve())
        fresh = loaded.model_copy(update={"feature_cache": str(cache)})
        measure.task_features(task, reps[:1], fresh)  # renders the task's images, as a first pass
        shutil.rmtree(scratch)
        batches = task_images(loaded, task)
        forward, step = forward_and_step(trained.checkpoints[0], batches, loaded.train.batch_size)
        print(
            f"one thread: extraction's forward of {trained.variant} {1e3 * forward:.3f} ms of "
            f"CPU an image, a training step {1e3 * step:.3f} ms (forward / step "
            f"{forward / step:.2f})"
        )
        shares = operator_shares(trained.checkpoints[0], batches[0])
        print(
            "a forward's CPU by operator: "
            + ", ".join(f"{name} {share:.0%}" for name, share in list(shares.items())[:5])
        )
        probed = [rep for rep in reps if rep.task in (None, task.name)]
        kind_of, rates = kind_rates(probed, batches)
        print(
            "extraction's forward by kind of backbone, ms of CPU an image: "
            + ", ".join(f"{kind} {1e3 * rate:.3f}" for kind, rate in rates.items())
        )
        features._LAST_PASS.clear()
        models.KitResNet.features = timed  # type: ignore[method-assign]
        wall, cpu = time.perf_counter(), process_cpu()
        found = measure.task_features(task, reps, fresh)
        wall, cpu = time.perf_counter() - wall, process_cpu() - cpu
        models.KitResNet.features = real  # type: ignore[method-assign]
    checkpoints = len(kind_of)
    rows = len(found.train[0].labels) + found.eval_rows
    expected = rows * sum(rates[kind] for kind in kind_of.values())
    print(
        f"task {task.name}: {checkpoints} checkpoints x {rows} rows; at their kinds' rates "
        f"{expected:.1f} s of CPU ({expected / 2:.1f} s on 2 cores)"
    )
    print(
        f"extracted in {wall:.1f} s: {cpu:.1f} s of the process's CPU, {in_forwards[0]:.1f} s of "
        f"it in forwards ({in_forwards[0] / expected:.2f} times their kinds' rates; "
        f"{1e3 * in_forwards[0] / (checkpoints * rows):.3f} ms a forward on average), "
        f"{cpu - in_forwards[0]:.1f} s elsewhere; load average {os.getloadavg()[0]:.1f}, "
        f"{os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
