"""ImageNet's distribution-shift test sets as extra evaluation sets of notebook 03's ImageNet-1k
task (no torch): the settings that name them, their checks, and the table of their scores.

A task whose classes are ImageNet-1k's may list `extra_evals` (ImageNet-V2, -R, -Sketch, -A: the
kinds of `kit.data.kinds.imagenet_shifts`). The probe fitted on the task is not refitted: the
head each selection rule chose is scored on every extra set too (`kit.probes.selection`), on
features extracted through the task's own cache, so the table below asks whether catN's gain on
ImageNet-1k survives a shift of the images while the classes stay the same.
"""

from __future__ import annotations

import polars as pl
from pydantic import Field, field_validator

from kit.data import kinds
from kit.data.kinds.imagenet_shifts import ShiftedImageNetKind
from kit.data.settings import DataSettings
from kit.files.paths import SAFE_NAME
from kit.params.params import Strict
from kit.probes.selection import EXTRA, extra_name
from kit.report import tables


def shifted_kinds() -> list[str]:
    """The dataset kinds an extra evaluation set may be."""
    return [name for name in kinds.KINDS if isinstance(kinds.get(name), ShiftedImageNetKind)]


class ExtraEval(Strict):
    """An extra evaluation set of an ImageNet-1k task: `data` of one of ImageNet's shifted test
    sets (its kind says which), reported under `name`."""

    name: str = Field(min_length=1, pattern=SAFE_NAME)
    data: DataSettings

    @field_validator("data")
    @classmethod
    def _shifted(cls, data: DataSettings) -> DataSettings:
        if data.kind not in shifted_kinds():
            raise ValueError(
                f"kind {data.kind} is not one of ImageNet's shifted evaluation sets "
                f"({', '.join(shifted_kinds())})"
            )
        return data


def check_host(task: str, extra: list[ExtraEval], data: DataSettings, classes: int) -> None:
    """Refuse extra evaluation sets on a task whose classes are not ImageNet-1k's, or two of
    one name (ValueError naming the key)."""
    if not extra:
        return
    where = f"tasks: {task}: extra_evals"
    thousand = ShiftedImageNetKind.num_classes
    if kinds.get(data.kind).probe_grid != "imagenet" or classes != thousand:
        raise ValueError(
            f"{where} are labelled with ImageNet-1k's {thousand} classes, but the task reads "
            f"{data.kind} with {classes} classes: name them on the ImageNet-1k task"
        )
    names = [entry.name for entry in extra]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: names must be unique, got {names}")


def shift_table(results: pl.DataFrame, rule: str) -> pl.DataFrame | None:
    """Each variant's top-1 % on the tasks that have extra evaluation sets and, for the same
    heads, on each of those sets: mean and std over replicates ('<task> mean', '<set> mean', ...);
    None when no task has one."""
    columns = [column for column in results.columns if column.startswith(EXTRA)]
    chosen = results.filter(pl.col("rule") == rule)
    if columns:
        chosen = chosen.filter(pl.any_horizontal(pl.col(columns).is_not_null()))
    if not columns or not chosen.height:
        return None
    long = pl.concat(
        [
            chosen.select("variant", pl.col("task").alias("set"), "top1"),
            *[
                chosen.select("variant", pl.lit(name).alias("set"), pl.col(column).alias("top1"))
                for column, name in ((c, extra_name(c)) for c in columns)
            ],
        ]
    ).drop_nulls("top1")
    stats = long.group_by("variant", "set", maintain_order=True).agg(
        (100 * pl.col("top1").mean()).alias("mean"), (100 * pl.col("top1").std()).alias("std")
    )
    return tables.wide_mean_std(stats, ["variant"], "set")
