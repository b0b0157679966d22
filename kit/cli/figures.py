"""The figures the documentation quotes, written from recorded outputs rather than typed.

A page of docs/ marks each generated block `<!-- figures: NAME -->` ... `<!-- /figures -->`;
`python -m kit figures` rewrites every block from the files it reads, and `--check` exits 1
naming the page when one differs (the test suite runs it). The sources are small and kept in
the repository:
- `docs/results/<profile>/`: a finished output folder's summaries and provenance (no
  notebooks, charts or checkpoints), copied by `python -m kit figures --record PROFILE FOLDER`
  after a run (`--record cpu outputs/cpu` after the main job);
- `docs/data/*.json`: what a benchmark wrote (`benchmarks/cpu_spread.py`,
  `benchmarks/numerics_cost.py`), and `docs/data/cpus/`: what each recorded CPU model gave
  (kit.numerics.cpu_records; their blocks, README's sentence about other machines among them, are
  kit.cli.cpu_figures').
Every block names the machine, the commit and the CPU numerics its figures came from.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from kit.cli import cpu_figures, rooms
from kit.cli.benchmark_figures import cpu_spread, numerics_cost, read_record
from kit.experiments.timecat.result_files import SWEEP, TIME_CONCAT
from kit.files.files import write_text
from kit.files.paths import REPO_ROOT, shown
from kit.numerics import cpu_records, numerics
from kit.readout.numbers import counted, interval, signed

DOCS = REPO_ROOT / "docs"
RESULTS = DOCS / "results"
#: a finished output folder's files that `--record` keeps: summaries and provenance, and what
#: notebook 03 measured its rates from (its stage records and merged parameters)
RECORDED = (
    "*_summary.json",
    "*.provenance.json",
    ".03_time_concat.stages.jsonl",
    "03_time_concat.parameters.yaml",
)
#: the profile whose recorded run is the main job (README's first command)
MAIN_JOB = "cpu"
BLOCK = re.compile(r"(<!-- figures: ([\w-]+) -->\n)(.*?)(<!-- /figures -->)", re.DOTALL)
COMMAND = "python -m kit figures"


def _provenance(folder: Path, notebook: str) -> dict[str, Any]:
    return read_record(folder / f"{notebook}.provenance.json")


def _numerics_words(record: dict[str, Any]) -> str:
    """The CPU numerics a run's provenance `record` names, with their version (a record without
    one was made under version 1) and, for an earlier version, what it lacked."""
    made = record.get("cpu_numerics", {})
    version = made.get("version", 1)
    since = f": {numerics.EARLIER[version]}" if version in numerics.EARLIER else ""
    return f"CPU numerics {made.get('mode', 'unrecorded')} (version {version}{since})"


def _origin(record: dict[str, Any]) -> str:
    made = record.get("cpu_numerics", {})
    load = record.get("load_average")
    return (
        f"at commit {record['kit_commit'][:12]} on {made.get('cpu', 'an unrecorded CPU')} "
        f"({made.get('cpu_isa', '?')}), {_numerics_words(record)}"
        + (f", load average {load[0]:g} at the end" if load else "")
    )


def _ran(line: str, record: dict[str, Any]) -> str:
    """A recorded what-ran line for the docs, its words on other machines (what the kit knew
    when it ran) replaced by the numerics it ran under: what another machine changes is the
    cross-machine block's, from the CPU records as they are now."""
    machine, found, rest = line.partition(", CPU numerics ")
    if not found:
        return line
    return f"{machine}, {_numerics_words(record)}; {rest.rsplit('; ', 1)[-1]}"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else signed(value)


#: a verdict row's keys shown before its condition, with their headers
LABELS = {"claim": "claim", "world_seed": "world", "budget": "budget"}


