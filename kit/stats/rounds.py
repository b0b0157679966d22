"""A claim judged after a round of replicates by the group-sequential rule, and whether its cell
needs more: the bridge between kit.stats.sequential (one condition at one look) and a notebook
that trains replicates in rounds.

A cell (notebook 03's run, or one world seed and budget of notebook 04's sweep) trains its
replicates in rounds; after each round every condition of the claim is judged at the looks made
so far (`kit.stats.sequential.judge`, repeated confidence intervals), and the claim

- stops `reproduced` when every condition holds, `contradicted` when any is contradicted;
- stops `inconclusive` for `no effect of interest` when a condition could already have found
  the smallest effect of interest and did not, for `most replicates reached` at the plan's last
  look (`flagged probe cell` when a flag is what left it undecided there), for `wall budget`
  when the caller's time is spent, for `first round only` when the caller's plan makes one
  round (a wall budget of 0), or for `condition missing` when a condition cannot be computed (a
  control not run: more replicates would not help);
- otherwise continues, wanting the next round's replicate count. A condition whose look a
  flagged probe cell leaves unjudged (kit.stats.outcomes.supports) goes on too: more
  replicates narrow the flag's own interval and may clear it.

Every judged claim says how many rounds and replicates it took and why it stopped, for the
summary JSON and the verdict tables; `stopped` sets that, and the repeated intervals, into the
claim's fixed-sample outcome (kit.stats.outcomes) that the notebooks write.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kit.readout import numbers
from kit.stats import outcomes, sequential
from kit.stats.sequential import Rounds

REPRODUCED, CONTRADICTED = outcomes.REPRODUCED, outcomes.CONTRADICTED
NO_INTEREST, MOST, WALL = sequential.NO_INTEREST, "most replicates reached", "wall budget"
MISSING, CONTINUE = "condition missing", sequential.CONTINUE
FIRST, FLAGGED = "first round only", "flagged probe cell"
#: the stops of a cell that more rounds of the same plan could still decide
#: (`CellRounds.left`, `to_decide`)
HALTS = (WALL, FIRST)


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
    #: whether the plan makes several looks, so that the intervals are repeated ones
    repeated: bool = False

    @property
    def decided(self) -> bool:
        """Whether the cell takes no more replicates."""
        return self.stopped != CONTINUE

    def how(self) -> str:
        """How many rounds and replicates it took and why it stopped, in words that follow
        its status: " after 2 rounds (6 replicates)", ": most replicates reached (12 replicates,
        4 rounds)"."""
        took = f"{self.rounds} round{'s' if self.rounds > 1 else ''}"
        if self.stopped in (REPRODUCED, CONTRADICTED):
            return f" after {took} ({self.replicates} replicates)"
        return f": {self.stopped} ({self.replicates} replicates, {took})"

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
) -> tuple[sequential.Look, str] | None:
    """The condition judged at the looks `counts`, its own replicate count replacing the last
    (a failed replicate leaves it fewer), and the interval's own judgement; None when it cannot
    be judged. A judgement its flag does not let stand (outcomes.supports) becomes `continue`,
    or `inconclusive` at the last look."""
    found = condition.estimate
    if condition.missing or found.mean is None or found.spread is None:
        return None
    seen = tuple(n for n in counts[:-1] if n < found.replicates) + (found.replicates,)
    look = sequential.judge(
        found.mean, found.spread, seen, rounds, condition.margin, smallest, outcomes.METRIC_RANGE
    )
    if outcomes.supports(condition.flagged, look.judgement):
        return look, look.judgement
    last = found.replicates >= rounds.most
    return replace(look, judgement=outcomes.INCONCLUSIVE if last else CONTINUE), look.judgement


def _row(
    claim: str, condition: outcomes.Condition, judged: tuple[sequential.Look, str] | None
) -> dict:
    look, raw = judged or (None, None)
    return {
        "claim": claim,
        "condition": condition.name,
        "replicates": condition.estimate.replicates,
        "low": None if look is None else look.low,
        "high": None if look is None else look.high,
        "multiplier": None if look is None else look.critical,
        "detectable": None if look is None else look.detectable,
        "judgement": outcomes.INCONCLUSIVE if look is None else look.judgement,
        "missing": condition.missing,
        "flag": None if raw is None else outcomes.flag_words(condition, raw),
    }


