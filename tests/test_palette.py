"""Charts a reader trusts: one colour per variant in every chart, error bars inside the metric's
range, axis titles everywhere, rounded tooltips; tables rounded to what the spread supports."""

from __future__ import annotations

import polars as pl
import pytest
from chart_checks import nodes

from kit.experiments import evidence, evidence_charts, toy_charts, toy_construction
from kit.experiments.timecat import figures
from kit.report import charts, labels, palette, tables


def colours(spec: dict) -> dict[str, str]:
    """Name -> colour of every colour scale with an explicit domain and range in the chart."""
    found: dict[str, str] = {}
    for node in nodes(spec):
        scale = node.get("scale") if "field" in node else None
        if isinstance(scale, dict) and "range" in scale and "domain" in scale:
            for name, colour in zip(scale["domain"], scale["range"], strict=True):
                assert found.setdefault(name, colour) == colour, f"{name} has two colours"
    return found


def results(top1: dict[str, list[float]]) -> pl.DataFrame:
    """Fake probe results: per variant, top-1 (0-1) per replicate on two tasks of two roles."""
    return pl.DataFrame(
        [
            {
                "variant": name,
                "replicate": r,
                "task": task,
                "role": role,
                "rule": "heldout",
                "top1": value,
            }
            for name, values in top1.items()
            for r, value in enumerate(values)
            for task, role in [("shape", "in-distribution"), ("texture", "unseen")]
        ]
    )


def curves() -> pl.DataFrame:
    runs = [
        "out/time_concat/rep0/cat1/seed0",
        "out/time_concat/rep0/cat2/seed1",
        "out/time_concat/rep0/cat2/seed2",
        "out/time_concat/rep0/direct-shape/seed3",
    ]
    return pl.DataFrame(
        [
            {"run": run, "step": step, "loss": 2.0 - step / 100}
            for run in runs
            for step in (0, 50, 100)
        ]
    )


NOISY = {
    "cat1": [0.90, 0.99, 0.995],
    "cat2": [0.5, 0.9, 0.99],
    "wide1": [0.7, 0.8, 0.75],
    "random2": [0.1, 0.3, 0.2],
    "direct": [0.98, 0.999, 0.99],
}


def test_a_variant_has_one_colour_in_every_chart_of_every_notebook() -> None:
    seen: dict[str, str] = {}
    toy_table = pl.DataFrame(
        [
            {"training": t, "component": c, "n": 3, "mean": 0.9, "std": 0.1}
            for t in ["direct on the component", "mixture, kept phi1"]
            for c in toy_construction.COMPONENT_NAMES
        ]
    )
    specs = [
        figures.accuracy_chart(results(NOISY), "heldout", {"shape": 10, "texture": 10}),
        figures.accuracy_chart(
            results({"cat2": [0.5], "direct": [0.9]}), "heldout", {"shape": 10, "texture": 10}
        ),
        figures.training_chart(curves()),
        toy_charts.accuracy_chart(toy_table),
    ]
    for spec in specs:
        for name, colour in colours(spec.to_dict()).items():
            name = {"direct on the component": "direct", "mixture, kept φ1": "phi1"}.get(
                name, name
            )  # the chart shows the feature by its symbol (kit.report.labels.SYMBOLS)
            assert seen.setdefault(name, colour) == colour, f"{name}: {colour} != {seen[name]}"
    assert {"cat1", "cat2", "wide1", "random2", "direct", "phi1"} <= set(seen)
    assert len({seen[v] for v in ("cat1", "cat2", "wide1", "random2", "direct")}) == 5


def test_notebook_02s_charts_colour_each_concept_as_every_notebook_does() -> None:
    """A published catN's gain is drawn in notebook 03's catN colour, a wider ResNet-50 in the
    wide family's; value sources, pretrainings and metrics have colours of their own."""
    sources = evidence.load_all()
    charts_of_02 = {
        "table1": evidence_charts.difference_chart(
            evidence_charts.table1_gap_frame(evidence.transfer_gap(sources["table1_dfr"])),
            "comparison",
            "points",
            "1a",
        ),
        "table2": evidence_charts.difference_chart(
            evidence_charts.table2_gain_frame(evidence.ensemble_gains(sources["table2"])),
            "comparison",
            "points",
            "2",
        ),
        "table3": evidence_charts.difference_chart(
            evidence_charts.table3_gain_frame(evidence.time_concat_gains(sources["table3"])),
            "comparison",
            "points",
            "3",
        ),
        "series": evidence_charts.series_chart(
            evidence.concat_series(sources["table2"], sources["figure4_ssl"])
        ),
        "dots": evidence_charts.dot_plot(sources["table3"], "method", "3"),
    }
    found = {
        name: {k: v for k, v in colours(chart.to_dict()).items() if v.startswith("#")}
        for name, chart in charts_of_02.items()
    }
    assert found["table3"] and all(
        colour == palette.color(label.split(" − ")[0]) for label, colour in found["table3"].items()
    )
    assert set(found["table3"]) >= {"cat2 − cat1", "cat4 − cat1"}
    assert found["table2"] == {  # the models in words, coloured as the concept each names
        "4 concatenated ResNet-50s − a 2× wide ResNet-50 (same width)": palette.color("cat4"),
        "a 2× wide ResNet-50 − one ResNet-50 (widening alone)": palette.color("wide2"),
    }
    assert found["series"] == {
        "supervised (ImageNet-1k)": palette.color("supervised"),
        "self-supervised (SwAV)": palette.color("self-supervised"),
    }
    assert found["dots"] == {  # shown in words, coloured as the concept it names
        labels.VALUES["read_from_figure"]: palette.color("read_from_figure"),
        labels.VALUES["table"]: palette.color("table"),
    }
    for name, named in found.items():
        assert len(set(named.values())) == len(named) >= 2, f"{name}: {named}"
    assert (
        palette.color("cat4")
        == colours(
            figures.accuracy_chart(
                results({"cat4": [0.5], "cat1": [0.4]}), "heldout", {"shape": 10, "texture": 10}
            ).to_dict()
        )["cat4"]
    )


