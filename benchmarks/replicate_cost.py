"""Where a replicate of notebook 03 spends its time: training, feature extraction, probe fitting
and the rest, read from what a finished `python -m kit run 03` wrote, beside a recorded earlier
run's figures.

    .venv/bin/python benchmarks/replicate_cost.py outputs/cpu
    .venv/bin/python benchmarks/replicate_cost.py outputs/cpu --json docs/data/replicate_cost.json

The stage records the run's kernel appended (`.03_time_concat.stages.jsonl`, kit.readout.progress)
give each stage's seconds (kit.readout.progress.stage_spans: first record to last); extraction
runs inside the probes stage, so probe fitting is the probes stage less the extraction stages in
it. The notebook's wall time comes
from its provenance file, the replicates from its results table. Each run folder's line after the
table gives the seconds of a core its training steps took (`step_seconds`, from the runs' logged
rates) against the training stage's cores times its wall time: the rest is what training spends
besides its steps. Prints seconds per stage, per
replicate and as a share of the notebook's wall time, with the load average the run recorded
(the cores may have been shared), and beside them the seconds per replicate of the record
`--before` names (by default docs/data/replicate_cost_41d9133.json, kit 41d9133's figures on a
2-core AMD EPYC 25/17) and their ratio. `--json` writes this run's figures as such a record.

Side by side: several run folders on each side (runs of the new code and of an earlier commit,
alternated in one sitting so that the host's drift hits both) are pooled, seconds and replicates
summed, and `--before` takes run folders as well as records:

    .venv/bin/python benchmarks/replicate_cost.py new-1 new-2 --before old-1 old-2 \
        --json docs/data/replicate_cost_side_by_side.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl
import yaml

from kit.readout.progress import stage_spans

NOTEBOOK = "03_time_concat"
#: the figures of kit 41d9133 (numerics version 2, the direct control at 240 iterations), pooled
#: over its runs alternated with the new code's in one sitting (docs/benchmarks.md, "A replicate
#: side by side"); docs/data/replicate_cost.json holds an earlier commit's
BEFORE = Path(__file__).parents[1] / "docs" / "data" / "replicate_cost_41d9133.json"


def measured(output_dir: Path) -> dict:
    """The run's figures: commit, wall time, replicates, load average and seconds per part."""
    found = {
        stage: seconds
        for stage, (seconds, _) in stage_spans(output_dir / f".{NOTEBOOK}.stages.jsonl").items()
    }
    provenance = json.loads((output_dir / f"{NOTEBOOK}.provenance.json").read_text())
    wall = provenance["wall_s"]
    numerics = provenance.get("cpu_numerics", {})
    results = pl.read_parquet(output_dir / "time_concat_results.parquet")
    extraction = sum(s for stage, s in found.items() if stage.startswith("features"))
    parts = {
        "training": found.get("training", 0.0),
        "feature extraction": extraction,
        "probe fitting": found.get("probes", 0.0) - extraction,
    }
    parts["the rest (kernel, plan, tables, charts)"] = wall - sum(parts.values())
    return {
        "kit_commit": provenance.get("kit_commit"),
        "wall_s": wall,
        "replicates": results["replicate"].n_unique(),
        "load_average": provenance.get("load_average"),
        "cpu": f"{provenance.get('cores')} cores of {numerics.get('cpu')} "
        f"({numerics.get('cpu_isa')})",
        "numerics": numerics.get("version"),
        "parts": parts,
    }


def step_seconds(output_dir: Path) -> float:
    """Seconds of a core the run's training steps took, summed over its runs: each metrics row's
    steps since the last row at the rate it logged (kit.train.loop_steps: images a second over
    the logging window); what the training stage spent besides (starting runs, evaluating,
    writing checkpoints, cores idle at its end) is the rest of its cores' time."""
    batch = yaml.safe_load((output_dir / f"{NOTEBOOK}.parameters.yaml").read_text())["train"][
        "batch_size"
    ]
    seconds = 0.0
    for metrics in sorted((output_dir / "time_concat").glob("rep*/*/seed*/metrics.jsonl")):
        last = 0
        for line in metrics.read_text().splitlines():
            row = json.loads(line)
            if row.get("images_per_s"):
                seconds += (row["step"] - last) * batch / row["images_per_s"]
                last = row["step"]
    return seconds


