"""What each recorded CPU model gave, and what the records say about a machine the kit has not
seen: one JSON file per CPU model in docs/data/cpus/.

A CPU model is its vendor, family and model number as /proc/cpuinfo gives them (the identity a
library's dispatch reads; a virtual machine's model name may hide it, as "AMD EPYC" does). Each
record holds what was measured on that model, each part with the kit's commit it ran at:
- `fingerprint`: the numerics fingerprint (`python -m kit check --numerics --record`), the hash
  of each computation's bits;
- `ci`: notebooks 03 and 04 of the `ci` profile under the reproducible numerics (the reference
  configuration of benchmarks/cpu_spread.py, or its `one-core` configuration): each Table 3
  value (top-1 %, mean over replicates) and each claim's outcome;
- `main_job`: the main job's claims (notebook 03 of the `cpu` profile): each claim's outcome and
  its primary endpoint's per-replicate values.

From them: on a recorded CPU model the reproducible numerics give that record's bits (the
spread benchmark's emulations show core count and load change nothing); across models the
values moved by the largest difference between their records, and only the outcomes every
record agrees on are expected of another machine (`Expected`). Every sentence the kit prints
about other machines comes from `statement`, so it says no more than the records show.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.files.files import write_text
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu, numerics

RECORDS = REPO_ROOT / "docs" / "data" / "cpus"
CPUINFO = Path("/proc/cpuinfo")


def identity(cpuinfo: Path = CPUINFO) -> dict[str, str]:
    """This CPU: its model name, its `cpu_id` (vendor family/model) and widest instruction set."""
    fields: dict[str, str] = {}
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("vendor_id", "cpu family", "model", "model name") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break  # the first processor's block is enough
    vendor = fields.get("vendor_id", "unknown vendor")
    return {
        "cpu": fields.get("model name", cpu.cpu_model()),
        "cpu_id": f"{vendor} {fields.get('cpu family', '?')}/{fields.get('model', '?')}",
        "cpu_isa": cpu.best_isa(),
    }


def slug(cpu_id: str) -> str:
    """A record's file name for a CPU model: `genuineintel-6-85`."""
    return "-".join(cpu_id.lower().replace("/", " ").split())


def describe(record: dict[str, Any]) -> str:
    """A CPU model in words: its model name and identity."""
    vendor, _, numbers = record["cpu_id"].partition(" ")
    family, _, model = numbers.partition("/")
    return f"{record['cpu']} ({vendor}, family {family}, model {model})"


def path_of(cpu_id: str, folder: Path | None = None) -> Path:
    return (folder or RECORDS) / f"{slug(cpu_id)}.json"


def records(folder: Path | None = None) -> list[dict[str, Any]]:
    """Every recorded CPU model's record, in the order of their file names."""
    return [json.loads(path.read_text()) for path in sorted((folder or RECORDS).glob("*.json"))]


def record_of(cpu_id: str, folder: Path | None = None) -> dict[str, Any] | None:
    path = path_of(cpu_id, folder)
    return json.loads(path.read_text()) if path.is_file() else None


def update(part: str, value: dict[str, Any], folder: Path | None = None) -> Path:
    """Keep `value` as `part` of this CPU model's record (made when new); returns its path."""
    mine = identity()
    record = record_of(mine["cpu_id"], folder) or dict(mine)
    before = record.get(part)
    if before is not None and version(before) != version(value):
        # a part made under other numerics is kept: what those numerics gave stays measured
        record.setdefault("earlier", {}).setdefault(part, {})[str(version(before))] = before
    record[part] = value
    path = path_of(mine["cpu_id"], folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record, indent=1) + "\n")
    return path


def fingerprints(folder: Path | None = None) -> list[dict[str, Any]]:
    """The recorded fingerprints, each with its CPU's identity beside it."""
    return [
        {**{k: r[k] for k in ("cpu", "cpu_id", "cpu_isa")}, **r["fingerprint"]}
        for r in records(folder)
        if "fingerprint" in r
    ]


