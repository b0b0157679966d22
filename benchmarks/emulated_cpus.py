"""The numerics fingerprint (`python -m kit check --numerics`) under QEMU's emulation of other
x86-64 CPUs, against this machine's own.

QEMU's user-mode emulator (Debian's `qemu-user`, `qemu-x86_64 -cpu MODEL`) runs this machine's
Python, torch and kit on an emulated processor that reports another vendor, model, instruction
sets and cache sizes, so every library's dispatch sees that CPU. It computes each IEEE 754
operation exactly as any processor must; where it departs from real hardware is in the
instructions whose results each processor defines for itself (the approximate reciprocal and
reciprocal square root), which is also where two vendors' processors part. An operation whose
bits differ here depends on the CPU; one that agrees under every emulated CPU depends on neither
the vendor's dispatch nor those instructions. QEMU 7.2 emulates up to AVX2 (no AVX-512), the
reproducible numerics' own cap.

Writes docs/data/emulated_cpus.json (`--out`), which the kit's sentence about other machines
reads (kit.numerics.cpu_records.emulated). Each emulated run takes several minutes on one core.

    .venv/bin/python benchmarks/emulated_cpus.py [--cpus EPYC-Milan Cascadelake-Server]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kit.cli import benchmark_figures
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu_records, numerics
from kit.readout.numbers import counted

PRINT = (
    "import json, kit; from kit.cli import fingerprint; "
    "print('FP', json.dumps(fingerprint.fingerprint()['ops']))"
)


def ops(prefix: list[str]) -> dict[str, dict[str, str]]:
    """The fingerprint's operations, run under `prefix` (an emulator) or natively."""
    done = subprocess.run(
        [*prefix, sys.executable, "-c", PRINT],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=7200,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("FP "))
    return json.loads(line[3:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", nargs="+", default=["EPYC-Milan", "Cascadelake-Server"])
    parser.add_argument("--out", type=Path, default=cpu_records.EMULATED)
    args = parser.parse_args()
    emulator = shutil.which("qemu-x86_64")
    if emulator is None:
        sys.exit("qemu-x86_64 is missing: apt-get install qemu-user")
    native = ops([])
    emulated = {}
    for cpu in args.cpus:
        start = time.perf_counter()
        theirs = ops([emulator, "-cpu", cpu])
        differ = [
            f"{group}: {name}"
            for group, found in native.items()
            for name, value in found.items()
            if theirs.get(group, {}).get(name) != value
        ]
        emulated[cpu] = {"differ": differ, "wall_s": round(time.perf_counter() - start)}
        seconds = emulated[cpu]["wall_s"]
        print(f"{cpu}: {counted(len(differ), 'operation')} differing {differ} ({seconds} s)")
    record = benchmark_figures.measured_on() | {
        "numerics": numerics.VERSION,
        "operations": sum(len(found) for found in native.values()),
        "emulator": subprocess.run(
            [emulator, "--version"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[0],
        "emulated": emulated,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
