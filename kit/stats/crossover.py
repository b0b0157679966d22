"""One statement over a budget sweep, computed from the cells' three-way outcomes: does the claim
hold at every budget, at none, or from some budget on (the crossover)? A sentence claims no more
than its decided cells (`reproduced` or `contradicted`); an `inconclusive` cell is named as
undecided and never stands for either.

The input is one row per cell (a world seed and a total budget) with the outcome of the claim
that cell's data decide (`kit.stats.outcomes`). Per world seed, over its budgets in ascending
order (`world_pattern`):

- `one budget`: a single budget cannot place a crossover, and says neither "always" nor "never";
- `always`: every budget reproduced; `never`: every budget contradicted;
- `crossover`: a contradicted (no-gain) cell below a reproduced one, and every contradicted cell
  below every reproduced one: the crossover lies between the largest contradicted budget and
  the smallest reproduced one, and is stated as that interval; undecided cells are named;
- `mixed`: a reproduced cell below a contradicted one (helps, then stops);
- `reproduced where decided` / `contradicted where decided`: the decided cells agree but some
  are undecided: no crossover was seen in the range, and the line names the budgets of each
  (a run of reproduced budgets up to the largest one run reads "from B to the largest budget
  run", never "from B on");
- `inconclusive`: no cell decided.

Overall: `untested (one budget)` when every world has one budget, `reproduced` (every world
`always`), `contradicted` (every world `never`), `depends on the budget` (a world crosses over and
every other world is `always`, `never` or crosses over), `depends on the world` (some worlds always,
others never), and `inconclusive` whenever a world is mixed, undecided in part or in whole.
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


ONE, ALWAYS, NEVER, CROSSOVER, MIXED = "one budget", "always", "never", "crossover", "mixed"
HELPS_WHERE_DECIDED, FAILS_WHERE_DECIDED = "reproduced where decided", "contradicted where decided"
UNDECIDED = "inconclusive"


def world_pattern(
    budgets: list[int], statuses: list[str]
) -> tuple[str, tuple[int | None, int] | None]:
    """A world's pattern over its budgets (ascending) and its crossover interval: the largest
    budget shown not to help and the smallest shown to help, only where both were decided."""
    if len(budgets) < 2:
        return ONE, None
    helps = [b for b, s in zip(budgets, statuses, strict=True) if s == REPRODUCED]
    fails = [b for b, s in zip(budgets, statuses, strict=True) if s == CONTRADICTED]
    if len(helps) == len(budgets):
        return ALWAYS, None
    if len(fails) == len(budgets):
        return NEVER, None
    if helps and fails:
        if max(fails) > min(helps):
            return MIXED, None
        return CROSSOVER, (max(fails), min(helps))
    if helps:
        return HELPS_WHERE_DECIDED, None
    if fails:
        return FAILS_WHERE_DECIDED, None
    return UNDECIDED, None


def _overall(patterns: dict[int, str]) -> str:
    found = set(patterns.values())
    if not found or found == {ONE}:
        return ONE_BUDGET
    if found - {ALWAYS, NEVER, CROSSOVER}:
        return "inconclusive"
    if found == {ALWAYS}:
        return REPRODUCED
    if found == {NEVER}:
        return CONTRADICTED
    if CROSSOVER in found:
        return "depends on the budget"
    return "depends on the world"


def _budgets(values: list[int]) -> str:
    """`60`, `60 and 120`, `60, 120 and 240`."""
    shown = [f"{v:,}" for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def _where(status: str, chosen: list[int], budgets: list[int]) -> str:
    """Where a world's cells were `status`, over the budgets that were run: a run of budgets
    that reaches the largest one run reads "from B to L, the largest budget run"."""
    largest, tail = budgets[-1], budgets[budgets.index(chosen[0]) :]
    if chosen == [largest]:
        return f"{status} at {largest:,}, the largest budget run"
    if len(chosen) > 1 and chosen == tail:
        return f"{status} from {chosen[0]:,} to {largest:,}, the largest budget run"
    return f"{status} at {_budgets(chosen)}"


def _world_words(
    world: int, pattern: str, crossover: tuple[int | None, int] | None, cells: list[dict[str, Any]]
) -> str:
    budgets = [c["budget"] for c in cells]
    by = {s: [c["budget"] for c in cells if c["status"] == s] for s in (REPRODUCED, CONTRADICTED)}
    open_ = [c["budget"] for c in cells if c["status"] not in (REPRODUCED, CONTRADICTED)]
    undecided = f"; undecided at {_budgets(open_)}" if open_ else ""
    span = f"between {budgets[0]:,} and {budgets[-1]:,} iterations"
    decided = "; ".join(_where(s, by[s], budgets) for s in (CONTRADICTED, REPRODUCED) if by[s])
    if pattern == CROSSOVER and crossover is not None:
        text = (
            f"crossover between {crossover[0]:,} and {crossover[1]:,} iterations "
            f"({decided}{undecided})"
        )
    elif pattern in (HELPS_WHERE_DECIDED, FAILS_WHERE_DECIDED):
        shown = "not to help" if pattern == HELPS_WHERE_DECIDED else "to help"
        text = f"{decided}{undecided}: no budget was shown {shown}, so no crossover was seen {span}"
    else:
        listed = ", ".join(f"{c['budget']:,} {c['status']}" for c in cells)
        text = {
            ONE: f"one budget ({listed}): a crossover needs two",
            ALWAYS: f"reproduced at every budget run, from {budgets[0]:,} to {budgets[-1]:,}",
            NEVER: (
                f"contradicted at every budget run, from {budgets[0]:,} to {budgets[-1]:,}: no "
                "crossover in the range"
            ),
            MIXED: f"reproduced, then contradicted at a larger budget ({decided}{undecided})",
            UNDECIDED: f"no budget decided ({listed})",
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