def write_fingerprint(found: dict[str, Any], folder: Path | None = None) -> Path:
    """Keep a fingerprint (kit.cli.fingerprint) as this CPU model's."""
    return update(
        "fingerprint",
        {k: v for k, v in found.items() if k not in ("cpu", "cpu_id", "cpu_isa")},
        folder,
    )


def main_job(summary: dict[str, Any], commit: str) -> dict[str, Any]:
    """The `main_job` part of a record from notebook 03's summary: each claim's outcome, and
    each condition's per-replicate values and their mean."""
    rows = summary["verdicts"]
    return {
        "kit_commit": commit,
        "numerics": numerics.VERSION,
        "outcomes": {claim["claim"]: claim["status"] for claim in summary["claims"]},
        "values": {
            f"{row['claim']}: {row['condition']}": sum(row["values"]) / len(row["values"])
            for row in rows
            if row["values"]
        },
        "replicates": {f"{row['claim']}: {row['condition']}": row["values"] for row in rows},
    }


def half_points(value: float) -> float:
    """`value` rounded up to half a point: the bounds the tests and sentences use."""
    return math.ceil(value * 2) / 2


@dataclass(frozen=True)
class Expected:
    """What the records say a run of `part` (`ci` or `main_job`) gives on the CPU model
    `cpu_id`: its own record's values and outcomes exactly where that model was recorded under
    the current numerics (`exact`), else values within `bound` points of a current record's
    (the largest move measured between any records, or `floor` if larger) and only the
    outcomes every record agreed on."""

    cpu_id: str
    exact: bool
    values: dict[str, float]
    bound: float
    outcomes: dict[str, str]
    #: the outcomes the recorded models disagree on, by CPU model: expected of no machine
    disputed: dict[str, dict[str, str]]


def version(part: dict[str, Any]) -> int:
    """The numerics version a record's part was made under (kit.numerics.numerics.VERSION)."""
    return int(part.get("numerics", 1))


def by_model(
    part: str, folder: Path | None = None, made_under: int | None = None
) -> dict[str, dict[str, Any]]:
    """Each record's `part` by CPU model: its latest, or the one made under numerics
    `made_under` if given (a part of earlier numerics is kept under `earlier`)."""
    found = {}
    for r in records(folder):
        latest = r.get(part)
        if made_under is None or (latest is not None and version(latest) == made_under):
            chosen = latest
        else:
            chosen = r.get("earlier", {}).get(part, {}).get(str(made_under))
        if chosen is not None:
            found[r["cpu_id"]] = chosen
    return found


def versions(part: str, folder: Path | None = None) -> list[int]:
    """The numerics versions some record's `part` was made under, latest or earlier."""
    made = {version(p) for p in by_model(part, folder).values()}
    for r in records(folder):
        made |= {int(v) for v in r.get("earlier", {}).get(part, {})}
    return sorted(made)


def largest_move(
    part: str = "ci", folder: Path | None = None, made_under: int | None = None
) -> tuple[float, str | None]:
    """The largest difference of one value between two recorded CPU models (points), and its
    key (None with fewer than two records); only records of numerics `made_under` if given."""
    found = list(by_model(part, folder, made_under).values())
    moves = [
        (abs(a["values"][key] - b["values"][key]), key)
        for i, a in enumerate(found)
        for b in found[i + 1 :]
        for key in a["values"].keys() & b["values"].keys()
    ]
    return max(moves, default=(0.0, None))


def agreed_outcomes(
    part: str = "ci", folder: Path | None = None, made_under: int | None = None
) -> tuple[dict, dict]:
    """The outcomes every recorded CPU model gave alike, and the others by CPU model."""
    found = by_model(part, folder, made_under)
    keys = set().union(*(p["outcomes"] for p in found.values())) if found else set()
    agreed, disputed = {}, {}
    for key in sorted(keys):
        given = {cpu: p["outcomes"].get(key) for cpu, p in found.items()}
        if len(set(given.values())) == 1:
            agreed[key] = next(iter(given.values()))
        else:
            disputed[key] = given
    return agreed, disputed


