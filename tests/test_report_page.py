"""The shared report page: built from what a run wrote, self-contained, refusing an empty folder."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import altair as alt
import nbformat
import polars as pl
import pytest
from test_timecat import fake_results

from kit.cli import main as cli
from kit.core import provenance
from kit.experiments.timecat import paper
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.experiments.toy_settings import TOY
from kit.report import page
from kit.report.charts import VEGALITE_MIME
from kit.report.notebook_html import WIDGET_STATE, WIDGET_VIEW
from kit.stats import outcomes

CLAIM = "cat4 transfers better than cat1 on 2 of 3 unseen tasks (a smoke test)"


def fake_outputs(folder: Path) -> Path:
    """An output folder as a run leaves it: an executed notebook showing one chart, a summary
    with a claim, a Table 3 and the parameters file."""
    folder.mkdir(parents=True)
    spec = (
        alt.Chart(pl.DataFrame({"variant": ["cat1", "cat4"], "top1": [61.5, 64.25]}))
        .mark_bar()
        .encode(x="variant:N", y="top1:Q")
        .to_dict()
    )
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# 03 · time-concat"),
            nbformat.v4.new_markdown_cell(
                "## Accuracy\n\nFeatures $\\varphi_1, \\varphi_2$ and $$z = u \\odot "
                "\\varphi(x)$$, but not `$HOME`."
            ),
            nbformat.v4.new_code_cell(
                "show(chart)",
                outputs=[
                    nbformat.v4.new_output(
                        "display_data", data={VEGALITE_MIME: spec, "text/plain": "<chart>"}
                    )
                ],
            ),
        ]
    )
    widget = {"model_id": "bar", "version_major": 2, "version_minor": 0}
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            "train()",
            outputs=[
                nbformat.v4.new_output(
                    "display_data",
                    data={WIDGET_VIEW: widget, "text/plain": "training: 100% 40/40 [00:05]"},
                )
            ],
        )
    )
    notebook.metadata["widgets"] = {
        WIDGET_STATE: {
            "state": {
                "bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_p"]}},
                "p": {
                    "model_name": "FloatProgressModel",
                    "state": {"_model_name": "FloatProgressModel", "value": 40, "max": 40},
                },
            }
        }
    }
    nbformat.write(notebook, folder / "03_time_concat.ipynb")
    nbformat.write(notebook, folder / "03_time_concat.partial.ipynb")  # a failed re-run
    (folder / TIME_CONCAT.summary).write_text(
        json.dumps({"claim": {"status": "reproduced", "line": CLAIM}, "runs": 12})
    )
    (folder / TOY.summary).write_text(json.dumps({"runs": 48}))  # no claim
    pl.DataFrame(
        {"variant": ["cat1", "cat4"], "shape mean": [61.54321, 64.25], "shape std": [1.234, 1.5]}
    ).write_parquet(folder / TIME_CONCAT.table3)
    pl.DataFrame({"x": [1]}).write_parquet(folder / TIME_CONCAT.training)
    paper.paper_vs_kit(
        fake_results({"cat1": [0.5, 0.6], "cat4": [0.6, 0.7]}), "heldout"
    ).write_parquet(folder / TIME_CONCAT.vs_paper)
    pl.DataFrame({"variant": ["cat4"], "gain_mean": [1.25], "p_adjusted": [0.5]}).write_parquet(
        folder / TIME_CONCAT.gains
    )
    (folder / "03_time_concat.parameters.yaml").write_text("profile: ci\nreplicates: 2\n")
    provenance.write(folder / "03_time_concat.provenance.json")
    return folder


def test_the_page_gathers_verdicts_tables_charts_notebooks_and_parameters(tmp_path: Path) -> None:
    folder = fake_outputs(tmp_path / "outputs" / "ci")
    written = page.write_report("ci", folder)
    assert written == folder / "index.html"
    text = written.read_text()
    assert CLAIM in text and 'class="claim good"' in text
    assert "time_concat_table3" in text and "61.5" in text and "61.54321" not in text
    assert "time_concat_training" not in text  # not a results table
    assert text.count("vegaEmbed('#chart") == 1  # the partial copy is not reported
    assert '"top1"' in text
    assert 'href="03_time_concat.html"' in text and (folder / "03_time_concat.html").exists()
    assert "03_time_concat.partial" not in text
    assert "replicates: 2" in text and metadata.version("timecat-kit") in text
    assert provenance.commit()[:12] in text and "03_time_concat.provenance.json" in text


def test_the_page_reads_like_a_results_section(tmp_path: Path) -> None:
    folder = fake_outputs(tmp_path / "ci")
    text = page.write_report("ci", folder).read_text()
    contents = text[text.index('<nav class="toc">') : text.index("</nav>")]
    assert '<a href="#the-kit-beside-the-paper">' in contents and 'href="#verdicts"' in contents
    beside = text[text.index('id="the-kit-beside-the-paper"') : text.index('id="result-tables"')]
    assert "<caption>Notebook 03, time-concat at a fixed budget" in beside
    rows = re.findall(r"<tr><td[^>]*>(cat\d)</td>", beside)
    assert list(dict.fromkeys(rows)) == ["cat1", "cat2", "cat4", "cat5"]
    assert "<th>kit − paper</th>" in beside
    # human headers, from the one mapping
    assert "<th>gain (points, mean)</th>" in text and "<th>p (Holm-adjusted)</th>" in text
    assert "<th>gain_mean</th>" not in text and "<th>p_adjusted</th>" not in text
    # the parameters folded, the provenance files linked
    assert re.search(r"<details><summary>[^<]*<a href=\"03_time_concat.parameters.yaml\">", text)
    assert '<a href="03_time_concat.provenance.json">' in text
    assert "<figcaption>03 · Accuracy</figcaption>" in text


def test_the_executed_notebooks_html_needs_no_script_from_the_network(tmp_path: Path) -> None:
    folder = fake_outputs(tmp_path / "ci")
    page.write_report("ci", folder)
    text = (folder / "03_time_concat.html").read_text()
    assert not re.search(r"<script[^>]*\bsrc=", text), "a script is fetched"
    assert (
        "<math" in text
        and "$\\varphi" not in text
        and re.search(r'<math[^>]*display="block"', text)
    )
    assert "$HOME" in text  # a code span is not math
    assert '<progress max="40" value="40">' in text and "training: 100%" in text
    assert "widget-view+json" not in text and 'id="kit-hide-code"' in text


def test_the_page_fetches_nothing(tmp_path: Path) -> None:
    text = page.write_report("ci", fake_outputs(tmp_path / "ci")).read_text()
    assert not re.search(r"<script[^>]*\bsrc=", text)
    assert not re.search(r"<link[^>]*\bhref=\"?https?:", text)
    assert "function vegaEmbed" in text or "vegaEmbed" in text.split("vegaEmbed('#chart")[0]


def test_a_folder_without_results_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    with pytest.raises(page.ReportError, match=re.escape(str(tmp_path))):
        page.write_report("nothing", tmp_path)
    assert not (tmp_path / "index.html").exists()
    assert cli.main(["report", "--profile", "no-such-profile-anywhere"]) == 2
    assert "no executed notebook" in capsys.readouterr().err


def test_every_claim_shows_its_outcome_badge_what_ran_and_the_verdict_table(tmp_path: Path) -> None:
    folder = fake_outputs(tmp_path / "ci")
    condition = outcomes.Condition(
        "cat4 vs cat1", "cat4", "cat1", ("shape", "position"), outcomes.estimate([1.0, 9.0, -3.0])
    )
    found = outcomes.outcome("time-concat", [condition], 2.9)
    (folder / TIME_CONCAT.summary).write_text(
        json.dumps(
            {
                "claim": {"status": found.status, "line": "time-concat line"},
                "claims": [
                    {"status": found.status, "line": "time-concat line"},
                    {"status": "reproduced", "line": "bottleneck line"},
                ],
                "ran": "What ran: profile ci; 3 replicates",
            }
        )
    )
    outcomes.table(found.rows).write_parquet(folder / TIME_CONCAT.verdicts)
    text = page.write_report("ci", folder).read_text()
    assert 'class="claim unsure"><span class="status">inconclusive' in text
    assert 'class="claim good"><span class="status">reproduced</span>bottleneck line' in text
    assert '<p class="ran">What ran: profile ci; 3 replicates</p>' in text
    assert "1.0, 9.0, -3.0" in text and "95% interval" in text  # the stored verdict table
