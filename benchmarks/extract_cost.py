"""What notebook 03's feature extraction should cost, and what it costs: one backbone's forward
pass against one training step of the same network (CPU seconds an image, one thread), the
forward cost of a task's extraction at that rate, and a real extraction of one task of a finished
run into a fresh cache (wall time, the process's CPU time, the forwards' share of it); and each
operator's share of a forward (torch's profiler).

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

import torch

from kit import features, models
from kit.experiments import notebooks  # noqa: F401  (registers notebook 03's parameters)
from kit.experiments.timecat import measure, planning
from kit.numerics.threads import one_thread
from kit.params import params
from kit.train import backbones


def process_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def forward_and_step(checkpoint: Path, image_size: int, batch: int) -> tuple[float, float]:
    """CPU seconds an image of a forward pass (batch 256, no gradient) and of a training step
    (`batch` images, cross-entropy, AdamW), one thread, channels last."""
    model = backbones.load_backbone(checkpoint).to(memory_format=torch.channels_last)
    images = torch.randn(256, 3, image_size, image_size).contiguous(
        memory_format=torch.channels_last
    )
    with one_thread(), torch.no_grad():
        model.features(images)
        start = time.thread_time()
        for _ in range(8):
            model.features(images)
        forward = (time.thread_time() - start) / (8 * 256)
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


def operator_shares(checkpoint: Path, image_size: int) -> dict[str, float]:
    """Each operator's share of a forward pass's CPU time (torch's profiler, batch 256, one
    thread), largest first."""
    from torch.profiler import ProfilerActivity, profile

    model = backbones.load_backbone(checkpoint).to(memory_format=torch.channels_last)
    images = torch.randn(256, 3, image_size, image_size).contiguous(
        memory_format=torch.channels_last
    )
    with one_thread(), torch.no_grad():
        model.features(images)
        with profile(activities=[ProfilerActivity.CPU]) as found:
            for _ in range(4):
                model.features(images)
    times = {e.key: e.self_cpu_time_total for e in found.key_averages()}
    total = sum(times.values())
    return {k: v / total for k, v in sorted(times.items(), key=lambda kv: -kv[1])}


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
    forward, step = forward_and_step(
        trained.checkpoints[0], loaded.train.data.image_size, loaded.train.batch_size
    )
    print(
        f"one thread: a forward {1e3 * forward:.3f} ms of CPU an image, a training step "
        f"{1e3 * step:.3f} ms (forward / step {forward / step:.2f})"
    )
    shares = operator_shares(trained.checkpoints[0], loaded.train.data.image_size)
    print(
        "a forward's CPU by operator: "
        + ", ".join(f"{name} {share:.0%}" for name, share in list(shares.items())[:5])
    )
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
        features._LAST_PASS.clear()
        models.KitResNet.features = timed  # type: ignore[method-assign]
        wall, cpu = time.perf_counter(), process_cpu()
        found = measure.task_features(task, reps, fresh)
        wall, cpu = time.perf_counter() - wall, process_cpu() - cpu
        models.KitResNet.features = real  # type: ignore[method-assign]
    checkpoints = len({c for rep in found.probed for c in rep.checkpoints})
    rows = len(found.train[0].labels) + found.eval_rows
    expected = checkpoints * rows * forward
    print(
        f"task {task.name}: {checkpoints} checkpoints x {rows} rows; at the forward's rate "
        f"{expected:.1f} s of CPU ({expected / 2:.1f} s on 2 cores)"
    )
    print(
        f"extracted in {wall:.1f} s: {cpu:.1f} s of the process's CPU, {in_forwards[0]:.1f} s of "
        f"it in forwards ({1e3 * in_forwards[0] / (checkpoints * rows):.3f} ms a forward), "
        f"{cpu - in_forwards[0]:.1f} s elsewhere; load average {os.getloadavg()[0]:.1f}, "
        f"{os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
