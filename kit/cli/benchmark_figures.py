"""The `python -m kit figures` blocks written from the benchmarks' records under docs/data/:
the CPU numerics' spread over configurations (benchmarks/cpu_spread.py) and their cost
(benchmarks/numerics_cost.py). kit.cli.figures places them in the pages."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kit.files.paths import REPO_ROOT, shown
from kit.numerics import cpu, numerics

#: the benchmarks' records
DATA = REPO_ROOT / "docs" / "data"


def measured_on() -> dict[str, Any]:
    """The machine and code a benchmark's record names, as the blocks print them."""
    from kit.runtime import provenance

    return {
        "machine": cpu.cpu_model(),
        "cpu_isa": cpu.best_isa(),
        "cores": len(os.sched_getaffinity(0)),
        "kit_commit": provenance.commit(),
        "written": time.strftime("%Y-%m-%d"),
    }


def read_record(path: Path) -> Any:
    """A record a figures block reads; a missing one names its file."""
    if not path.is_file():
        raise FileNotFoundError(f"{shown(path)}: missing; it is what a figures block reads")
    return json.loads(path.read_text())


def cpu_spread(path: Path = DATA / "cpu_spread.json") -> str:
    """benchmarks/cpu_spread.py's output: each configuration, and each pinned value's spread."""
    record = read_record(path)
    runs, summary = record["runs"], record["spread"]
    names = list(runs)
    reference = summary["reference"]
    lines = [
        f"Measured on {record['machine']} ({record['cpu_isa']}), {record['cores']} cores, at "
        f"commit {record['kit_commit'][:12]}, on {record['written']}.",
        "",
        "| configuration | mode | what it emulates | wall s | same bits as the first | outcomes |",
        "|---|---|---|---|---|---|",
    ]
    first = runs[names[0]]["outcomes"]
    for name in names:
        run = runs[name]
        same = "yes" if run["values"] == reference else "no"
        changed = [f"{k} {v}" for k, v in run["outcomes"].items() if first[k] != v]
        outcome = "same" if not changed else "changed: " + ", ".join(changed)
        lines.append(
            f"| {name} | {run['mode']} | {run['what']} | {run['wall_s']:.0f} | {same} | {outcome} |"
        )
    moves = summary["moves"]
    lines += [
        "",
        "| value (top-1 %) | reproducible | min | max | largest move, reproducible | largest "
        "move, fast |",
        "|---|---|---|---|---|---|",
    ]
    for key, value in reference.items():
        found = [runs[name]["values"][key] for name in names]
        lines.append(
            f"| {key} | {value:.2f} | {min(found):.2f} | {max(found):.2f} | "
            f"{moves.get(numerics.REPRODUCIBLE, {}).get(key, 0):.2f} | "
            f"{moves.get(numerics.FAST, {}).get(key, 0):.2f} |"
        )
    agree = ", ".join(
        f"{mode} mode: {'the same in every configuration' if same else 'changed'}"
        for mode, same in summary["same_outcomes"].items()
    )
    outcomes = ", ".join(f"{k} {v}" for k, v in first.items())
    lines += ["", f"Outcomes of the first configuration: {outcomes} ({agree})."]
    return "\n".join(lines) + "\n"


def numerics_cost(path: Path = DATA / "numerics_cost.json") -> str:
    """benchmarks/numerics_cost.py's output: training and probe speed per numerics mode and
    thread count."""
    record = read_record(path)
    rows = record["rows"]
    base = rows[0]
    loads = [row["load"] for row in rows]
    lines = [
        f"Measured on {record['machine']} ({record['cpu_isa']}), {record['cores']} cores, at "
        f"commit {record['kit_commit'][:12]}, on {record['written']}, the load average "
        f"{min(loads):.1f} to {max(loads):.1f} after each line.",
        "",
        "| configuration | threads | training, img/s | against reproducible | L-BFGS probe, s | "
        "against reproducible | fast probe, s | against reproducible |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['threads']} | {row['img_s']:.0f} | "
            f"{row['img_s'] / base['img_s']:.2f}x | {row['probe_s']:.1f} | "
            f"{row['probe_s'] / base['probe_s']:.2f}x | {row['fast_s']:.1f} | "
            f"{row['fast_s'] / base['fast_s']:.2f}x |"
        )
    return "\n".join(lines) + "\n"
