"""The ci profile's pinned results, read from the CPU records (kit.numerics.cpu_records) rather than
typed: on a recorded CPU model its own values bit for bit and its outcomes exactly; on any other
machine each value within the largest move measured (across the recorded models, and across the
configurations benchmarks/cpu_spread.py emulated on one machine) and only the outcomes every
recorded model gave alike (docs/reproducibility.md, "What the tests pin")."""

from __future__ import annotations

import json

from kit.numerics import cpu_records, numerics

SPREAD = json.loads(numerics.SPREAD_RECORD.read_text())


def floor() -> float:
    """The largest move of any value between the spread benchmark's configurations."""
    return max(SPREAD["spread"]["largest_move"].values())


def expected(cpu_id: str | None = None) -> cpu_records.Expected:
    """What a ci run should give on `cpu_id` (this machine's when None)."""
    return cpu_records.expected("ci", cpu_id or cpu_records.identity()["cpu_id"], floor())


def problems(
    values: dict[str, float], outcomes: dict[str, str], expect: cpu_records.Expected
) -> list[str]:
    """Where a run's `values` and `outcomes` (keys as in the records: "03 cat1 mixture",
    "04 budget 40") leave what `expect` allows; empty when they hold."""
    found = []
    for key, value in values.items():
        pinned = expect.values.get(key)
        if pinned is None:
            found.append(f"{key}: not in the records")
        elif expect.exact and value != pinned:
            found.append(f"{key}: {value!r}, recorded on this CPU model {pinned!r}")
        elif abs(value - pinned) > expect.bound:
            found.append(f"{key}: {value:.2f}, more than {expect.bound} from {pinned:.2f}")
    for key, outcome in outcomes.items():
        pinned_outcome = expect.outcomes.get(key)
        if pinned_outcome is not None and outcome != pinned_outcome:
            found.append(f"{key}: {outcome}, pinned {pinned_outcome}")
        if outcome not in ("reproduced", "contradicted", "inconclusive", "depends on the budget"):
            found.append(f"{key}: {outcome} is no outcome")
    return found
