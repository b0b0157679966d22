"""Where a replicate of notebook 03 spends its time: training, feature extraction, probe fitting
and the rest, read from what a finished `python -m kit run 03` wrote.

    .venv/bin/python benchmarks/replicate_cost.py outputs/cpu

The stage records the run's kernel appended (`.03_time_concat.stages.jsonl`, kit.core.progress)
give each stage's first and last record; extraction runs inside the probes stage, so probe
fitting is the probes stage less the extraction stages in it. The notebook's wall time comes
from its provenance file, the replicates from its results table. Prints seconds per stage, per
replicate and as a share of the notebook's wall time, with the load average the run recorded
(the cores may have been shared).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl

NOTEBOOK = "03_time_concat"


def spans(path: Path) -> dict[str, float]:
    """Seconds from each stage's first record to its last, summed over its occurrences."""
    first: dict[str, float] = {}
    total: dict[str, float] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        stage, at = record["stage"], record["time"]
        first.setdefault(stage, at)
        if record.get("final"):
            total[stage] = total.get(stage, 0.0) + at - first.pop(stage)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output_dir", type=Path, help="the run's output folder (outputs/cpu)")
    args = parser.parse_args()
    found = spans(args.output_dir / f".{NOTEBOOK}.stages.jsonl")
    provenance = json.loads((args.output_dir / f"{NOTEBOOK}.provenance.json").read_text())
    wall = provenance["wall_s"]
    results = pl.read_parquet(args.output_dir / "time_concat_results.parquet")
    replicates = results["replicate"].n_unique()
    extraction = sum(s for stage, s in found.items() if stage.startswith("features"))
    parts = {
        "training": found.get("training", 0.0),
        "feature extraction": extraction,
        "probe fitting": found.get("probes", 0.0) - extraction,
    }
    parts["the rest (kernel, plan, tables, charts)"] = wall - sum(parts.values())
    print(
        f"notebook 03: {wall:.0f} s for {replicates} replicates; load average at the start "
        f"{provenance.get('load_average')}"
    )
    print(f"| {'part':<40} | {'s':>6} | {'s a replicate':>13} | {'share':>5} |")
    print(f"|{'-' * 42}|{'-' * 8}|{'-' * 15}|{'-' * 7}|")
    for part, seconds in parts.items():
        print(
            f"| {part:<40} | {seconds:6.0f} | {seconds / replicates:13.1f} | "
            f"{seconds / wall:5.0%} |"
        )


if __name__ == "__main__":
    main()
