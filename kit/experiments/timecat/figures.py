"""The time-concat experiment's charts: training curves, accuracy per task, in- vs
out-of-distribution, and sample images of the synthetic world."""

from __future__ import annotations

import base64
import io
import re

import altair as alt
import polars as pl
import torch
from PIL import Image

from kit.data.synthetic import SyntheticWorld
from kit.experiments.timecat.comparisons import variant_order
from kit.experiments.timecat.settings import TimecatSettings
from kit.readout.numbers import POINTS
from kit.report import charts, labels, palette

#: tooltips of a top-1 %: one decimal (kit.readout.numbers)
PERCENT = dict.fromkeys(["mean", "std", "low", "high"], POINTS)
#: panels in a row of a faceted chart before it wraps (each is 150 px plus room for its labels)
FACET_COLUMNS = 3


def training_chart(curves: pl.DataFrame) -> alt.Chart | alt.FacetChart:
    """Training loss of every run (folders `.../rep<r>/<variant>/seed<s>`): one panel per
    variant, its lines in the variant's colour, each run named by its tooltip."""
    trained = curves.filter(pl.col("loss").is_not_null())
    named = trained.with_columns(
        pl.col("run")
        .str.replace_all("\\", "/", literal=True)
        .str.extract(r"/rep\d+/([^/]+)/")
        .alias("variant"),
        pl.Series("run", [_run_words(name) for name in charts.short_names(trained["run"])]),
    )
    named = labels.readable(named)
    return charts.series_lines(
        named,
        "step",
        "loss",
        "run",
        facet="variant",
        x_title="training step",
        y_title="training loss",
        color_by="variant",
    )


def _run_words(name: str) -> str:
    """A run's folder as its tooltip names it: 'rep0/direct-shape/seed0' as 'replicate 0,
    direct (shape), seed 0' (a path of another shape as it is)."""
    found = re.fullmatch(r"rep(\d+)/([^/]+)/seed(\d+)", name)
    if not found:
        return name
    return f"replicate {found[1]}, {labels.value_text('variant', found[2])}, seed {found[3]}"


def accuracy_chart(
    results: pl.DataFrame,
    rule: str,
    chance: dict[str, float],
    ceiling: dict[str, float] | None = None,
) -> alt.FacetChart:
    """Top-1 of every variant on every task (mean ± std over replicates), on one 0-100 scale
    for all panels, with each task's chance level (`chance`: task -> top-1 % of guessing) and,
    where known, its Bayes ceiling (`ceiling`) drawn and labelled. The panels wrap after
    FACET_COLUMNS, so that five tasks fit a 1,280-px window, each panel with its x-axis."""
    ceiling = ceiling or {}
    stats = _mean_std(results, rule, ["task", "variant"]).with_columns(
        pl.col("task").replace_strict(chance, return_dtype=pl.Float64).alias("chance"),
        pl.col("task")
        .replace_strict(ceiling, default=None, return_dtype=pl.Float64)
        .alias("ceiling"),
    )
    order = _shown(variant_order(results))
    y = alt.Y("mean:Q", title="top-1 (%)", scale=alt.Scale(domain=[0, 100]))
    base = alt.Chart().encode(x=alt.X("variant:N", sort=order, title="variant"))
    layers = [
        base.mark_point(filled=True, size=50).encode(
            y=y,
            color=alt.Color("variant:N", scale=palette.scale(order), legend=None),
            tooltip=charts.tooltips(stats, ["task", "variant", "mean", "std", "count"], PERCENT),
        ),
        base.mark_errorbar().encode(
            y=alt.Y("low:Q", title="top-1 (%)"),
            y2="high:Q",
            tooltip=charts.spread_tooltips(stats, ["task", "variant"], PERCENT),
        ),
        charts.chance_lines("chance"),
        charts.reference_lines("ceiling", "Bayes ceiling", dash=(1, 0)),
    ]
    return charts.wrapped(
        alt.layer(*layers, data=stats).properties(width=150, height=160),
        alt.Facet("task:N", title=None),
        FACET_COLUMNS,
        spacing={"row": 20, "column": charts.LABEL_ROOM},
    )


