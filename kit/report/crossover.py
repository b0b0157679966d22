"""One statement over a budget sweep, computed from per-cell claims: does a claim hold at every
budget, at none, or from some budget on (the crossover)?

The input is one row per cell (a world seed and a total budget) with the status of the claim
that cell's data decide (`kit.report.verdicts.claim`). A cell *helps* when its claim is
`reproduced`; an `untested` cell (one replicate, say) says nothing and is left out. Per world
seed, over its tested budgets in ascending order:

- `always`: every budget helps; `never`: none does;
- `crossover`: the budgets below some budget b do not help and b and every budget above it do;
  the crossover is reported at b, the first swept budget where the claim holds (the true one
  lies between b and the budget swept before it);
- `mixed`: anything else (helps, then stops helping): the sweep does not place a crossover.

Overall: `reproduced` (every world `always`), `not reproduced` (every world `never`), `depends on
the budget` (at least one world crosses over and none is mixed), `depends on the world` (some
worlds always, others never), `inconclusive` (a world is mixed) or `untested` (no tested cell).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

#: the per-cell status that counts as the claim holding there
HELPS = "reproduced"
UNTESTED = "untested"


@dataclass(frozen=True)
class BudgetClaim:
    """The sweep's statement: `status`, per world seed its pattern and crossover budget (None
    when it has none), `evidence` (the cells consulted, with `helps`), and `line` in words."""

    status: str
    patterns: dict[int, str]
    crossovers: dict[int, int | None]
    evidence: list[dict[str, Any]] = field(default_factory=list)
    line: str = ""


def world_pattern(budgets: list[int], helps: list[bool]) -> tuple[str, int | None]:
    """A world's pattern over its tested budgets (ascending) and its crossover budget."""
    if not helps:
        return UNTESTED, None
    if all(helps):
        return "always", None
    if not any(helps):
        return "never", None
    first = helps.index(True)
    if all(helps[first:]):
        return "crossover", budgets[first]
    return "mixed", None


def _overall(patterns: dict[int, str]) -> str:
    tested = {p for p in patterns.values() if p != UNTESTED}
    if not tested:
        return UNTESTED
    if "mixed" in tested:
        return "inconclusive"
    if tested == {"always"}:
        return "reproduced"
    if tested == {"never"}:
        return "not reproduced"
    if "crossover" in tested:
        return "depends on the budget"
    return "depends on the world"


def _world_words(world: int, pattern: str, crossover: int | None) -> str:
    words = {"always": "helps at every budget", "never": "helps at no budget (none in range)",
             "mixed": "helps at some budgets but not from one budget on",
             UNTESTED: "no tested cell"}
    text = (f"crossover at {crossover} iterations" if pattern == "crossover"
            else words[pattern])
    return f"world {world}: {text}"


def budget_claim(cells: pl.DataFrame, what: str = "the claim") -> BudgetClaim:
    """The sweep's statement from one row per cell: columns `world_seed`, `budget` and `status`
    (a per-cell claim status); other columns are kept in the evidence. `what` names the claim in
    the line. Raises ValueError when a (world seed, budget) cell appears twice."""
    if cells.select("world_seed", "budget").is_duplicated().any():
        raise ValueError("cells: each (world_seed, budget) may appear once")
    ordered = cells.sort("world_seed", "budget").with_columns(
        (pl.col("status") == HELPS).alias("helps"))
    patterns: dict[int, str] = {}
    crossovers: dict[int, int | None] = {}
    for (world,), part in ordered.group_by("world_seed", maintain_order=True):
        tested = part.filter(pl.col("status") != UNTESTED)
        patterns[world], crossovers[world] = world_pattern(tested["budget"].to_list(),
                                                           tested["helps"].to_list())
    status = _overall(patterns)
    detail = "; ".join(_world_words(w, patterns[w], crossovers[w]) for w in patterns)
    line = f"Over the budget sweep, {what}: {status} ({detail})"
    return BudgetClaim(status, patterns, crossovers, ordered.to_dicts(), line)
