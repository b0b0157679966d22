"""The surveyed evidence: schema of every data file, agreement with the paper, computed gains."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from kit.experiments import evidence, evidence_charts
from kit.experiments.evidence import EVIDENCE
from kit.readout.citation import PAPER
from kit.report import charts, outputs

# The paper's printed tables (arXiv 2506.18221v3, Tables 2 and 3; cat4 CIFAR-100 read from the
# authors' figure), as the paper's Section 4 and Table 3 give them.
PAPER_TABLE2 = {
    "resnet50": [75.58, 37.91, 73.23, 90.57],
    "resnet50w2": [77.58, 37.34, 72.65, 90.86],
    "cat4resnet50": [78.15, 46.55, 78.19, 93.09],
}
PAPER_TABLE3 = {
    "cat1 (baseline)": [78.4, 33.7, 71.0, 90.4],
    "cat2": [78.5, 40.4, 74.2, 91.2],
    "cat4": [78.3, 42.9, 76.8, 92.7],
    "cat5": [77.8, 46.2, 77.1, 92.8],
}


def test_every_data_file_loads_with_the_schema() -> None:
    sources = evidence.load_all()
    assert set(sources) == set(evidence.SOURCES)
    for name, frame in sources.items():
        assert frame.schema == pl.Schema(evidence.SCHEMA), name
        assert frame.height > 0, name
        assert frame.group_by(evidence.KEY).len()["len"].max() == 1, name
        assert frame.filter(pl.col("source_ref").is_null()).height == 0, name


def test_the_papers_numbers_name_its_version_and_the_one_read_from_a_figure_says_so() -> None:
    """Table 3's numbers are those of the quoted version; the one value its extracted text lost
    (cat4 on CIFAR-100) was read from the authors' figure, so it is not marked as checked
    against the paper; the quoted Table 2 names the version too."""
    table3 = evidence.load("table3")
    assert set(table3["arxiv_id"]) == {PAPER.arxiv_id}
    read = table3.filter(pl.col("value_source") == "read_from_figure")
    assert read.select("method", "eval_dataset", "value").rows() == [("cat4", "CIFAR-100", 76.8)]
    assert not read["verified_in_primary"].any() and "figure" in read["source_ref"].item()
    assert table3.filter(pl.col("value_source") == "table")["verified_in_primary"].all()
    quoted = evidence.load("table2").filter(pl.col("value_source") == "table")
    assert quoted["source_ref"].str.contains(PAPER.arxiv_id, literal=True).all()


def test_every_source_cites_the_paper_as_kit_core_citation_does() -> None:
    """A tooltip names the paper's rows by their `study`: the authors and the year of the
    quoted version (2026 for v3), never another year beside the version's date; a source
    quoting the paper names it the same way."""
    for name, frame in evidence.load_all().items():
        own = frame.filter(pl.col("arxiv_id") == PAPER.arxiv_id)
        assert (own["study"] == PAPER.short).all(), (name, own["study"].unique().to_list())
        quoting = frame.filter(pl.col("source_ref").str.contains(PAPER.arxiv, literal=True))
        cited = quoting.filter(~pl.col("source_ref").str.contains(PAPER.short, literal=True))
        assert own.height or cited.height == 0, (name, cited["source_ref"].unique().to_list())


@pytest.fixture()
def data_copy(tmp_path: Path) -> Path:
    for file in evidence.SOURCES.values():
        shutil.copy(evidence.DATA_DIR / file, tmp_path / file)
    return tmp_path


def edit(data_copy: Path, name: str, change) -> None:
    path = data_copy / evidence.SOURCES[name]
    change(pl.read_csv(path, schema=evidence.SCHEMA)).write_csv(path)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f: pl.concat([f, f.head(1)]), "duplicate rows"),
        (lambda f: f.with_columns(pl.lit(None, pl.String).alias("source_ref")), "source_ref"),
        (lambda f: f.with_columns(pl.lit("guess").alias("value_source")), "value_source"),
        (
            lambda f: f.with_columns(
                pl.lit("read_from_figure").alias("value_source"),
                pl.lit(None, pl.Float64).alias("uncertainty"),
            ),
            "uncertainty",
        ),
        (lambda f: f.with_columns(pl.lit(120.0).alias("value")), "outside"),
    ],
)
def test_bad_data_files_are_refused(data_copy: Path, change, message: str) -> None:
    edit(data_copy, "table3", change)
    with pytest.raises(evidence.EvidenceError, match=message):
        evidence.load("table3", data_copy)


def printed(frame: pl.DataFrame, key: str) -> dict[str, list[float]]:
    wide = evidence.as_printed(frame, [key])
    return {row[0]: list(row[1:]) for row in wide.iter_rows()}


def test_table2_matches_the_paper() -> None:
    table2 = evidence.load("table2").filter(pl.col("value_source") == "table")
    assert printed(table2, "architecture") == PAPER_TABLE2


def test_table3_matches_the_paper() -> None:
    assert printed(evidence.load("table3"), "method") == PAPER_TABLE3


def test_gains_are_differences_of_the_rows() -> None:
    gains = {
        r["eval_dataset"]: r
        for r in evidence.ensemble_gains(evidence.load("table2")).iter_rows(named=True)
    }
    for i, dataset in enumerate(evidence.TRANSFER_DATASETS):
        expected = PAPER_TABLE2["cat4resnet50"][i] - PAPER_TABLE2["resnet50w2"][i]
        assert gains[dataset]["cat4resnet50_minus_resnet50w2"] == pytest.approx(expected, abs=1e-9)
    time_gains = {
        r["method"]: r
        for r in evidence.time_concat_gains(evidence.load("table3")).iter_rows(named=True)
    }
    cat5, cat1 = PAPER_TABLE3["cat5"], PAPER_TABLE3["cat1 (baseline)"]
    assert time_gains["cat5"]["ID gain"] == pytest.approx(cat5[0] - cat1[0])
    assert time_gains["cat5"]["mean OOD gain"] == pytest.approx(
        sum(cat5[1:]) / 3 - sum(cat1[1:]) / 3, abs=0.01
    )


def test_missing_values_stay_missing() -> None:
    genomics = evidence.load("table1_genomics")
    assert genomics["value"].null_count() == genomics.height  # no source reached: nothing typed
    said = evidence.printed_or_missing(genomics, ["method", "params_millions"])
    assert isinstance(said, str) and "Caduceus" in said and "Xu et al. 2025" in said
    dfr = evidence.load("table1_dfr")
    assert isinstance(evidence.printed_or_missing(dfr, ["method", "metric"]), pl.DataFrame)
    gap = evidence.transfer_gap(evidence.load("table1_dfr"))
    civil = gap.filter(
        (pl.col("eval_dataset") == "CivilComments") & pl.col("metric").str.starts_with("worst")
    )
    assert civil["direct minus transfer"].to_list() == [None]


def test_concat_series_places_concatenations_and_wider_networks() -> None:
    series = evidence.concat_series(evidence.load("table2"), evidence.load("figure4_ssl"))
    sizes = dict(
        series.filter(pl.col("eval_dataset") == "iNat18")
        .select(pl.concat_str("pretraining", "architecture", separator="/"), "resnet50_equivalents")
        .iter_rows()
    )
    assert sizes["supervised (ImageNet-1k)/cat10resnet50"] == 10
    assert sizes["supervised (ImageNet-1k)/resnet50w2"] == pytest.approx(93.9 / 23.5, abs=0.01)
    assert sizes["supervised (ImageNet-1k)/resnet50w4"] is None  # no parameter count sourced
    assert sizes["self-supervised (SwAV)/cat8resnet50"] == 8


def test_notebook_02_shows_what_the_data_give(notebook_outputs) -> None:
    folder = notebook_outputs("02_surveyed_evidence", EVIDENCE.summary)
    sources = evidence.load_all()
    assert outputs.read_json(folder / EVIDENCE.summary) == evidence.summarize(sources)
    assert pl.read_parquet(folder / EVIDENCE.table2_gains).equals(
        evidence.ensemble_gains(sources["table2"])
    )
    assert pl.read_parquet(folder / EVIDENCE.table3_gains).equals(
        evidence.time_concat_gains(sources["table3"])
    )
    for chart in ("table1_dfr", "table2", "table3", "figure4_concat_vs_scale"):
        assert (folder / f"{chart}.png").stat().st_size > 0


def test_gap_charts_start_at_zero_and_name_every_comparison(tmp_path: Path, chart_texts) -> None:
    sources = evidence.load_all()
    gap_frames = {
        "table1": evidence_charts.table1_gap_frame(evidence.transfer_gap(sources["table1_dfr"])),
        "table2": evidence_charts.table2_gain_frame(evidence.ensemble_gains(sources["table2"])),
        "table3": evidence_charts.table3_gain_frame(evidence.time_concat_gains(sources["table3"])),
    }
    for name, frame in gap_frames.items():
        chart = evidence_charts.difference_chart(frame, "comparison", "points", name)
        (svg,) = charts.save_chart(chart, tmp_path, name, ["svg"])
        texts = chart_texts(svg)
        assert set(frame["comparison"]) <= set(texts), name
        assert "0" in texts, f"{name}: the zero the bars start from has no tick"
        shown = frame.filter(pl.col("points").is_not_null())["points"]
        assert {f"{v:+.1f}".replace("-", "\u2212") for v in shown} <= set(texts), name
    table1 = chart_texts(tmp_path / "table1.svg")
    assert "+3.0" in table1  # MultiNLI worst group: the 3-point gap the text talks about


def test_zoomed_dot_plots_say_so(tmp_path: Path, chart_texts) -> None:
    chart = evidence_charts.dot_plot(evidence.load("table3"), "method", "Table 3")
    (svg,) = charts.save_chart(chart, tmp_path, "table3", ["svg"])
    texts = chart_texts(svg)
    assert "zoomed: each dataset on its own axis, not from 0" in texts
    assert set(evidence.TRANSFER_DATASETS) <= set(texts)
