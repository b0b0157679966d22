"""The published numbers behind the paper's Section 4 and Table 3, as cited data.

Each source is one tidy CSV in `kit/experiments/evidence_data/`: one row per (method,
evaluation dataset, metric) with its study, arXiv id, table or figure, and how the value was
obtained (`table`, or `read_from_figure` with an uncertainty). A value no reachable source gives
is null, never guessed. Everything notebook 02 shows is computed from these rows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kit.params import params
from kit.params.params import NotebookSettings
from kit.readout import numbers
from kit.readout.numbers import counted
from kit.report import labels

DATA_DIR = Path(__file__).parent / "evidence_data"

SCHEMA: dict[str, type[pl.DataType]] = {
    "study": pl.String,
    "arxiv_id": pl.String,
    "source_ref": pl.String,
    "method": pl.String,
    "architecture": pl.String,
    "params_millions": pl.Float64,
    "n_models": pl.Int64,
    "iters_per_model": pl.Int64,
    "total_iters": pl.Int64,
    "pretraining_data": pl.String,
    "eval_dataset": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
    "value_source": pl.String,
    "uncertainty": pl.Float64,
    "verified_in_primary": pl.Boolean,
    "note": pl.String,
}
KEY = ["study", "method", "architecture", "eval_dataset", "metric"]
REQUIRED = [
    "study",
    "arxiv_id",
    "source_ref",
    "method",
    "eval_dataset",
    "metric",
    "value_source",
    "verified_in_primary",
]
VALUE_SOURCES = {"table", "read_from_figure"}
TRANSFER_DATASETS = ["ImageNet-1k", "iNat18", "CIFAR-100", "CIFAR-10"]
OOD_DATASETS = ["iNat18", "CIFAR-100", "CIFAR-10"]
RESNET50_PARAMS_MILLIONS = 23.5  # Table 2 of the paper ("original", resnet50)

SOURCES = {
    "table1_dfr": "table1_kirichenko2023_dfr.csv",
    "table1_genomics": "table1_xu2025_genomics.csv",
    "table2": "table2_zhang_bottou2023.csv",
    "figure4_ssl": "figure4_zhang_bottou2023_ssl.csv",
    "table3": "table3_timecat.csv",
}


class EvidenceError(ValueError):
    """A data file breaks the evidence schema."""


def load(name: str, data_dir: Path = DATA_DIR) -> pl.DataFrame:
    """One source's rows, checked against the schema: parsed and checked once per content of
    its file (every claim line of a summary cites Table 3), read afresh each call so that an
    edited file is never served stale, and returned as a copy of its own."""
    path = data_dir / SOURCES[name]
    return _parsed(path, path.read_bytes()).clone()


@functools.lru_cache(maxsize=32)
def _parsed(path: Path, content: bytes) -> pl.DataFrame:
    """`content`, the bytes of the source at `path`, parsed and checked."""
    frame = pl.read_csv(content, schema=SCHEMA)
    check(frame, path)
    return frame


def load_all(data_dir: Path = DATA_DIR) -> dict[str, pl.DataFrame]:
    return {name: load(name, data_dir) for name in SOURCES}


def check(frame: pl.DataFrame, path: Path) -> None:
    """Refuse rows without a source, duplicate keys, unknown provenance or impossible values."""
    for column in REQUIRED:
        missing = frame.filter(pl.col(column).is_null() | (pl.col(column).cast(pl.String) == ""))
        if missing.height:
            raise EvidenceError(
                f"{path}: column '{column}' is empty in {counted(missing.height, 'row')}"
            )
    duplicates = frame.group_by(KEY).len().filter(pl.col("len") > 1)
    if duplicates.height:
        raise EvidenceError(f"{path}: duplicate rows for {duplicates.select(KEY).row(0)}")
    unknown = set(frame["value_source"].unique()) - VALUE_SOURCES
    if unknown:
        raise EvidenceError(
            f"{path}: value_source must be one of {sorted(VALUE_SOURCES)}, got {sorted(unknown)}"
        )
    unsure = frame.filter(
        (pl.col("value_source") == "read_from_figure") & pl.col("uncertainty").is_null()
    )
    if unsure.height:
        raise EvidenceError(
            f"{path}: values read from a figure need an uncertainty "
            f"({counted(unsure.height, 'row')} without)"
        )
    percent = frame.filter(
        pl.col("metric").str.ends_with("(%)")
        & pl.col("value").is_not_null()
        & ((pl.col("value") < 0) | (pl.col("value") > 100))
    )
    if percent.height:
        raise EvidenceError(f"{path}: percentages outside [0, 100]: {percent['value'].to_list()}")


def as_printed(
    frame: pl.DataFrame, index: list[str], columns: str = "eval_dataset"
) -> pl.DataFrame:
    """A source laid out like the paper's table: one row per method, one column per dataset."""
    order = [
        c
        for c in TRANSFER_DATASETS + frame[columns].unique(maintain_order=True).to_list()
        if c in frame[columns].to_list()
    ]
    wide = frame.pivot(on=columns, index=index, values="value", aggregate_function=None)
    return wide.select(index + list(dict.fromkeys(order)))


