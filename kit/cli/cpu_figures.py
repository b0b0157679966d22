"""The figures blocks about CPU models, from their records (docs/data/cpus,
kit.numerics.cpu_records): what another machine changes, in a sentence (docs) and in a few words
(README), and a table of every recorded model with the ci values that moved between models recorded
under the same numerics. `python -m kit figures` (kit.cli.figures) writes them into the pages."""

from __future__ import annotations

from typing import Any

from kit.numerics import cpu_records, numerics


def cross_machine() -> str:
    """What another machine changes, in one sentence from the CPU records (docs)."""
    return f"Measured so far: {cpu_records.statement()}.\n"


def cross_machine_brief() -> str:
    """`cross_machine` in a few words, for README (the whole sentence is in the docs)."""
    return (
        f"Measured so far: {cpu_records.brief()} (each model and what moved: "
        "[Across CPU models](docs/reproducibility.md#across-cpu-models)).\n"
    )


def cpu_models() -> str:
    """Every recorded CPU model and what it gave, and the ci values that moved between them."""
    found = cpu_records.records()
    lines = [
        "| CPU model | fingerprint (kit, numerics) | ci profile's claims (kit, numerics) "
        "| main job's claims (kit, numerics) |",
        "|---|---|---|---|",
    ]

    def part(record: dict[str, Any], name: str) -> str:
        if name not in record:
            return "not recorded"
        made = f"{record[name]['kit_commit'][:7]}, v{cpu_records.version(record[name])}"
        if name == "fingerprint":
            count = sum(len(ops) for ops in record[name]["ops"].values())
            return f"{count} operations ({made})"
        said = ", ".join(f"{k} {v}" for k, v in record[name]["outcomes"].items())
        return f"{said} ({made})"

    for record in found:
        lines.append(
            f"| {cpu_records.describe(record)} | {part(record, 'fingerprint')} | "
            f"{part(record, 'ci')} | {part(record, 'main_job')} |"
        )
    for made_under in cpu_records.versions("ci"):
        lines += _ci_moves(made_under)
    return "\n".join(lines) + "\n"


def _ci_moves(made_under: int) -> list[str]:
    """The ci values that differ between the records made under numerics `made_under` (only
    records of one version are compared: another version changed the arithmetic)."""
    found = cpu_records.by_model("ci", made_under=made_under)
    if len(found) < 2:
        return []
    named = {r["cpu_id"]: cpu_records.describe(r) for r in cpu_records.records()}
    ci = list(found.values())
    keys = [k for k in ci[0]["values"] if all(k in p["values"] for p in ci)]
    moved = [k for k in keys if len({p["values"][k] for p in ci}) > 1]
    when = (
        "under the current numerics"
        if made_under == numerics.VERSION
        else numerics.EARLIER.get(made_under, f"under numerics version {made_under}")
    )
    names = " and ".join(named[cpu] for cpu in found)
    if not moved:
        return [
            "",
            f"{when[:1].upper() + when[1:]}, all {len(keys)} of the ci profile's Table 3 values "
            f"are the same on {names}.",
        ]
    lines = [
        "",
        f"{when[:1].upper() + when[1:]}, {len(moved)} of the ci profile's {len(keys)} Table 3 "
        f"values differ between {names} (top-1 %):",
        "",
        "| value | "
        + " | ".join(f"{named[cpu].split(' (')[0]} ({cpu})" for cpu in found)
        + " | move |",
        "|---|" + "---|" * (len(ci) + 1),
    ]
    for key in moved:
        values = [p["values"][key] for p in ci]
        lines.append(
            f"| {key} | "
            + " | ".join(f"{v:.2f}" for v in values)
            + f" | {max(values) - min(values):.2f} |"
        )
    return lines