def role_chart(results: pl.DataFrame, rule: str) -> alt.LayerChart:
    """In distribution vs in the mixture vs unseen: mean over the tasks of each role, for the
    variants probed on every task, as points with their error bars side by side per variant (the
    variants are categories without an order, so no line joins them)."""
    tasks = results["task"].n_unique()
    everywhere = (
        results.group_by("variant")
        .agg(pl.col("task").n_unique().alias("tasks"))
        .filter(pl.col("tasks") == tasks)["variant"]
    )
    per_task = results.filter(
        (pl.col("rule") == rule) & pl.col("variant").is_in(everywhere.implode())
    )
    per_role = per_task.group_by("role", "variant", "replicate").agg(pl.col("top1").mean())
    stats = _mean_std(per_role.with_columns(pl.lit(rule).alias("rule")), rule, ["role", "variant"])
    title = "mean top-1 over the role's tasks (%)"
    order = _shown([v for v in variant_order(results) if v in set(everywhere)])
    roles = sorted(stats["role"])
    base = alt.Chart(stats).encode(
        x=alt.X("variant:N", sort=order, title="variant"),
        xOffset=alt.XOffset("role:N", sort=roles),
        color=alt.Color("role:N", title="task role", scale=palette.scale(roles)),
    )
    points = base.mark_point(filled=True, size=50).encode(
        y=alt.Y("mean:Q", title=title, scale=alt.Scale(zero=False)),
        tooltip=charts.tooltips(stats, ["role", "variant", "mean", "std"], PERCENT),
    )
    bars = base.mark_errorbar().encode(
        y=alt.Y("low:Q", title=title),
        y2="high:Q",
        tooltip=charts.spread_tooltips(stats, ["role", "variant"], PERCENT),
    )
    return (points + bars).properties(width=320, height=220)


def _mean_std(results: pl.DataFrame, rule: str, by: list[str]) -> pl.DataFrame:
    stats = (
        results.filter(pl.col("rule") == rule)
        .group_by(by)
        .agg(
            (100 * pl.col("top1").mean()).alias("mean"),
            (100 * pl.col("top1").std()).fill_null(0).alias("std"),
            pl.len().alias("count"),
        )
    )
    return labels.readable(charts.error_bounds(stats, (0, 100)))


def _shown(variants: list[str]) -> list[str]:
    """Variants as the charts name them (`direct-shape` as 'direct (shape)': kit.report.labels)."""
    return [labels.value_text("variant", variant) for variant in variants]


#: pixels per side of a sample image in the world chart (the world's images are upscaled)
SAMPLE_PIXELS = 56


def world_samples(params: TimecatSettings, classes: int = 6) -> alt.Chart:
    """Sample images of the synthetic world, one row per pretraining component (its cues carry
    the label, redundantly where there are two; absent cues are not drawn) and one per synthetic
    probe task that is not the mixture itself (its cues alone carry the label, the others show
    random classes), one column per class 0..`classes`-1: the first image of the evaluation
    split with that class and component. Read along a row, the cue that carries the class is
    the one that changes with the column."""
    rows: list[dict[str, object]] = []
    assert params.train is not None and params.train.data.synthetic is not None
    pretraining = params.train.data.synthetic
    total = sum(c.weight for c in pretraining.components)
    sources = [
        (
            f"pretraining, {100 * c.weight / total:.0f}%: {' + '.join(c.cues)}"
            + (" (redundant)" if len(c.cues) > 1 else "")
            + (f", no {' or '.join(c.absent)}" if c.absent else ""),
            pretraining,
            index,
        )
        for index, c in enumerate(pretraining.components)
    ]
    for task in params.tasks:
        task_data, _ = params.task_data(task)
        if task_data.synthetic is not None and not task.pretraining:
            sources.append((f"task {task.name} ({task.role})", task_data.synthetic, 0))
    size = params.train.data.image_size
    for row, (name, world, component) in enumerate(sources):
        data = SyntheticWorld(world, params.train.num_classes, size, "eval")
        for label, index in _first_of_each_class(data, component, classes).items():
            rows.append(
                {"row": row, "source": name, "class": label, "url": _png_url(data[index][0])}
            )
    frame = pl.DataFrame(rows)
    order = [name for name, _, _ in sources]
    return (
        alt.Chart(frame)
        .mark_image(width=SAMPLE_PIXELS, height=SAMPLE_PIXELS)
        .encode(
            x=alt.X("class:O", title="class", axis=alt.Axis(orient="top", labelAngle=0)),
            y=alt.Y("source:N", sort=order, title=None, axis=alt.Axis(labelLimit=0)),
            url="url:N",
            tooltip=[alt.Tooltip("source:N", title="images of"), alt.Tooltip("class:O")],
        )
        .properties(
            width=alt.Step(SAMPLE_PIXELS + 6),
            height=alt.Step(SAMPLE_PIXELS + 6),
            title="the synthetic world: sample images by class",
        )
    )


def _first_of_each_class(data: SyntheticWorld, component: int, classes: int) -> dict[int, int]:
    """Class -> the first index of `data` drawn from `component` with that class."""
    found: dict[int, int] = {}
    for index in range(len(data)):
        drawn = data.draw(index)
        if drawn.component == component and drawn.label < classes:
            found.setdefault(drawn.label, index)
            if len(found) == classes:
                break
    return dict(sorted(found.items()))


def _png_url(image: torch.Tensor) -> str:
    """A standardised (3, H, W) render as a data URL of its PNG, enlarged without smoothing."""
    pixels = (image * 0.25 + 0.5).clamp(0, 1).mul(255).round().to(torch.uint8)
    side = SAMPLE_PIXELS // pixels.shape[-1] * pixels.shape[-1] or pixels.shape[-1]
    picture = Image.fromarray(pixels.permute(1, 2, 0).numpy()).resize(
        (side, side), Image.Resampling.NEAREST
    )
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
