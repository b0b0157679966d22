"""The `rounds` block of a notebook's parameters: replicates trained in rounds and judged after
each by the group-sequential rule (`kit.stats.sequential`), up to a stated most and wall time."""

from __future__ import annotations

from pydantic import Field, model_validator

from kit.params import bounds
from kit.params.params import Strict
from kit.stats.sequential import Rounds
from kit.stats.spending import OBRIEN_FLEMING


class RoundsSettings(Strict):
    """Replicates in rounds (docs: Replicates in rounds): `first` replicates per cell, then `add`
    more per round to every cell not yet decided, up to `most`; each claim is judged after every
    round on repeated confidence intervals (alpha `spending`), so the verdicts keep their error
    rates despite the repeated looks. Absent: the fixed design of `replicates`."""

    #: replicates of the first round (at least 2: one replicate has no spread)
    first: int = Field(default=3, ge=2, le=bounds.REPLICATES)
    #: replicates each further round adds to a cell not yet decided
    add: int = Field(default=3, ge=1, le=bounds.REPLICATES)
    #: the most replicates a cell takes: undecided there, its claim is inconclusive
    most: int = Field(default=12, ge=2, le=bounds.REPLICATES)
    #: seconds of wall time within which rounds run: no round starts that would end later (at the
    #: last round's rate), and a cell undecided then stops for the wall budget (a later run of
    #: the notebook continues its rounds); 0: the first round only, whatever the machine's speed
    wall_s: float = Field(ge=0.0, le=bounds.SECONDS)
    #: the alpha-spending function of the repeated intervals: `obrien-fleming` (spends little
    #: early, the last interval barely wider than a fixed design's) or `pocock` (stops earlier,
    #: wider last interval)
    spending: str = OBRIEN_FLEMING
    #: stop a cell early with `no effect of interest` when a look could already have found the
    #: smallest effect of interest with probability 0.9 and did not
    futility: bool = True

    @model_validator(mode="after")
    def _a_plan(self) -> RoundsSettings:
        self.design()  # Rounds refuses a most below first or an unknown spending, naming them
        return self

    def design(self) -> Rounds:
        """The plan of looks these settings make."""
        return Rounds(
            self.first, self.add, self.most, spending=self.spending, futility=self.futility
        )


def design(rounds: RoundsSettings | None, replicates: int) -> Rounds:
    """The plan of looks of a notebook: its rounds, or one look at `replicates` (fixed)."""
    return Rounds.fixed(replicates) if rounds is None else rounds.design()