def test_palette_families_and_other_names() -> None:
    assert palette.color("cat1") != palette.color("cat4")
    assert palette.color("random-init4") == palette.color("random4")
    assert palette.color("direct-texture") == palette.color("direct")
    assert palette.color("my variant") == palette.color("my variant")  # stable, no state
    assert palette.color("my variant") in palette.OTHERS
    scale = palette.scale(["cat2", "cat1", "cat2"]).to_dict()
    assert scale == {
        "domain": ["cat2", "cat1"],
        "range": [palette.color("cat2"), palette.color("cat1")],
    }


def test_error_bars_stay_inside_the_metrics_range() -> None:
    spec = figures.accuracy_chart(results(NOISY), "heldout", {"shape": 10, "texture": 10})
    rows = next(iter(spec.to_dict()["datasets"].values()))
    assert max(r["high"] for r in rows) == 100.0  # cat2 and direct's std reach past 100
    assert min(r["low"] for r in rows) >= 0
    assert any(r["mean"] + r["std"] > 100 for r in rows)
    bounded = charts.error_bounds(pl.DataFrame({"mean": [0.95, 0.05], "std": [0.1, None]}), (0, 1))
    assert bounded["high"].to_list() == [1.0, 0.05]
    assert bounded["low"].to_list() == pytest.approx([0.85, 0.05])


def test_every_axis_has_a_title_and_tooltips_are_rounded() -> None:
    specs = [
        figures.training_chart(curves()),
        figures.accuracy_chart(results(NOISY), "heldout", {"shape": 10, "texture": 10}),
        figures.role_chart(results(NOISY), "heldout"),
        toy_charts.construction_chart(),
    ]
    for spec in specs:
        for node in nodes(spec.to_dict()):
            for channel in ("x", "y"):
                encoding = node.get(channel)
                # reference lines (chance, ceiling) take the title of the layers they join
                if isinstance(encoding, dict) and encoding.get("field") not in (
                    None,
                    "chance",
                    "ceiling",
                ):
                    assert encoding.get("title"), f"{encoding['field']} has no axis title"
            for tip in node.get("tooltip", []) if isinstance(node.get("tooltip"), list) else []:
                if tip.get("type") == "quantitative" and tip["field"] in ("mean", "std", "loss"):
                    assert "format" in tip, f"tooltip {tip['field']} unrounded"


def test_no_line_joins_the_variants_of_the_role_chart() -> None:
    """Variants are unordered categories: each role is a point per variant, offset side by
    side, with its error bar."""
    spec = figures.role_chart(results(NOISY), "heldout").to_dict()
    marks = [node["mark"] for node in nodes(spec) if "mark" in node]
    kinds = {mark["type"] if isinstance(mark, dict) else mark for mark in marks}
    assert kinds == {"point", "errorbar"}
    assert all(layer["encoding"]["xOffset"]["field"] == "role" for layer in spec["layer"])


def test_training_chart_has_one_panel_per_variant_with_titled_axes() -> None:
    spec = figures.training_chart(curves()).to_dict()
    rows = next(iter(spec["datasets"].values()))
    # a per-task run of the direct variant named in words, in the direct variant's colour
    assert {r["variant"] for r in rows} == {"cat1", "cat2", "direct (shape)"}
    assert palette.color("direct (shape)") == palette.color("direct")
    encoding = spec["spec"]["encoding"]
    assert encoding["x"]["title"] == "training step" and encoding["y"]["title"]
    assert spec["columns"] == 2


@pytest.mark.parametrize(
    ("std", "places"),
    [([1.3, 1.25], 1), ([0.04, 0.05], 3), ([12.0, 20.0], 0), ([None, None], None)],
)
def test_spread_decides_the_decimals(std: list, places: int | None) -> None:
    assert tables.spread_decimals(pl.Series(std, dtype=pl.Float64)) == places


def test_a_mean_is_printed_to_the_precision_its_std_supports() -> None:
    frame = pl.DataFrame(
        {"variant": ["cat1", "cat2"], "shape mean": [93.41666, 80.0], "shape std": [1.2583, 1.31]}
    )
    assert tables.table(frame).cells() == [["cat1", "93.4", "1.3"], ["cat2", "80.0", "1.3"]]


def test_the_interactive_panel_reads_as_a_sentence_where_no_frontend_draws_it() -> None:
    from kit.experiments.toy_settings import SparseTrainingSettings

    panel = toy_charts.interactive_panel(SparseTrainingSettings(), seed=0)
    bundle = panel._repr_mimebundle_()
    assert "VBox" not in bundle["text/plain"] and "JupyterLab" in bundle["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in bundle
