"""A claim judged after a round of replicates by the group-sequential rule, and whether its cell
needs more: the bridge between kit.stats.sequential (one condition at one look) and a notebook
that trains replicates in rounds.

A cell (notebook 03's run, or one world seed and budget of notebook 04's sweep) trains its
replicates in rounds; after each round every condition of the claim is judged at the looks made
so far (`kit.stats.sequential.judge`, repeated confidence intervals), and the claim

- stops `reproduced` when every condition holds, `contradicted` when any is contradicted;
- stops `inconclusive` for `no effect of interest` when a condition could already have found
  the smallest effect of interest and did not, for `most replicates reached` at the plan's last
  look, for `wall budget` when the caller's time is spent, or for `condition missing` when a
  condition cannot be computed (a control not run: more replicates would not help);
- otherwise continues, wanting the next round's replicate count.

Every judged claim says how many rounds and replicates it took and why it stopped, for the
summary JSON and the verdict tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.report import outcomes
from kit.stats import sequential
from kit.stats.sequential import Rounds

REPRODUCED, CONTRADICTED = outcomes.REPRODUCED, outcomes.CONTRADICTED
NO_INTEREST, MOST, WALL = sequential.NO_INTEREST, "most replicates reached", "wall budget"
MISSING, CONTINUE = "condition missing", sequential.CONTINUE


@dataclass(frozen=True)
class Round:
    """A claim after look `rounds` (1 for the first) at `counts` replicates: its `status`, why
    it stopped (`stopped`, `continue` when it goes on), the replicates it wants next and one
    row per condition (the condition's look)."""

    claim: str
    status: str
    stopped: str
    rounds: int
    replicates: int
    wanted: int
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def decided(self) -> bool:
        """Whether the cell takes no more replicates."""
        return self.stopped != CONTINUE

    def record(self) -> dict[str, Any]:
        """The claim's stopping record for a summary JSON."""
        return {
            "claim": self.claim,
            "status": self.status,
            "stopped": self.stopped,
            "rounds": self.rounds,
            "replicates": self.replicates,
        }


def _look(
    condition: outcomes.Condition, counts: tuple[int, ...], rounds: Rounds, smallest: float
) -> sequential.Look | None:
    """The condition judged at the looks `counts`, its own replicate count replacing the last
    (a failed replicate leaves it fewer); None when it cannot be judged."""
    found = condition.estimate
    if condition.missing or found.mean is None or found.std is None:
        return None
    seen = tuple(n for n in counts[:-1] if n < found.replicates) + (found.replicates,)
    return sequential.judge(
        found.mean, found.std, seen, rounds, condition.margin, smallest, outcomes.METRIC_RANGE
    )


def _row(claim: str, condition: outcomes.Condition, look: sequential.Look | None) -> dict:
    return {
        "claim": claim,
        "condition": condition.name,
        "replicates": condition.estimate.replicates,
        "low": None if look is None else look.low,
        "high": None if look is None else look.high,
        "multiplier": None if look is None else look.critical,
        "judgement": outcomes.INCONCLUSIVE if look is None else look.judgement,
        "missing": condition.missing,
    }


def judge_round(
    claim: str,
    conditions: Sequence[outcomes.Condition],
    smallest: float,
    rounds: Rounds,
    counts: Sequence[int],
    out_of_time: bool = False,
) -> Round:
    """The claim after looks at `counts` replicates (increasing, one per round so far); see
    the module docstring for how it stops. `out_of_time` stops an undecided claim for the wall
    budget."""
    counts = tuple(counts)
    looks = [_look(c, counts, rounds, smallest) for c in conditions]
    rows = [_row(claim, c, look) for c, look in zip(conditions, looks, strict=True)]
    judged = [look.judgement for look in looks if look is not None]
    if any(j == sequential.CONTRADICTED for j in judged):
        status, stopped = CONTRADICTED, CONTRADICTED
    elif conditions and len(judged) == len(conditions) and set(judged) == {sequential.HOLDS}:
        status, stopped = REPRODUCED, REPRODUCED
    else:
        status = outcomes.INCONCLUSIVE
        if not conditions or len(judged) < len(conditions):
            stopped = MISSING
        elif NO_INTEREST in judged:
            stopped = NO_INTEREST
        elif counts[-1] >= rounds.most:
            stopped = MOST
        else:
            stopped = WALL if out_of_time else CONTINUE
    wanted = counts[-1] if stopped != CONTINUE else rounds.next_count(counts[-1])
    return Round(claim, status, stopped, len(counts), counts[-1], wanted, rows)