def judge_round(
    claim: str,
    conditions: Sequence[outcomes.Condition],
    smallest: float,
    rounds: Rounds,
    counts: Sequence[int],
    halt: str | None = None,
) -> Round:
    """The claim after looks at `counts` replicates (increasing, one per round so far); see
    the module docstring for how it stops. `halt` (one of `HALTS`: the wall budget is spent, or
    the plan makes the first round only) stops an undecided claim for that reason."""
    counts = tuple(counts)
    found = [_look(c, counts, rounds, smallest) for c in conditions]
    rows = [_row(claim, c, look) for c, look in zip(conditions, found, strict=True)]
    judged = [look.judgement for look, _ in filter(None, found)]
    blocked = any(look.judgement != raw for look, raw in filter(None, found))
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
            stopped = FLAGGED if blocked else MOST
        else:
            stopped = halt or CONTINUE
    wanted = counts[-1] if stopped != CONTINUE else rounds.next_count(counts[-1])
    repeated = len(rounds.looks) > 1
    return Round(claim, status, stopped, len(counts), counts[-1], wanted, rows, repeated)


def stopped(found: outcomes.Outcome, judged: Round) -> outcomes.Outcome:
    """The claim `found` (judged by kit.stats.outcomes on the replicates of its last look) as
    its rounds judged it: `judged`'s status, each condition's interval, judgement (`continue`,
    where another condition stopped the claim, reads inconclusive) and detectable effect from
    its look, and the rounds, replicates and reason it stopped, on every row and in `how`."""
    looks = {row["condition"]: row for row in judged.rows}
    low_edge, high_edge = outcomes.METRIC_RANGE
    rows = []
    for row in found.rows:
        look = looks[row["condition"]]
        judgement = look["judgement"]
        rows.append(
            row
            | {key: look[key] for key in ("low", "high", "detectable", "flag")}
            | {
                "judgement": outcomes.INCONCLUSIVE if judgement == CONTINUE else judgement,
                "clipped": look["low"] is not None
                and (look["low"] == low_edge or look["high"] == high_edge),
                "rounds": judged.rounds,
                "stopped": judged.stopped,
                "repeated": judged.repeated,
            }
        )
    missing = [f"{row['condition']}: {row['missing']}" for row in rows if row["missing"]]
    missing += [
        f"{row['condition']}: {row['flag']}"
        for row in rows
        if row["flag"] and row["judgement"] == outcomes.INCONCLUSIVE
    ]
    reasons = found.reasons if judged.status == found.status or not rows else missing
    return replace(found, status=judged.status, rows=rows, reasons=reasons, how=judged.how())


@dataclass
class CellRounds:
    """One cell's rounds so far: the replicate counts of its looks and each claim's judgement,
    kept from the look that decided it (a decided claim is not judged again)."""

    counts: list[int] = field(default_factory=list)
    claims: dict[str, Round] = field(default_factory=dict)
    #: wall seconds a replicate took in the last round that trained one (the round's seconds
    #: over the replicates it added to every cell), None before
    per_replicate: float | None = None

    @property
    def decided(self) -> bool:
        """Whether every claim of the cell is decided, so that it takes no more replicates."""
        return all(found.decided for found in self.claims.values())

    @property
    def flagged(self) -> bool:
        """Whether a flagged probe cell left one of its claims undecided."""
        return any(
            row["flag"] and row["judgement"] in (CONTINUE, outcomes.INCONCLUSIVE)
            for found in self.claims.values()
            if found.status == outcomes.INCONCLUSIVE
            for row in found.rows
        )

    def records(self) -> list[dict[str, Any]]:
        """Each claim's stopping record (`Round.record`)."""
        return [found.record() for found in self.claims.values()]

    def left(self, plan: Rounds) -> tuple[int, float | None] | None:
        """For a cell stopped undecided by the wall budget or after the first round (`HALTS`):
        the replicates its plan may still add (to `most`) and the wall seconds they would take
        at this run's rate; else None."""
        if not any(found.stopped in HALTS for found in self.claims.values()):
            return None
        more = plan.most - self.counts[-1]
        return more, None if self.per_replicate is None else more * self.per_replicate


#: a resumed run fits the finished replicates' probes again before its next round (training is
#: skipped): the wall budget a continuation asks for adds this share to the rounds' own time
REFIT_SHARE = 0.25


#: what clears a flag that more replicates did not: a surer held-out choice
CLEAR_FLAG = "more held-out probe rows (the probe's heldout_fraction) make the choice surer"