def pooled(records: list[dict]) -> dict:
    """Several runs' figures as one: seconds and replicates summed, each run's load average kept
    (`runs` says how many; a commit shared by all of them is kept)."""
    if len(records) == 1:
        return records[0]
    commits = {r.get("kit_commit") for r in records}
    parts = {part: sum(r["parts"].get(part, 0.0) for r in records) for part in records[0]["parts"]}
    return {
        "kit_commit": commits.pop() if len(commits) == 1 else None,
        "wall_s": sum(r["wall_s"] for r in records),
        "replicates": sum(r["replicates"] for r in records),
        "load_average": [r.get("load_average") for r in records],
        "cpu": records[0].get("cpu"),
        "numerics": records[0].get("numerics"),
        "runs": sum(r.get("runs", 1) for r in records),
        "parts": parts,
    }


def read(path: Path) -> dict:
    """A run folder's figures (`measured`) or a record written by `--json`."""
    return measured(path) if path.is_dir() else json.loads(path.read_text())


def table(now: dict, before: dict | None) -> list[str]:
    """The parts in seconds, per replicate and as a share, beside `before`'s per replicate."""
    reps, wall = now["replicates"], now["wall_s"]
    header = f"| {'part':<40} | {'s':>6} | {'s a replicate':>13} | {'share':>5} |"
    rule = f"|{'-' * 42}|{'-' * 8}|{'-' * 15}|{'-' * 7}|"
    if before is not None:
        header += f" {'before, s a replicate':>21} | {'now / before':>12} |"
        rule += f"{'-' * 23}|{'-' * 14}|"
    lines = [header, rule]
    for part, seconds in [*now["parts"].items(), ("a replicate, in all", wall)]:
        line = f"| {part:<40} | {seconds:6.0f} | {seconds / reps:13.1f} | {seconds / wall:5.0%} |"
        if before is not None:
            then = (
                before["wall_s"]
                if part == "a replicate, in all"
                else before["parts"].get(part, 0.0)
            ) / before["replicates"]
            ratio = f"{seconds / reps / then:.2f}" if then else "n/a"
            line += f" {then:21.1f} | {ratio:>12} |"
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "output_dir", type=Path, nargs="+", help="the run's output folder (outputs/cpu), or several"
    )
    parser.add_argument(
        "--before",
        type=Path,
        nargs="+",
        default=[BEFORE],
        help="an earlier run's record, or run folders of an earlier commit",
    )
    parser.add_argument("--json", type=Path, help="write this run's figures as a record")
    args = parser.parse_args()
    now = pooled([measured(folder) for folder in args.output_dir])
    found = [path for path in args.before if path.exists()]
    before = pooled([read(path) for path in found]) if found else None
    print(
        f"notebook 03: {now['wall_s']:.0f} s for {now['replicates']} replicates "
        f"({now.get('runs', 1)} run(s)) at commit {(now['kit_commit'] or 'unrecorded')[:12]}; "
        f"load average at the start {now['load_average']}"
    )
    if before is not None:
        print(
            f"before: {before['wall_s']:.0f} s for {before['replicates']} replicates "
            f"({before.get('runs', 1)} run(s)) at commit "
            f"{(before['kit_commit'] or 'unrecorded')[:12]}; load average at the start "
            f"{before['load_average']} ({before.get('source', found[0].name)})"
        )
    print(f"CPU: {now.get('cpu')}, numerics version {now.get('numerics')}")
    print("\n".join(table(now, before)))
    for folder in args.output_dir:
        run = measured(folder)
        cores = run["cpu"].split()[0]
        if cores.isdigit():
            stage = int(cores) * run["parts"]["training"]
            print(
                f"{folder}: training's steps {step_seconds(folder):.0f} s of a core of the "
                f"training stage's {stage:.0f} ({cores} cores x its wall time)"
            )
    if args.json:
        args.json.write_text(json.dumps(now, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
