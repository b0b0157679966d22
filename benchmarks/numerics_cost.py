"""What the reproducible CPU numerics cost against the fast mode, per process and per thread count.

Each figure comes from a fresh process (the numerics are fixed when torch loads) given a number of
threads (`torch.set_num_threads`; "every core" leaves torch's default, one a core): training
steps of the cpu profile's network (resnet10 at width 0.25, 24 px, batch 32, SGD) in images per
second, one float64 L-BFGS probe fit above kit.probes.lbfgs.ONE_THREAD_ELEMENTS (40,000 rows x
512 features, 10 classes) and one fast probe fit (20,000 rows x 1,024 features, 100 classes, two
epochs, batches of 1,024) in seconds, under
- `reproducible`: the default (kit.numerics.numerics): one intra-op thread a computation, the
  probes' large products cut into blocks over the process's threads (kit.numerics.blocked);
- `fast`: this CPU's best paths on the process's threads;
- `portable`: the stricter alternative the kit does not use (no oneDNN, ATen's portable kernels,
  MKL COMPATIBLE, one thread), for docs/decisions.md.
Run it on idle cores; it prints one line per configuration with the load average, and writes
them to docs/data/numerics_cost.json (docs/reproducibility.md quotes it through
`python -m kit figures`).

    .venv/bin/python benchmarks/numerics_cost.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kit.cli import benchmark_figures
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu, numerics
from kit.readout.numbers import counted

WORK = """
import json, os, time
import kit, torch
from kit import models
from kit.numerics.threads import numerics_threads
from kit.probes import fast, lbfgs
from kit.probes.rows import Split
from kit.probes.settings import FastProbeSettings, LbfgsProbeSettings
if os.environ.get("PORTABLE"):
    torch.backends.mkldnn.enabled = False
if os.environ.get("THREADS"):
    torch.set_num_threads(int(os.environ["THREADS"]))
torch.manual_seed(0)
model = models.build("resnet10", 10, width=0.25, image_size=24)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
x, y = torch.randn(32, 3, 24, 24), torch.randint(0, 10, (32,))

def steps(n):
    for _ in range(n):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

with numerics_threads():  # as the trainer runs its steps
    steps(5)
    start = time.perf_counter()
    steps(40)
    rate = 40 * 32 / (time.perf_counter() - start)

def planted(rows, dim, classes, seed):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(rows, dim, generator=generator)
    teacher = torch.randn(dim, classes, generator=generator)
    labels = (features @ teacher).argmax(1)
    cut = rows * 4 // 5
    return Split(features[:cut], labels[:cut], "t"), Split(features[cut:], labels[cut:], "e")

tiny = planted(500, 16, 10, 2)  # a first fit of each probe, untimed: imports and first calls
lbfgs.lbfgs_probe(*tiny, 10, LbfgsProbeSettings(weight_decays=[1e-2]))
fast.fast_probe(*tiny, 10, FastProbeSettings(epochs=1), progress=False)
train, evaluation = planted(50_000, 512, 10, 0)
start = time.perf_counter()
lbfgs.lbfgs_probe(train, evaluation, 10, LbfgsProbeSettings(weight_decays=[1e-2]))
probe_s = time.perf_counter() - start
train, evaluation = planted(25_000, 1024, 100, 1)
settings = FastProbeSettings(lrs=[0.1], weight_decays=[1e-3], epochs=2, batch_size=1024)
start = time.perf_counter()
fast.fast_probe(train, evaluation, 100, settings, progress=False)
fast_s = time.perf_counter() - start
print(json.dumps({"img_s": rate, "probe_s": probe_s, "fast_s": fast_s,
                  "threads": torch.get_num_threads()}))
"""

CONFIGS = (
    ("reproducible", {}),
    ("reproducible, 1 thread", {"THREADS": "1"}),
    ("fast", {numerics.SWITCH: "fast"}),
    ("fast, 1 thread", {numerics.SWITCH: "fast", "THREADS": "1"}),
    (
        "portable (not used)",
        {
            numerics.SWITCH: "fast",
            "THREADS": "1",
            "PORTABLE": "1",
            "ATEN_CPU_CAPABILITY": "default",
            "MKL_CBWR": "COMPATIBLE",
        },
    ),
)


def measure(env: dict[str, str]) -> dict[str, float]:
    clean = numerics.without_variables()
    done = subprocess.run(
        [sys.executable, "-c", WORK],
        env=clean | {"PYTHONPATH": str(REPO_ROOT)} | env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    print(f"{cpu.cpu_model()} ({cpu.best_isa()}), {len(os.sched_getaffinity(0))} cores")
    base = None
    rows = []
    for name, env in CONFIGS:
        found = measure(env)
        load = os.getloadavg()[0]
        rows.append({"name": name} | found | {"load": load})
        base = base or found
        print(
            f"{name:<24} {counted(found['threads'], 'thread'):<9}  "
            f"training {found['img_s']:6.0f} img/s "
            f"({found['img_s'] / base['img_s']:.2f}x)  L-BFGS probe {found['probe_s']:5.1f} s "
            f"({found['probe_s'] / base['probe_s']:.2f}x)  fast probe {found['fast_s']:5.1f} s "
            f"({found['fast_s'] / base['fast_s']:.2f}x)  load {load:.1f}"
        )
    record = benchmark_figures.measured_on() | {
        "rows": rows,
    }
    out = benchmark_figures.DATA / "numerics_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
