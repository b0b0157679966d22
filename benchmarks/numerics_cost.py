"""What the reproducible CPU numerics cost against the fast mode, per process.

Each figure comes from a fresh process (the numerics are fixed when torch loads): training steps
of the cpu profile's network (resnet10 at width 0.25, 24 px, batch 32, SGD) in images per second,
and one float64 L-BFGS probe fit above kit.probes.lbfgs.ONE_THREAD_ELEMENTS (20,000 rows x 512
features, 10 classes) in seconds, under
- `reproducible`: the default (kit.core.numerics), one intra-op thread a computation;
- `fast`: this CPU's best paths, on one thread and on every core of the process;
- `portable`: the stricter alternative the kit does not use (no oneDNN, ATen's portable kernels,
  MKL COMPATIBLE, one thread), for docs/decisions.md.
Run it on idle cores; it prints one line per configuration and writes them to
docs/data/numerics_cost.json (docs/reproducibility.md quotes it through `python -m kit figures`).

    .venv/bin/python benchmarks/numerics_cost.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kit.cli import figures
from kit.core import numerics
from kit.core.paths import REPO_ROOT

WORK = """
import json, os, time
import kit, torch
from kit import models
from kit.core import numerics
from kit.core.threads import numerics_threads
from kit.probes import lbfgs
from kit.probes.rows import Split
from kit.probes.settings import LbfgsProbeSettings
if os.environ.get("PORTABLE"):
    torch.backends.mkldnn.enabled = False
threads = int(os.environ.get("THREADS", "0"))
torch.manual_seed(0)
model = models.build("resnet10", 10, width=0.25, image_size=24)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
x, y = torch.randn(32, 3, 24, 24), torch.randint(0, 10, (32,))

def steps(n):
    for _ in range(n):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

context = numerics_threads()
with context:
    if threads:
        torch.set_num_threads(threads)
    steps(5)
    start = time.perf_counter()
    steps(40)
    rate = 40 * 32 / (time.perf_counter() - start)
    features = torch.randn(20000, 512, generator=torch.Generator().manual_seed(0))
    labels = (features @ torch.randn(512, 10, generator=torch.Generator().manual_seed(1))).argmax(1)
    train = Split(features[:16000], labels[:16000], "t")
    evaluation = Split(features[16000:], labels[16000:], "e")
    start = time.perf_counter()
    lbfgs.lbfgs_probe(train, evaluation, 10, LbfgsProbeSettings(weight_decays=[1e-2]))
    probe_s = time.perf_counter() - start
print(json.dumps({"img_s": rate, "probe_s": probe_s, "threads": torch.get_num_threads()}))
"""

CONFIGS = (
    ("reproducible", {}),
    ("fast, 1 thread", {numerics.SWITCH: "fast", "THREADS": "1"}),
    ("fast, every core", {numerics.SWITCH: "fast"}),
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
    print(f"{numerics.cpu_model()} ({numerics.best_isa()}), {len(os.sched_getaffinity(0))} cores")
    base = None
    rows = []
    for name, env in CONFIGS:
        found = measure(env)
        rows.append({"name": name} | found)
        base = base or found
        speed = found["img_s"] / base["img_s"]
        print(
            f"{name:<20} training {found['img_s']:6.0f} img/s ({speed:.2f}x)  L-BFGS probe "
            f"{found['probe_s']:5.1f} s ({found['probe_s'] / base['probe_s']:.2f}x)"
        )
    record = figures.measured_on() | {
        "rows": rows,
    }
    out = figures.DATA / "numerics_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
