"""What each chart the notebooks save shows, in one sentence, by the name its files are saved
under (kit.report.charts.chart_saver): the report captions every chart with its notebook's
section and this sentence, so that two charts of one section never share a caption."""

from __future__ import annotations

#: what each saved chart shows, by its file name
CHART_CAPTIONS = {
    # notebook 01, the toy (Section 3)
    "toy_construction": "each component's support points in the plane of the two features "
    "φ1 and φ2, by label.",
    "toy_kept_features": "how many mixture-trained models kept each feature, by dominant "
    "component and its weight.",
    "toy_component_accuracy": "linear-probe accuracy on each component, mixture-trained models "
    "by the feature they kept beside direct training (mean ± std), with chance.",
    "toy_concatenation": "components solved by concatenating differently seeded models, by "
    "how many are concatenated and the dominant component's weight (mean ± std).",
    "toy_sparsity": "the share of trained models keeping each feature as the weight decay "
    "(the sparsity bias) grows.",
    # notebook 02, the paper's published numbers (no kit measurement)
    "table1_dfr": "the differences in points Table 1a's text discusses, per dataset "
    "(published values).",
    "table2": "each architecture's top-1 per evaluation dataset as Table 2 prints it, each "
    "dataset on its own zoomed axis (published values).",
    "table2_gains": "Table 2 as differences in points between the architectures, per "
    "dataset, on one shared scale (published values).",
    "figure4_concat_vs_scale": "top-1 against model size in ResNet-50 equivalents, "
    "concatenations beside wider networks, per dataset (published values).",
    "table3": "each method's top-1 per evaluation dataset as Table 3 prints it, each dataset "
    "on its own zoomed axis (published values).",
    "table3_gains": "Table 3 as catN minus cat1 in points, per dataset, on one shared scale "
    "(published values).",
    # notebook 03, time-concat at a fixed budget (Section 5.1)
    "time_concat_world": "sample images of the synthetic world, by class and the component drawn.",
    "time_concat_training": "the training loss of every pretraining run, one panel per variant.",
    "time_concat_accuracy": "linear-probe top-1 of every variant on every task (mean ± std "
    "over replicates), with chance and, where known, the Bayes ceiling.",
    "time_concat_id_vs_ood": "mean top-1 over the tasks of each role, per variant probed on "
    "every task (mean ± std over replicates).",
    # notebook 04, the budget sweep
    "sweep_gains": "catN's gain on the mean transfer top-1 over the baseline and each control "
    "by total budget, with 95% intervals, one panel per world seed.",
}


def chart_caption(heading: str, name: str | None) -> str:
    """A chart's caption: the section `heading` showing it and what the chart named `name`
    shows (CHART_CAPTIONS); the heading alone for a chart not listed."""
    said = CHART_CAPTIONS.get(name or "")
    return f"{heading}: {said}" if said else heading