def to_decide(
    cells: Mapping[Any, CellRounds],
    plan: Rounds,
    command: str,
    key: str = "rounds.wall_s",
) -> str | None:
    """What would decide the cells left undecided: for those stopped by the wall budget or
    after the first round (`HALTS`), how many, the replicates their plan may still add, the
    time that takes at this run's rate, and the one command that goes on with the same plan
    (`command` setting `key` to the wall budget it needs: finished replicates are reused, and
    the looks already made are made again, so the error rates stay the plan's); for those a
    flagged probe cell left undecided, that more replicates narrow the flag and what else
    clears it. None when no cell stopped so."""
    left = [found for cell in cells.values() if (found := cell.left(plan)) is not None]
    flagged = [cell for cell in cells.values() if cell.flagged]
    at_most = sum(
        any(found.stopped == FLAGGED for found in cell.claims.values()) for cell in flagged
    )
    clear = (
        f"{numbers.counted(len(flagged), 'undecided cell reads', 'undecided cells read')} a "
        "flagged probe cell whose bias could have made its judgement: more replicates narrow "
        f"the flag's interval, and {CLEAR_FLAG}"
        + (f" ({at_most} reached the plan's most replicates)" if at_most else "")
    )
    if not left:
        return clear if flagged else None
    more = sum(count for count, _ in left)
    first_only = any(
        found.stopped == FIRST for cell in cells.values() for found in cell.claims.values()
    )
    stopped = (
        "after the first round (this run had no wall budget for more)"
        if first_only
        else "when the wall budget ran out"
    )
    undecided = (
        f"{numbers.counted(len(left), 'cell')} undecided {stopped}; the same plan may add "
        f"{numbers.counted(more, 'more replicate', 'more replicates')} (to {plan.most} a cell)"
    )
    after = f"; {clear}" if flagged else ""
    if any(taken is None for _, taken in left):  # every run of this one was read back
        return (
            f"{undecided}, at a rate this run did not measure (it trained none of them), reusing "
            f"every finished replicate: {command} --set {key}=SECONDS{after}"
        )
    seconds = sum(taken or 0.0 for _, taken in left)
    budget = 60 * math.ceil(seconds * (1 + REFIT_SHARE) / 60)
    return (
        f"{undecided}, about {seconds / 60:.0f} min at this run's rate, reusing every finished "
        f"replicate: {command} --set {key}={budget}{after}"
    )


Key = TypeVar("Key", bound=Hashable)
#: trains and measures, for every cell still going, the replicates of its `range` (the next
#: round's: from the count of its last look to that of its next); returns whether it trained
#: anything (False: every run was finished, read back in no telling time), None if it cannot say
Step = Callable[[Mapping[Key, range]], bool | None]
#: every claim of a cell judged after the looks at `counts` replicates, with the reason no further
#: round starts (`HALTS`), if so (judge_round's `halt`)
Judge = Callable[[Key, tuple[int, ...], str | None], Sequence[Round]]


def run_rounds(
    keys: Sequence[Key],
    plan: Rounds,
    wall_s: float | None,
    step: Step[Key],
    judge: Judge[Key],
    clock: Callable[[], float] = time.monotonic,
) -> dict[Key, CellRounds]:
    """Replicates in rounds over the cells `keys`: `step` trains and measures the first round
    of every cell, `judge` judges every cell, and the next round goes to the cells not yet
    decided, until every cell is decided, `most` replicates are reached, or the next round
    would end more than `wall_s` seconds of `clock` after the first began, at the last round's
    rate a replicate (it does not start: a cell undecided stops with `wall budget`, and
    `CellRounds.left` says what its plan would still add and take; `wall_s` 0 is the first
    round only, even one replayed from finished replicates in no time). With a fixed plan
    (`Rounds.fixed`) one round is all. The rounds depend only on the measured replicates and
    the clock, so a run that resumes (its finished replicates read back) makes the same looks
    and decisions again."""
    started = clock()
    rate: float | None = None
    cells = {key: CellRounds() for key in keys}
    pending = {key: range(0, plan.first) for key in keys}
    while pending:
        began = clock()
        trained = step(pending)
        if trained is not False:  # a round read back from finished runs says nothing of the rate
            rate = (clock() - began) / sum(len(span) for span in pending.values())
        # no round starts that would end past the budget: the next adds up to `add` replicates
        # to every cell still going, at the last trained round's rate
        ahead = (rate or 0.0) * plan.add * len(pending)
        # a budget of 0 is the first round only (a replayed round may take no measurable time)
        halt = (
            None
            if wall_s is None
            else FIRST
            if wall_s == 0
            else WALL
            if clock() - started + ahead > wall_s
            else None
        )
        following = {}
        for key, span in pending.items():
            cell = cells[key]
            cell.counts.append(span.stop)
            cell.per_replicate = rate
            for found in judge(key, tuple(cell.counts), halt):
                if not (found.claim in cell.claims and cell.claims[found.claim].decided):
                    cell.claims[found.claim] = found
            if not cell.decided:
                wanted = max(found.wanted for found in cell.claims.values() if not found.decided)
                following[key] = range(span.stop, wanted)
        pending = following
    return cells
