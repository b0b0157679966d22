"""One statement over a budget sweep, computed from the cells' three-way outcomes: does the claim
hold at every budget, at none, or from some budget on (the crossover)?

The input is one row per cell (a world seed and a total budget) with the outcome of the claim
that cell's data decide (`kit.stats.outcomes`): `reproduced`, `contradicted` or `inconclusive`.
Per world seed, over its budgets in ascending order:

- `one budget`: a single budget cannot place a crossover, and says neither "always" nor "never";
- `always`: every budget reproduced; `never`: every budget contradicted;
- `crossover`: every reproduced cell lies above every contradicted one, the reproduced cells run
  to the largest budget, and at least one cell of each kind exists: the crossover lies between
  the largest contradicted budget and the smallest reproduced one (cells between them are
  inconclusive), and is stated as that interval;
- `from`: reproduced from some budget to the largest, inconclusive below it: the crossover is at
  or below that budget, but no budget was shown not to help;
- `mixed`: a reproduced cell below a contradicted one (helps, then stops);
- `inconclusive`: anything else (inconclusive cells where the pattern needs a decided one).

Overall: `untested (one budget)` when every world has one budget, `reproduced` (every world
`always`), `contradicted` (every world `never`), `depends on the budget` (a world crosses over and
every other world is `always`, `never` or crosses over), `depends on the world` (some worlds always,
others never), and `inconclusive` whenever a world is `from`, `mixed` or `inconclusive`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from kit.stats.outcomes import CONTRADICTED, REPRODUCED

ONE_BUDGET = "untested (one budget)"


@dataclass(frozen=True)
class BudgetClaim:
    """The sweep's statement: `status`, per world seed its pattern and crossover interval (the
    largest budget shown not to help, the smallest from which it helps; None when there is
    none), `evidence` (the cells consulted) and `line` in words."""

    status: str
    patterns: dict[int, str]
    crossovers: dict[int, tuple[int | None, int] | None]
    evidence: list[dict[str, Any]] = field(default_factory=list)
    line: str = ""


def world_pattern(
    budgets: list[int], statuses: list[str]
) -> tuple[str, tuple[int | None, int] | None]:
    """A world's pattern over its budgets (ascending) and its crossover interval."""
    if len(budgets) < 2:
        return "one budget", None
    helps = [s == REPRODUCED for s in statuses]
    fails = [s == CONTRADICTED for s in statuses]
    if all(helps):
        return "always", None
    if all(fails):
        return "never", None
    if any(helps) and any(fails):
        first = helps.index(True)
        last_fail = max(i for i, f in enumerate(fails) if f)
        if last_fail > first:
            return "mixed", None
    if not any(helps):
        return "inconclusive", None
    first = helps.index(True)
    if not all(helps[first:]):
        return "inconclusive", None
    below = [budgets[i] for i in range(first) if fails[i]]
    if below:
        return "crossover", (max(below), budgets[first])
    return "from", (None, budgets[first])


def _overall(patterns: dict[int, str]) -> str:
    found = set(patterns.values())
    if not found or found == {"one budget"}:
        return ONE_BUDGET
    if found & {"from", "mixed", "inconclusive", "one budget"}:
        return "inconclusive"
    if found == {"always"}:
        return REPRODUCED
    if found == {"never"}:
        return CONTRADICTED
    if "crossover" in found:
        return "depends on the budget"
    return "depends on the world"


def _world_words(
    world: int, pattern: str, crossover: tuple[int | None, int] | None, cells: list[dict[str, Any]]
) -> str:
    listed = ", ".join(f"{c['budget']} {c['status']}" for c in cells)
    if pattern == "crossover" and crossover is not None:
        text = (
            f"crossover between {crossover[0]} and {crossover[1]} iterations "
            f"(contradicted at {crossover[0]}, reproduced from {crossover[1]} on)"
        )
    elif pattern == "from" and crossover is not None:
        text = (
            f"reproduced from {crossover[1]} iterations on, inconclusive below (the "
            f"crossover is at or below {crossover[1]})"
        )
    else:
        text = {
            "one budget": f"one budget ({listed}): a crossover needs two",
            "always": "reproduced at every budget",
            "never": "contradicted at every budget (no crossover in range)",
            "mixed": f"reproduced, then contradicted at a larger budget ({listed})",
            "inconclusive": f"inconclusive ({listed})",
        }[pattern]
    return f"world {world}: {text}"


def budget_claim(cells: pl.DataFrame, what: str = "the claim") -> BudgetClaim:
    """The sweep's statement from one row per cell: columns `world_seed`, `budget` and `status`
    (a cell's outcome); other columns are kept in the evidence. `what` names the claim in the
    line. Raises ValueError when a (world seed, budget) cell appears twice."""
    if cells.select("world_seed", "budget").is_duplicated().any():
        raise ValueError("cells: each (world_seed, budget) may appear once")
    ordered = cells.sort("world_seed", "budget")
    patterns: dict[int, str] = {}
    crossovers: dict[int, tuple[int | None, int] | None] = {}
    words = []
    for (world,), part in ordered.group_by("world_seed", maintain_order=True):
        patterns[world], crossovers[world] = world_pattern(
            part["budget"].to_list(), part["status"].to_list()
        )
        words.append(
            _world_words(
                world,
                patterns[world],
                crossovers[world],
                part.select("budget", "status").to_dicts(),
            )
        )
    status = _overall(patterns)
    line = f"Over the budget sweep, {what}: {status} ({'; '.join(words)})"
    return BudgetClaim(status, patterns, crossovers, ordered.to_dicts(), line)