def printed_or_missing(frame: pl.DataFrame, index: list[str]) -> pl.DataFrame | str:
    """`as_printed(frame, index)`, or one sentence when no row of the source has a value (a
    table of placeholders says less than the sentence)."""
    if frame["value"].null_count() < frame.height:
        return as_printed(frame, index)
    methods = ", ".join(frame["method"].unique(maintain_order=True).to_list())
    return (
        f"No value of {frame['study'][0]} ({frame['metric'][0]} on "
        f"{frame['eval_dataset'][0]}) is in a source the kit holds, so none is shown; the "
        f"rows kept for when one is: {methods}."
    )


def ensemble_gains(table2: pl.DataFrame) -> pl.DataFrame:
    """Table 2's argument: cat4resnet50 against the width-matched resnet50w2 and the resnet50."""
    printed = table2.filter(pl.col("value_source") == "table")
    value = {
        (r["architecture"], r["eval_dataset"]): r["value"] for r in printed.iter_rows(named=True)
    }
    rows = []
    for dataset in TRANSFER_DATASETS:
        ensemble = value[("cat4resnet50", dataset)]
        rows.append(
            {
                "eval_dataset": dataset,
                "role": "in-distribution" if dataset == "ImageNet-1k" else "transfer",
                "cat4resnet50_minus_resnet50w2": round(
                    ensemble - value[("resnet50w2", dataset)], 2
                ),
                "cat4resnet50_minus_resnet50": round(ensemble - value[("resnet50", dataset)], 2),
                "resnet50w2_minus_resnet50": round(
                    value[("resnet50w2", dataset)] - value[("resnet50", dataset)], 2
                ),
            }
        )
    return pl.DataFrame(rows)


def time_concat_gains(table3: pl.DataFrame) -> pl.DataFrame:
    """Table 3's argument: each catN minus cat1, in distribution and averaged out of it."""
    baseline = table3.filter(pl.col("n_models") == 1).select(
        "eval_dataset", pl.col("value").alias("cat1")
    )
    gains = table3.join(baseline, on="eval_dataset").with_columns(
        (pl.col("value") - pl.col("cat1")).round(2).alias("gain")
    )
    wide = (
        gains.pivot(on="eval_dataset", index=["method", "n_models", "total_iters"], values="gain")
        .sort("n_models")
        .rename(gain_column)
    )
    columns = [gain_column(d) for d in TRANSFER_DATASETS]
    return wide.with_columns(
        pl.col(gain_column("ImageNet-1k")).alias("ID gain"),
        pl.mean_horizontal([gain_column(d) for d in OOD_DATASETS]).round(2).alias("mean OOD gain"),
    ).select("method", "n_models", "total_iters", *columns, "ID gain", "mean OOD gain")


def gain_column(dataset: str) -> str:
    """The column of `time_concat_gains` holding catN − cat1 on `dataset`: named as a gain, so
    that it reads signed like the gains beside it ('+0.1', never '0.1' beside '+0.1':
    kit.report.labels.quantity); other names (method, ...) as they are."""
    return f"{dataset} gain (points)" if dataset in TRANSFER_DATASETS else dataset


def transfer_gap(dfr: pl.DataFrame) -> pl.DataFrame:
    """Table 1 (DFR): direct robust training minus last-layer transfer, per dataset and metric."""
    method = pl.col("method")
    wide = dfr.with_columns(
        pl.when(method.str.starts_with("DFR"))
        .then(pl.lit("transfer (DFR)"))
        .when(method.str.starts_with("Group DRO"))
        .then(pl.lit("direct (Group DRO)"))
        .otherwise(pl.lit("ERM"))
        .alias("training")
    ).pivot(on="training", index=["eval_dataset", "metric"], values="value")
    return wide.with_columns(
        (pl.col("direct (Group DRO)") - pl.col("transfer (DFR)"))
        .round(2)
        .alias("direct minus transfer"),
        (pl.col("transfer (DFR)") - pl.col("ERM")).round(2).alias("transfer minus ERM"),
    )


