"""The two selection rules, `paper` and `heldout`, and the result every probe returns.

The paper's numbers (Section 5, Table 3) come from the authors' protocol, which reports the best
accuracy on the evaluation split over epochs and weight decays. That selection looks at the test
split, so every probe here reports two rules side by side:

* `paper`: best evaluation accuracy over the grid and the epochs, as the authors did;
* `heldout`: pick grid point and epoch on a held-out part of the training split, then report
  that head's evaluation accuracy once.

Both rules read the same trained heads, so their difference is the selection optimism alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

#: the selection rules, in the order of a result's `selected` rows
RULES = ("paper", "heldout")


def select(history: pl.DataFrame, group: list[str], num_classes: int) -> pl.DataFrame:
    """Apply both selection rules to a table of (grid point, epoch) evaluations. Top-5 is
    reported only with more than 10 classes, as in the paper; the chosen head's training
    accuracy is reported beside its evaluation accuracy, so the train/eval gap is visible."""
    rows = []
    for rule, column in zip(RULES, ("eval_top1", "heldout_top1")):
        best = history.sort([column, "epoch"], descending=[True, False],
                           maintain_order=True).row(0, named=True)  # ties: first grid point
        rows.append({"rule": rule, **{k: best[k] for k in group}, "epoch": best["epoch"],
                     "top1": best["eval_top1"],
                     "top5": best["eval_top5"] if num_classes > 10 else None,
                     "train_top1": best["train_top1"]})
    return pl.DataFrame(rows, schema_overrides={"top5": pl.Float64})


@dataclass
class ProbeResult:
    """Every head's accuracies per epoch, and the two rules' choices."""

    history: pl.DataFrame
    selected: pl.DataFrame

    def top1(self, rule: str) -> float:
        """The evaluation top-1 of the head the rule `rule` chose."""
        return float(self.selected.filter(pl.col("rule") == rule)["top1"][0])