def expected(part: str, cpu_id: str, floor: float = 0.0, folder: Path | None = None) -> Expected:
    """What a run of `part` should give on `cpu_id` (see `Expected`); `floor` is the least
    bound for a machine without a record (for instance the largest move the spread benchmark
    measured when emulating other machines)."""
    found = by_model(part, folder)
    if not found:
        raise FileNotFoundError(f"{folder or RECORDS}: no CPU record has a '{part}' part")
    agreed, disputed = agreed_outcomes(part, folder)
    own = found.get(cpu_id)
    if own is not None and version(own) == numerics.VERSION:
        return Expected(cpu_id, True, own["values"], 0.0, own["outcomes"], {})
    current = [p for p in found.values() if version(p) == numerics.VERSION]
    reference = (current or list(found.values()))[0]
    moves = [largest_move(part, folder)[0]]
    moves += [largest_move(part, folder, v)[0] for v in versions(part, folder)]
    bound = half_points(max(*moves, floor))
    return Expected(cpu_id, False, reference["values"], bound, agreed, disputed)


def one_model(spread: Path | None = None) -> str:
    """What the spread benchmark showed on one CPU model, in a clause."""
    path = spread or numerics.SPREAD_RECORD
    if not path.is_file():
        return "no configuration of one CPU model compared (benchmarks/cpu_spread.py)"
    record = json.loads(path.read_text())
    same = record["spread"]["identical_within_mode"].get(numerics.REPRODUCIBLE)
    runs = [r for r in record["runs"].values() if r["mode"] == numerics.REPRODUCIBLE]
    return (
        f"{'the same bits' if same else 'different bits'} in each of {len(runs)} configurations "
        f"of one {record['machine']} (cores, threads, instruction-set caps, load; "
        "benchmarks/cpu_spread.py"
        + (", under earlier numerics)" if record.get("numerics") != numerics.VERSION else ")")
    )


#: benchmarks/emulated_cpus.py's output: the fingerprint under QEMU's emulation of other CPUs
EMULATED = RECORDS.parent / "emulated_cpus.json"


def _across(found: dict[str, dict[str, Any]], folder: Path | None, made_under: int) -> str:
    """How far the ci values (and the main job's claims) moved between the records `found`."""
    names = " and ".join(describe(r) for r in records(folder) if r["cpu_id"] in found)
    move, key = largest_move("ci", folder, made_under)
    commits = ", ".join(sorted({p["kit_commit"][:7] for p in found.values()}))
    text = (
        f"across {names} the ci profile's values moved by up to {move:.2f} points ({key}; "
        f"kit {commits})"
        if move
        else f"across {names} the ci profile's values were the same (kit {commits})"
    )
    jobs = by_model("main_job", folder, made_under)
    if len(jobs) >= 2:
        agreed, disputed = agreed_outcomes("main_job", folder, made_under)
        said = ", ".join(f"{claim} {status}" for claim, status in agreed.items())
        moved, where = replicate_move(folder, made_under)
        if moved is not None:  # records made before replicates were kept have no such values
            text += (
                f"; the main job's values per replicate moved by up to {moved:.2f} points ({where})"
                if moved
                else "; the main job's values per replicate were the same"
            )
        claims = "its claims" if moved is not None else "the main job's claims"
        text += (
            f" and {claims} came out the same ({said})"
            if not disputed
            else f" and {claims} differed ({', '.join(disputed)})"
        )
    return text


def replicate_move(
    folder: Path | None = None, made_under: int | None = None
) -> tuple[float | None, str | None]:
    """The largest difference of one replicate's value of the main job's endpoints between two
    recorded CPU models (points) and where it was; (None, None) if fewer than two records hold
    replicates."""
    parts = by_model("main_job", folder, made_under).values()
    found: list[dict[str, list[float]]] = [p["replicates"] for p in parts if p.get("replicates")]
    if len(found) < 2:
        return None, None
    moves = [
        (abs(x - y), f"{key}, replicate {i}")
        for n, a in enumerate(found)
        for b in found[n + 1 :]
        for key in a.keys() & b.keys()
        for i, (x, y) in enumerate(zip(a[key], b[key], strict=False))
    ]
    return max(moves, default=(0.0, None))