def _verdict_rows(verdicts: list[dict[str, Any]], keys: tuple[str, ...] = ("claim",)) -> list[str]:
    """A table of verdict rows: `keys`, the condition, the difference with its 95% interval,
    the replicates, the effect detectable at 80% power and the judgement."""
    headers = [LABELS[k] for k in keys]
    headers += ["condition", "difference [95% interval]", "replicates", "detectable", "judgement"]
    rows = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in verdicts:
        difference = (
            f"{_signed(row['mean'])} {interval(row['low'], row['high'])}"
            if row["mean"] is not None
            else "not measured"
        )
        detectable = "n/a" if row["detectable"] is None else f"{row['detectable']:.1f}"
        cells = [str(row[k]) for k in keys]
        cells += [
            row["condition"],
            difference,
            str(row["replicates"]),
            detectable,
            row["judgement"],
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main_job(folder: Path = RESULTS / "cpu") -> str:
    """The main job (`kit run --profile cpu`): each notebook's wall time, notebook 03's claims
    with every condition, what would decide what its wall budget left undecided, notebook 04's
    statement."""
    notebooks = sorted(
        p.name.removesuffix(".provenance.json") for p in folder.glob("*.provenance.json")
    )
    records = {name: _provenance(folder, name) for name in notebooks}
    walls = {name: records[name].get("wall_s") for name in notebooks}
    total = sum(w for w in walls.values() if w is not None)
    first = records[notebooks[0]]
    summary = read_record(folder / TIME_CONCAT.summary)
    claims = ", ".join(f"{c['claim']} **{c['status']}**" for c in summary["claims"])
    lines = [
        f"README's first command {_origin(first)}, {first['platform']}: "
        f"**{len(notebooks)} notebooks in {total:.0f} s** ("
        + ", ".join(f"{n.split('_')[0]} {w:.0f} s" for n, w in walls.items() if w is not None)
        + f"). Notebook 03's claims: {claims}.",
        "",
        *_verdict_rows(summary["verdicts"]),
    ]
    if summary.get("next"):
        lines += ["", f"To decide what it left undecided: {summary['next']}"]
    sweep = folder / SWEEP.summary
    if sweep.is_file():
        lines += ["", f"Notebook 04 in this profile: {_statement(read_record(sweep))}"]
    return "\n".join(lines) + "\n"


def _statement(summary: dict[str, Any]) -> str:
    """A recorded sweep's statement, computed from its cells' outcomes by the function notebook
    04 calls (sweep_outcome.statement), so a record made before a change of wording reads as
    the kit states it now; a summary without cells keeps its own line."""
    if not summary.get("cells"):
        return str(summary["claim"]["line"])
    # here, not at the top: sweep_outcome reaches torch, which `python -m kit` starts without
    from kit.experiments.timecat import sweep_outcome

    baseline = next(r["against"] for r in summary["verdicts"])  # each cell's primary first
    return sweep_outcome.statement(pl.DataFrame(summary["cells"]), baseline).line


def _made_on(record: dict[str, Any]) -> str:
    """The CPU a recorded run was made on: the CPU record whose main job has its commit names
    the model (vendor, family, model), else the provenance's CPU name."""
    commit = record["kit_commit"]
    for found in cpu_records.records():
        if found.get("main_job", {}).get("kit_commit", "")[:12] == commit[:12]:
            return cpu_records.describe(found)
    return str(record.get("cpu_numerics", {}).get("cpu", "an unrecorded CPU"))


def main_job_time(folder: Path = RESULTS / "cpu") -> str:
    """The main job's duration, said once: the recorded run's notebooks, with its CPU and
    commit (the page that carries this block says it wherever the kit states the time)."""
    made = [
        _provenance(folder, p.name.removesuffix(".provenance.json"))
        for p in sorted(folder.glob("*.provenance.json"))
    ]
    first, total = made[0], sum(r["wall_s"] for r in made if r.get("wall_s") is not None)
    return (
        f"The main job's {len(made)} notebooks took {total:,.0f} s ({total / 60:.0f} min) in the "
        f"recorded run, on {first['cores']} cores of {_made_on(first)} at kit "
        f"{first['kit_commit'][:7]}; hosts differ by up to 2x, so a time names its CPU.\n"
    )


def _decided(cells: list[dict[str, Any]]) -> str:
    """How many cells their rounds decided (reproduced or contradicted), and why the others
    stopped."""
    statuses = [c["status"] for c in cells]
    decided = [s for s in statuses if s in ("reproduced", "contradicted")]
    others: dict[str, int] = {}
    for cell in cells:
        if cell["status"] not in ("reproduced", "contradicted"):
            why = cell.get("stopped") or cell["status"]
            others[why] = others.get(why, 0) + 1
    return (
        f"{len(decided)} of {len(cells)} cells decided ("
        + ", ".join(f"{decided.count(s)} {s}" for s in ("reproduced", "contradicted"))
        + ")"
        + ("; undecided: " + ", ".join(f"{n} {why}" for why, n in others.items()) if others else "")
    )


def _cell_matrix(
    cells: list[dict[str, Any]], primary: dict[tuple[int, int], dict[str, Any]]
) -> list[str]:
    """World by budget: each cell's primary difference and its outcome, with the replicates
    (and rounds) of the look that decided it."""
    budgets = sorted({c["budget"] for c in cells})
    lines = [
        "| world | " + " | ".join(f"{b:,}" for b in budgets) + " |",
        "|---|" + "---|" * len(budgets),
    ]
    for world in sorted({c["world_seed"] for c in cells}):
        row = []
        for budget in budgets:
            cell = next(
                (c for c in cells if (c["world_seed"], c["budget"]) == (world, budget)), None
            )
            found = primary.get((world, budget))
            if cell is None or found is None:
                row.append("not run")
                continue
            rounds = cell.get("rounds")
            took = f"{found['replicates']}" + (f", {rounds} rounds" if (rounds or 1) > 1 else "")
            row.append(f"{_signed(found['mean'])} {cell['status']} ({took})")
        lines.append(f"| {world} | " + " | ".join(row) + " |")
    return lines


def sweep(folder: Path = RESULTS / "sweep") -> str:
    """The sweep profile (`kit run 04 --profile sweep`): the statement, how many cells it
    decided, each cell's primary difference and outcome by world and budget, every cell's
    primary condition, and where each variant learns the mixture."""
    record = _provenance(folder, "04_when_concat_helps")
    summary = read_record(folder / SWEEP.summary)
    wall = record.get("wall_s")
    primary: dict[tuple[int, int], dict[str, Any]] = {}
    for row in summary["verdicts"]:  # each cell's primary condition comes first
        primary.setdefault((row["world_seed"], row["budget"]), row)
    lines = [
        f"`python -m kit run 04 --profile sweep` {_origin(record)}"
        + (f": {wall / 60:.1f} minutes." if wall is not None else "."),
        "",
        f"**The statement** (from the recorded cells' outcomes): {_statement(summary)}",
        "",
        f"{_ran(summary['claim'].get('ran', ''), record)}.",
        "",
        f"{_decided(summary['cells'])}."
        + (f" To decide the rest: {summary['next']}" if summary.get("next") else ""),
        "",
        "Each cell's primary difference (cat*n* minus cat1, mean transfer top-1 points over the "
        "replicates its outcome rests on) and outcome (every condition together), with its "
        "replicates:",
        "",
        *_cell_matrix(summary["cells"], primary),
        "",
        "Every cell's primary condition (cat*n* against the baseline, mean transfer, top-1 "
        "points):",
        "",
        *_verdict_rows(list(primary.values()), ("world_seed", "budget")),
        "",
        "Where each variant learns the mixture (95% of cat1's best own accuracy), by world:",
        "",
    ]
    variants = sorted({r["variant"] for r in summary["learned"]})
    lines += ["| world | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    for world in sorted({r["world_seed"] for r in summary["learned"]}):
        at = {r["variant"]: r["learned_at"] for r in summary["learned"] if r["world_seed"] == world}
        lines.append(
            f"| {world} | "
            + " | ".join(
                "not within the sweep" if at[v] is None else f"{at[v]:,}" for v in variants
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


#: every block a page may carry, by name
BLOCKS: dict[str, Callable[[], str]] = {
    "main-job": main_job,
    "main-job-time": main_job_time,
    "sweep": sweep,
    "cpu-spread": cpu_spread,
    "numerics-cost": numerics_cost,
    "cross-machine": cpu_figures.cross_machine,
    "cross-machine-brief": cpu_figures.cross_machine_brief,
    "cpu-models": cpu_figures.cpu_models,
    "bottom-rooms": rooms.bottom_rooms,
}
#: pages outside docs/ that carry blocks
PAGES = (REPO_ROOT / "README.md",)


def rendered(text: str, page: Path) -> str:
    """`text` with every block rewritten; an unknown block name is an error naming the page."""

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in BLOCKS:
            raise KeyError(
                f"{shown(page)}: unknown figures block '{name}' (known: {', '.join(BLOCKS)})"
            )
        return match.group(1) + BLOCKS[name]() + match.group(4)

    return BLOCK.sub(block, text)


def record(profile: str, folder: Path) -> Path:
    """Copy a finished output folder's summaries and provenance to docs/results/PROFILE/; the
    main job's claims also become this CPU model's `main_job` record (kit.numerics.cpu_records)."""
    target = RESULTS / profile
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for pattern in RECORDED:
        for path in sorted(folder.glob(pattern)):
            shutil.copy(path, target / path.name)
    if profile == MAIN_JOB:
        record_cpu(target)
        _record_rates(target)
    return target


def _record_rates(target: Path) -> None:
    """The rates the recorded main job's notebook 03 measured (from its stage records and
    parameters in `target`), for estimates made before notebook 03 runs on a machine
    (kit.experiments.timecat.sweep_cost)."""
    import yaml

    from kit.experiments.timecat import sweep_cost
    from kit.experiments.timecat.settings import TimecatSettings

    notebook = TimecatSettings.model_validate(
        yaml.safe_load((target / "03_time_concat.parameters.yaml").read_text())
    )
    where = _made_on(_provenance(target, "03_time_concat"))
    kept = sweep_cost.record_rates(target, notebook, where, target / sweep_cost.RATES)
    print(f"kept its rates in {shown(kept)}")


def record_cpu(folder: Path) -> Path:
    """Keep a finished main job's claims (`folder`: its output folder) as this CPU model's
    `main_job` record, leaving docs/results as it is: how a second CPU model is recorded."""
    summary = read_record(folder / TIME_CONCAT.summary)
    made = _provenance(folder, "03_time_concat")
    kept = cpu_records.update("main_job", cpu_records.main_job(summary, made["kit_commit"]))
    print(f"kept as this CPU model's main job in {shown(kept)}")
    return kept


def command(
    check: bool, record_args: list[str] | None = None, record_cpu_folder: Path | None = None
) -> int:
    """`python -m kit figures [--check] [--record PROFILE FOLDER] [--record-cpu FOLDER]`."""
    if record_args:
        print(f"recorded {shown(record(record_args[0], Path(record_args[1])))}")
    if record_cpu_folder:
        record_cpu(record_cpu_folder)
    pages = {}
    for page in [*sorted(DOCS.rglob("*.md")), *PAGES]:
        text = page.read_text()
        try:
            new = rendered(text, page)
        except (KeyError, FileNotFoundError) as error:
            print(f"error: {error.args[0]}", file=sys.stderr)
            return 2  # before any page is written
        if new != text:
            pages[page] = new
    stale = list(pages)
    if not check:
        for page, new in pages.items():
            write_text(page, new)
    if check and stale:
        print(
            "error: generated figures differ from their sources in "
            + ", ".join(shown(p) for p in stale)
            + f"; run `{COMMAND}`",
            file=sys.stderr,
        )
        return 1
    print(
        "every figures block matches its source"
        if check
        else f"rewrote {counted(len(stale), 'page')}"
    )
    return 0
