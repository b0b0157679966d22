"""How far the ci profile's results move across the machines one machine can emulate.

Runs notebooks 03 and 04 with the ci profile (`python -m kit run 03 04 --profile ci`) once per
configuration: the reproducible CPU numerics (kit.numerics.numerics) as they are, repeated, under
other instruction-set limits, thread settings, one core and a competing load; then the fast mode
at this CPU's best instruction set and capped lower. For every value the pinned tests check
(notebook 03's Table 3, notebook 04's accuracies by budget) it records each configuration's
figure, and for every claim its outcome. Writes the JSON `--out` (docs/data/cpu_spread.json by
default) and prints the tables docs/reproducibility.md carries (`python -m kit figures` puts
them there; the tests check that the page and the JSON agree, and that the pinned values are
this JSON's). Written to the default place, its first reproducible configuration also becomes
this CPU model's `ci` record (kit.numerics.cpu_records), the pins of the tests; `--record` keeps it
so from a run written elsewhere (a CPU model's first record, without replacing the spread).

    .venv/bin/python benchmarks/cpu_spread.py                      # every configuration, ~12 min
    .venv/bin/python benchmarks/cpu_spread.py --only reproducible fast --out /tmp/spread.json
    .venv/bin/python benchmarks/cpu_spread.py --only reproducible --out /tmp/spread.json --record
    .venv/bin/python benchmarks/cpu_spread.py --only one-core --notebooks 03 --out /tmp/spread.json

`--notebooks 03` runs notebook 03 alone under each configuration: its Table 3 values and its
claims (notebook 04 trains the same model on the same world for fewer iterations, so it adds
values, not operations); such a run is never kept as a record nor written to the default place.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kit.cli import benchmark_figures
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu_records, numerics
from kit.report import outputs

DEFAULT_OUT = benchmark_figures.DATA / "cpu_spread.json"
FAST = {numerics.SWITCH: "fast"}
#: notebook 04's rows of the held-out rule (the rule both notebooks' tables read in ci)
RULE = "heldout"


@dataclass(frozen=True)
class Config:
    """One emulated machine: variables added to the run's environment, the cores it is pinned
    to (taskset; one core runs one training worker at a time, as `kit run` asks there) and
    whether a busy process per core competes with it."""

    name: str
    what: str
    env: dict[str, str] = field(default_factory=dict)
    cores: str | None = None
    load: bool = False

    def commands(self, out: Path, numbers: tuple[str, ...] = ("03", "04")) -> list[list[str]]:
        """The `kit run` commands of the notebooks `numbers`: all in one, or on one core each
        with one training worker (notebook 04 sets notebook 03's settings through its
        `overrides`)."""
        run = [sys.executable, "-m", "kit", "run"]
        where = ["--profile", "ci", "--set", f"output_dir={out}"]
        if self.cores is None:
            return [[*run, *numbers, *where]]
        pinned = ["taskset", "-c", self.cores, *run]
        one_worker = {"03": "launch.workers=1", "04": "overrides.launch.workers=1"}
        return [[*pinned, number, *where, "--set", one_worker[number]] for number in numbers]

    @property
    def mode(self) -> str:
        return numerics.mode(self.env)


CONFIGS = (
    Config("reproducible", "the default, as it is"),
    Config("repeat", "the same again"),
    Config("mkl-avx2", "MKL limited to AVX2 (no AVX-512)", {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}),
    Config("mkl-sse4.2", "MKL limited to SSE4.2", {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}),
    Config("threads-2", "OMP_NUM_THREADS=2 asked for", {"OMP_NUM_THREADS": "2"}),
    Config("one-core", "pinned to one core, one training worker", cores="0"),
    Config("loaded", "a busy process on every core beside it", load=True),
    Config("fast", "fast mode, this CPU's best instruction set", FAST),
    Config(
        "fast-avx2",
        "fast mode capped at AVX2 (ATen, oneDNN, MKL's AVX2 branch)",
        FAST | {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"},
    ),
    Config(
        "fast-sse4.1",
        "fast mode capped at SSE4.1 (ATen's portable kernels, MKL COMPATIBLE)",
        FAST
        | {
            "ATEN_CPU_CAPABILITY": "default",
            "ONEDNN_MAX_CPU_ISA": "SSE41",
            "MKL_CBWR": "COMPATIBLE",
        },
    ),
    Config("fast-one-core", "fast mode on one core", FAST, cores="0"),
)


def values(folder03: Path, folder04: Path | None) -> dict[str, float]:
    """The figures the pinned tests check, in %: notebook 03's Table 3 means (`03 VARIANT
    TASK`) and notebook 04's mean accuracy by budget (`04 BUDGET VARIANT TASK`; none where
    `folder04` is None)."""
    table = pl.read_parquet(folder03 / "time_concat_table3.parquet")
    found = {
        f"03 {row['variant']} {task}": row[f"{task} mean"]
        for row in table.iter_rows(named=True)
        for task in ("mixture", "shape", "position")
        if row.get(f"{task} mean") is not None
    }
    if folder04 is None:
        return found
    results = pl.read_parquet(folder04 / "sweep_results.parquet").filter(pl.col("rule") == RULE)
    means = (
        results.group_by("budget", "variant", "task")
        .agg(pl.col("top1").mean())
        .sort("budget", "variant", "task")
    )
    for row in means.iter_rows(named=True):
        found[f"04 {row['budget']} {row['variant']} {row['task']}"] = 100 * row["top1"]
    return found


def outcomes(folder03: Path, folder04: Path | None) -> dict[str, str]:
    """Every claim's outcome: notebook 03's claims, notebook 04's cells and its claim (none
    where `folder04` is None)."""
    summary03 = outputs.read_json(folder03 / "time_concat_summary.json")
    found = {f"03 {claim['claim']}": claim["status"] for claim in summary03["claims"]}
    if folder04 is None:
        return found
    summary04 = outputs.read_json(folder04 / "sweep_summary.json")
    found |= {f"04 budget {cell['budget']}": cell["status"] for cell in summary04["cells"]}
    found["04 claim"] = summary04["claim"]["status"]
    return found


def _spin() -> None:
    while True:
        pass


@contextmanager
def competing_load(on: bool) -> Iterator[None]:
    """A busy process on every core this process may use, for the block."""
    busy = [
        multiprocessing.Process(target=_spin, daemon=True)
        for _ in range(len(os.sched_getaffinity(0)) if on else 0)
    ]
    for process in busy:
        process.start()
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.join()


NOTEBOOKS = {"03": "03_time_concat", "04": "04_when_concat_helps"}


def finished(out: Path, numbers: tuple[str, ...] = tuple(NOTEBOOKS)) -> bool:
    """Whether `out` holds the complete results of the notebooks `numbers` (a kept folder is not
    run again)."""
    return all(
        (out / f"{NOTEBOOKS[number]}.provenance.json").is_file() for number in numbers
    ) and not any(out.glob("*.incomplete"))


def run(config: Config, out: Path, numbers: tuple[str, ...] = tuple(NOTEBOOKS)) -> dict[str, Any]:
    """Notebooks `numbers` (03 and 04, or 03 alone) of the ci profile under `config`, into `out`
    (read back where a kept folder already holds them); their values."""
    env = numerics.without_variables()
    if not finished(out, numbers):
        with competing_load(config.load):
            for command in config.commands(out, numbers):
                done = subprocess.run(
                    command, env=env | config.env, cwd=REPO_ROOT, capture_output=True, text=True
                )
                if done.returncode != 0:
                    raise SystemExit(
                        f"{config.name}: kit run failed\n{done.stdout[-3000:]}{done.stderr}"
                    )
    records = [json.loads((out / f"{NOTEBOOKS[n]}.provenance.json").read_text()) for n in numbers]
    provenance = records[0]
    with_04 = out if "04" in numbers else None
    return {
        "what": config.what,
        "mode": config.mode,
        "env": config.env,
        "cores": config.cores,
        "load": config.load,
        "wall_s": round(sum(r["wall_s"] for r in records), 1),
        "cpu_numerics": provenance["cpu_numerics"],
        "notebooks": list(numbers),
        "values": values(out, with_04),
        "outcomes": outcomes(out, with_04),
    }


def spread(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per value, the reproducible mode's figure and the largest move in each mode; whether
    every configuration of a mode gave the same bits and the first configuration's outcomes."""
    reference = runs[next(iter(runs))]["values"]
    by_mode: dict[str, dict[str, list[float]]] = {}
    for result in runs.values():
        for key, value in result["values"].items():
            by_mode.setdefault(result["mode"], {}).setdefault(key, []).append(value)
    moves = {
        mode: {key: max(abs(v - reference[key]) for v in found) for key, found in table.items()}
        for mode, table in by_mode.items()
    }
    return {
        "reference": reference,
        "largest_move": {mode: max(table.values()) for mode, table in moves.items()},
        "moves": moves,
        "identical_within_mode": {
            mode: all(len(set(found)) == 1 for found in table.values())
            for mode, table in by_mode.items()
        },
        "same_outcomes": {
            mode: all(
                result["outcomes"] == runs[next(iter(runs))]["outcomes"]
                for result in runs.values()
                if result["mode"] == mode
            )
            for mode in by_mode
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="configurations to run (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--keep", type=Path, help="keep the output folders here")
    parser.add_argument(
        "--record",
        action="store_true",
        help="keep the first reproducible configuration as this CPU model's ci record even "
        "when --out is not the default",
    )
    parser.add_argument(
        "--notebooks",
        nargs="+",
        choices=list(NOTEBOOKS),
        default=list(NOTEBOOKS),
        help="notebooks to run under each configuration (default: 03 04; 03 alone is never "
        "written to the default place nor kept as a record)",
    )
    args = parser.parse_args()
    numbers = tuple(n for n in NOTEBOOKS if n in args.notebooks)
    if "03" not in numbers:
        parser.error("--notebooks: 04 reads notebook 03's runs, so 03 runs too")
    if numbers != tuple(NOTEBOOKS) and (args.out == DEFAULT_OUT or args.record):
        parser.error("--notebooks: a run of some notebooks is no spread nor record; give --out")
    chosen = [c for c in CONFIGS if not args.only or c.name in args.only]

    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        runs = {}
        for config in chosen:
            print(f"{config.name}: {config.what} ...", flush=True)
            runs[config.name] = run(config, root / config.name, numbers)
            print(f"  {runs[config.name]['wall_s']:.0f} s", flush=True)
    record = benchmark_figures.measured_on() | {
        "numerics": numerics.VERSION,
        "runs": runs,
        "spread": spread(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(benchmark_figures.cpu_spread(args.out))
    name = next((c.name for c in chosen if runs[c.name]["mode"] == numerics.REPRODUCIBLE), None)
    if (args.out == DEFAULT_OUT or args.record) and name is not None:
        kept = cpu_records.update(
            "ci",
            {
                "kit_commit": record["kit_commit"],
                "numerics": numerics.VERSION,
                "configuration": f"{name}: {runs[name]['what']}",
                "values": runs[name]["values"],
                "outcomes": runs[name]["outcomes"],
            },
        )
        print(f"kept as this CPU model's ci record in {kept}")


if __name__ == "__main__":
    main()