def emulated(path: Path | None = None) -> str | None:
    """What the fingerprint gave under emulated CPUs, in a clause (None when not measured)."""
    path = path or EMULATED
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record.get("numerics") != numerics.VERSION:
        return None
    same = [name for name, result in record["emulated"].items() if not result["differ"]]
    differ = [name for name, result in record["emulated"].items() if result["differ"]]
    return (
        f"under QEMU's emulation of {', '.join(same + differ)} (benchmarks/emulated_cpus.py, "
        f"kit {record['kit_commit'][:7]}) "
        + (
            f"every one of the {record['operations']} fingerprint operations gave the bits of "
            f"the {record['machine']} it ran on"
            if not differ
            else f"operations differed under {', '.join(differ)}"
        )
    )


def statement(folder: Path | None = None, spread: Path | None = None) -> str:
    """What another machine changes in the reproducible numerics, in one sentence, from the
    records alone: the same CPU model under other settings (the spread benchmark), across the
    recorded models under the current numerics, under emulated CPUs, and what records made
    under earlier numerics showed."""
    parts = [one_model(spread)]
    current = by_model("ci", folder, numerics.VERSION)
    if len(current) >= 2:
        parts.append(_across(current, folder, numerics.VERSION))
    else:
        parts.append("no second CPU model has been recorded under these numerics")
    clause = emulated()
    if clause:
        parts.append(clause)
    for older in [v for v in versions("ci", folder) if v != numerics.VERSION]:
        found = by_model("ci", folder, older)
        if len(found) >= 2:
            said = numerics.EARLIER.get(older, f"under numerics version {older}")
            parts.append(f"{said}, {_across(found, folder, older)}")
    return "; ".join(parts)


def brief(folder: Path | None = None) -> str:
    """`statement` in a few words, for the "What ran" lines (the whole of it is in provenance
    and docs/reproducibility.md)."""
    current = by_model("ci", folder, numerics.VERSION)
    if len(current) >= 2:
        move, _ = largest_move("ci", folder, numerics.VERSION)
        other = (
            f"values moved by up to {move:.2f} points across {len(current)} recorded models"
            if move
            else f"the ci profile's values the same on {len(current)} recorded models"
        )
        moved, _ = replicate_move(folder, numerics.VERSION)
        if moved is not None:
            other += (
                f", the main job's moved by up to {moved:.2f} points a replicate"
                if moved
                else ", the main job's too"
            )
    else:
        other = "none recorded yet under these numerics"
        if emulated():
            other += ", same bits under emulated ones"
        earlier = []
        for v in [v for v in versions("ci", folder) if v < numerics.VERSION]:
            move, _ = largest_move("ci", folder, v)
            count = len(by_model("ci", folder, v))
            if move:
                earlier.append(f"{numerics.EARLIER[v]}: up to {move:.2f} points")
            elif count >= 2:
                earlier.append(f"{numerics.EARLIER[v]}: the same values on {count} models")
        if earlier:
            other += f" ({'; '.join(earlier)})"
    return f"same bits on one CPU model at any core count or load; other CPU models: {other}"


def expected_elsewhere(
    spread: Path | None = None, folder: Path | None = None, short: bool = False
) -> str:
    """What another machine, core count or load would change for this process's numerics mode,
    in one sentence for provenance (and, `short`, for the "What ran" lines): `statement` (or
    `brief`) in the reproducible mode; in the fast mode, how far the spread benchmark's fast
    configurations moved the ci profile's values on the machine it ran on."""
    if numerics.mode() == numerics.REPRODUCIBLE:
        return brief(folder) if short else statement(folder, spread)
    path = spread or numerics.SPREAD_RECORD
    if not path.is_file():
        return "no spread recorded for the fast mode (benchmarks/cpu_spread.py)"
    record = json.loads(path.read_text())
    move = record["spread"]["largest_move"].get(numerics.FAST, 0.0)
    changed = not record["spread"]["same_outcomes"].get(numerics.FAST, True)
    return (
        f"in the fast mode the ci profile's values moved by up to {half_points(move):g} points "
        f"between configurations emulated on one {record['machine']}"
        + (", and some verdicts changed" if changed else ", with the same verdicts")
    )
