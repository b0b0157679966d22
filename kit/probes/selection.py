"""The selection rules, `paper`, `heldout` and `bounded`, and the result every probe returns.

The paper's numbers (Section 5.1, Table 3) come from the authors' protocol, which reports the best
accuracy on the evaluation split over epochs and weight decays. That selection looks at the test
split, so every probe here reports two rules side by side:

* `paper`: best evaluation accuracy over the grid and the epochs, as the authors did;
* `heldout`: pick grid point and epoch on a held-out part of the training split, then report
  that head's evaluation accuracy once.

Both rules read the same trained heads, so their difference is the selection optimism alone.
A feature probe given `max_gap` reports a third rule:

* `bounded`: as `heldout`, among the heads whose top-1 on their own fit rows exceeds their
  held-out top-1 by at most `max_gap` points (the head with the smallest such gap when none
  does). It chooses the regularisation on training rows alone, so that the held-out choice,
  not the number of rows per feature, sets how far a head fits its rows (docs: Probes).

A feature probe given extra evaluation splits (ImageNet's shifted test sets) scores every head
on each of them too, in the history column `extra_column(name)`; the rules never read those
columns, and report them for the head they chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

#: the selection rules every probe reports, in the order of a result's `selected` rows
RULES = ("paper", "heldout")
#: the rule a feature probe given `max_gap` reports after them
BOUNDED = "bounded"
#: how the columns of extra evaluation splits begin
EXTRA = "extra_"


def extra_column(name: str) -> str:
    """The history's (and the selected rows') column of the top-1 on the extra split `name`."""
    return f"{EXTRA}{name}_top1"


def extra_name(column: str) -> str:
    """The name of the extra split whose `extra_column` is `column`."""
    return column.removeprefix(EXTRA).removesuffix("_top1")


def select(
    history: pl.DataFrame, group: list[str], num_classes: int, max_gap: float | None = None
) -> pl.DataFrame:
    """Apply the selection rules to a table of (grid point, epoch) evaluations: `paper` and
    `heldout`, and `bounded` when `max_gap` (points) is given. Top-5 is reported only with more
    than 10 classes, as in the paper; the chosen head's training accuracy is reported beside
    its evaluation accuracy, so the train/eval gap is visible; the chosen head's top-1 on each
    extra evaluation split follows, in its `extra_column`."""
    extra = [column for column in history.columns if column.startswith(EXTRA)]
    chosen = [
        (rule, _best(history, column))
        for rule, column in zip(RULES, ("eval_top1", "heldout_top1"), strict=True)
    ]
    if max_gap is not None:
        gap = (pl.col("train_top1") - pl.col("heldout_top1")) * 100
        within = history.filter(gap <= max_gap)
        chosen.append(
            (
                BOUNDED,
                _best(
                    within if within.height else history.sort(gap, maintain_order=True).head(1),
                    "heldout_top1",
                ),
            )
        )
    return pl.DataFrame(
        [
            {
                "rule": rule,
                **{k: best[k] for k in group},
                "epoch": best["epoch"],
                "top1": best["eval_top1"],
                "top5": best["eval_top5"] if num_classes > 10 else None,
                "train_top1": best["train_top1"],
                "heldout_top1": best["heldout_top1"],
                **{column: best[column] for column in extra},
            }
            for rule, best in chosen
        ],
        schema_overrides={"top5": pl.Float64},
    )


def _best(history: pl.DataFrame, column: str) -> dict[str, Any]:
    """The row with the highest `column`; ties go to the earlier epoch, then the first grid
    point."""
    return history.sort([column, "epoch"], descending=[True, False], maintain_order=True).row(
        0, named=True
    )


@dataclass
class ProbeResult:
    """Every head's accuracies per epoch, and the rules' choices."""

    history: pl.DataFrame
    selected: pl.DataFrame

    def top1(self, rule: str) -> float:
        """The evaluation top-1 of the head the rule `rule` chose."""
        return float(self.selected.filter(pl.col("rule") == rule)["top1"][0])