def concat_series(table2: pl.DataFrame, ssl: pl.DataFrame) -> pl.DataFrame:
    """Accuracy against size, in ResNet-50 equivalents: concatenations of n models (n) and wider
    single models (their parameter count over a ResNet-50's, where a source gives it)."""
    supervised = table2.filter(pl.col("method") != "distill5").with_columns(
        pl.lit("supervised (ImageNet-1k)").alias("pretraining")
    )
    self_supervised = ssl.with_columns(pl.lit("self-supervised (SwAV)").alias("pretraining"))
    both = pl.concat([supervised, self_supervised])
    is_concat = pl.col("architecture").str.starts_with("cat") | (
        pl.col("architecture") == "resnet50"
    )
    return both.with_columns(
        pl.when(is_concat)
        .then(pl.lit("concatenation"))
        .otherwise(pl.lit("wider network"))
        .alias("kind"),
        pl.when(is_concat)
        .then(pl.col("n_models").cast(pl.Float64))
        .otherwise(pl.col("params_millions") / RESNET50_PARAMS_MILLIONS)
        .round(2)
        .alias("resnet50_equivalents"),
    ).select(
        "pretraining",
        "kind",
        "architecture",
        "resnet50_equivalents",
        "eval_dataset",
        "value",
        "value_source",
        "uncertainty",
    )


def summarize(sources: dict[str, pl.DataFrame]) -> dict[str, object]:
    """The differences the paper's argument rests on, as plain numbers (written to JSON)."""
    gains = ensemble_gains(sources["table2"])
    time_gains = time_concat_gains(sources["table3"]).filter(pl.col("n_models") > 1)
    gap = transfer_gap(sources["table1_dfr"])
    everything = pl.concat(list(sources.values()))

    def by(frame: pl.DataFrame, key: str, column: str) -> dict[str, float | None]:
        return dict(zip(frame[key].to_list(), frame[column].to_list(), strict=True))

    return {
        "table2_cat4_minus_w2": by(gains, "eval_dataset", "cat4resnet50_minus_resnet50w2"),
        "table2_w2_minus_rn50": by(gains, "eval_dataset", "resnet50w2_minus_resnet50"),
        "table3_id_gain": by(time_gains, "method", "ID gain"),
        "table3_mean_ood_gain": by(time_gains, "method", "mean OOD gain"),
        "table1_direct_minus_transfer_worst_group": by(
            gap.filter(pl.col("metric").str.starts_with("worst")),
            "eval_dataset",
            "direct minus transfer",
        ),
        "values": everything.height,
        "values_from_tables": everything.filter(pl.col("value_source") == "table")
        .filter(pl.col("value").is_not_null())
        .height,
        "values_read_from_figures": everything.filter(
            pl.col("value_source") == "read_from_figure"
        ).height,
        # printed values that reached us through secondary copies (a value read from a figure
        # is counted with the figures, whether or not the figure is the primary source's)
        "values_not_verified_in_primary": everything.filter(
            ~pl.col("verified_in_primary") & (pl.col("value_source") == "table")
        )
        .filter(pl.col("value").is_not_null())
        .height,
        "values_missing": everything["value"].null_count(),
    }


def summary_lines(summary: dict[str, object]) -> list[str]:
    """Sentences stating the computed numbers, for the notebook's closing cell: gains in points
    to one decimal (kit.readout.numbers), the models in words (kit.report.labels)."""

    def signed(values: object) -> str:
        assert isinstance(values, dict)
        return ", ".join(
            f"{k} {'n/a' if v is None else numbers.signed(v)}" for k, v in values.items()
        )

    def model(name: str) -> str:
        return labels.value_text("architecture", name)

    return [
        f"Table 2, {model('cat4resnet50')} minus the width-matched {model('resnet50w2')}: "
        f"{signed(summary['table2_cat4_minus_w2'])} (points).",
        f"Table 2, widening alone ({model('resnet50w2')} minus {model('resnet50')}): "
        f"{signed(summary['table2_w2_minus_rn50'])}.",
        f"Table 3, catN minus cat1 on ImageNet-1k (in distribution): "
        f"{signed(summary['table3_id_gain'])}.",
        f"Table 3, catN minus cat1 averaged over iNat18, CIFAR-100, CIFAR-10: "
        f"{signed(summary['table3_mean_ood_gain'])}.",
        f"Table 1a, Group DRO minus DFR (worst-group accuracy): "
        f"{signed(summary['table1_direct_minus_transfer_worst_group'])}.",
        f"Provenance: {summary['values']} rows; {summary['values_from_tables']} values printed "
        f"in tables (of which {summary['values_not_verified_in_primary']} reached us through "
        f"secondary copies), {summary['values_read_from_figures']} read from figures, "
        f"{summary['values_missing']} missing.",
    ]


@dataclass(frozen=True)
class EvidenceFiles:
    """Notebook 02's result files in its output folder, named in one place for the notebook, the
    tests and the report."""

    dfr_gap: str = "table1_dfr_gap.parquet"
    table2_gains: str = "table2_gains.parquet"
    figure4_series: str = "figure4_series.parquet"
    table3_gains: str = "table3_gains.parquet"
    summary: str = "evidence_summary.json"


EVIDENCE = EvidenceFiles()

#: notebook 02 takes only the keys every notebook takes
params.register_schema("02_surveyed_evidence", NotebookSettings)
