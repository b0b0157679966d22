"""The shared report page: built from what a run wrote, self-contained, refusing an empty folder."""

from __future__ import annotations

import html
import io
import json
import re
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import altair as alt
import nbformat
import polars as pl
import pytest
from test_timecat import fake_results

from kit.cli import main as cli
from kit.experiments import evidence, evidence_charts, toy_charts
from kit.experiments.timecat import paper
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.experiments.toy_settings import TOY
from kit.launch.progress import shown
from kit.readout.citation import PAPER
from kit.report import labels, page, tables
from kit.report.charts import VEGALITE_MIME
from kit.report.labels import LABELS
from kit.report.notebook_html import WIDGET_STATE, WIDGET_VIEW
from kit.runtime import provenance
from kit.stats import outcomes
from kit.train import loop_steps, trainer

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
            nbformat.v4.new_markdown_cell(f"# 03 · time-concat\n\n{PAPER.markdown()}"),
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


def test_the_page_says_where_it_ran_under_the_papers_line(tmp_path: Path) -> None:
    """The machine, CPU, cores, OS, torch and Python of the notebooks' provenance, right under
    the paper's line, above the contents; a record from before cores were kept still reads."""
    folder = fake_outputs(tmp_path / "ci")
    made = provenance.read(folder / "03_time_concat.provenance.json")[0]
    (folder / "01_toy_counterexample.provenance.json").write_text(
        json.dumps({key: value for key, value in made.items() if key != "cores"})
    )
    text = page.write_report("ci", folder).read_text()
    top = text[text.index("</h1>") : text.index('<nav class="toc">')]
    shown = html.unescape(re.sub(r"<[^>]+>", " ", top))
    numerics = made["cpu_numerics"]
    for part in (
        made["host"],
        numerics["cpu"],
        numerics["machine"],
        f"{made['cores']} cores",
        made["platform"],
        f"torch {made['packages']['torch']}",
        f"Python {made['python']}",
        "(notebook 03)",
        "(notebook 01)",
    ):
        assert part in shown, (part, shown)
    assert shown.index(f"arXiv {PAPER.arxiv_id}") < shown.index(numerics["cpu"])


def test_the_page_reads_like_a_results_section(tmp_path: Path) -> None:
    folder = fake_outputs(tmp_path / "ci")
    text = page.write_report("ci", folder).read_text()
    contents = text[text.index('<nav class="toc">') : text.index("</nav>")]
    assert '<a href="#the-kit-beside-the-paper">' in contents and 'href="#verdicts"' in contents
    beside = text[text.index('id="the-kit-beside-the-paper"') : text.index('id="result-tables"')]
    assert "<caption>Notebook 03, time-concat at a fixed budget" in beside
    rows = re.findall(r"<tr><td[^>]*>(cat\d)</td>", beside)
    assert list(dict.fromkeys(rows)) == ["cat1", "cat2", "cat4", "cat5"]
    # the paper named with its version above everything; nothing is subtracted from the
    # paper's, a gain no more than an accuracy (the kit's synthetic tasks are not the paper's
    # datasets): the kit's numbers stand beside the paper's, every row saying so once
    assert text.index(PAPER.html()) < text.index('<nav class="toc">')
    assert f"<th>paper&#x27;s number (arXiv {PAPER.arxiv_id})</th>" in beside
    assert "<th>kit − paper</th>" not in beside and "yes: a gain over cat1" not in beside
    shared = re.search(r"In every row: ([^<]*)\.</td>", beside)
    assert shared is not None and "kit − paper: –" in html.unescape(shared[1])
    assert html.escape(paper.NOT_COMPARABLE) in shared[1]
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


def test_notebook_03s_claims_come_before_notebook_04s_restatement(tmp_path: Path) -> None:
    folder = fake_outputs(tmp_path / "ci")
    (folder / "sweep_summary.json").write_text(
        json.dumps({"claim": {"status": "untested (one budget)", "line": "sweep line"}})
    )
    text = page.write_report("ci", folder).read_text()
    assert text.index(CLAIM) < text.index("sweep line")


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
                    {"claim": "time-concat", "status": found.status, "line": "time-concat line"},
                    {"claim": "bottleneck", "status": "reproduced", "line": "bottleneck line"},
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
    assert "+1.0, +9.0, −3.0" in text and "95% interval" in text  # the stored verdict table
    # a table to scan above the sentences: outcome badge, effect [interval], detectable effect
    start = text.index('<table class="dataframe verdicts">')
    scan = text[start : text.index("</table>", start)]
    assert '<span class="badge unsure">inconclusive</span>' in scan
    assert re.search(r"<td>\+2\.3 \[−[0-9.]+, \+[0-9.]+\]</td>", scan)
    assert start < text.index("time-concat line")


def test_each_sweep_row_is_badged_with_its_own_cells_outcome_and_stop(tmp_path: Path) -> None:
    """A sweep's verdict table: every row's badge is its own cell's outcome in the summary (not
    the sweep's one statement), and a stop reason is shown only where the cell stopped for one
    that is not its outcome, as the cell's rows recorded it."""
    folder = fake_outputs(tmp_path / "ci")
    planted = {(0, 60): ("inconclusive", "first round only"), (0, 240): ("reproduced", None)}
    rows, cells = [], []
    for (world, budget), (status, stop) in planted.items():
        values = [6.0, 6.2, 6.1] if status == "reproduced" else [1.0, 9.0, -3.0]
        for against in ("cat1", "wide1-eq"):
            condition = outcomes.Condition(
                f"cat4 vs {against}", "cat4", against, ("shape",), outcomes.estimate(values)
            )
            row = outcomes.outcome("time-concat", [condition], 2.9).rows[0]
            rows.append(row | {"world_seed": world, "budget": budget, "stopped": stop or status})
        cells.append({"world_seed": world, "budget": budget, "status": status, "line": "cell"})
    (folder / "sweep_summary.json").write_text(
        json.dumps(
            {"claim": {"claim": "time-concat", "status": "inconclusive", "line": "sweep"}}
            | {"cells": cells}
        )
    )
    extra = {"world_seed": pl.Int64, "budget": pl.Int64}
    outcomes.table(rows, extra).write_parquet(folder / "sweep_verdicts.parquet")
    text = page.write_report("ci", folder).read_text()
    start = text.index("sweep_verdicts.parquet")
    table = text[start : text.index("</table>", start)]
    shown = re.findall(
        r"<tr><td>(\d+)</td><td>(\d+)</td><td>[^<]*</td><td><span class=\"badge \w*\">(\w+)"
        r"</span></td>.*?<td>(\d+ rounds?[^<]*)</td></tr>",
        table,
    )
    assert len(shown) == len(rows)
    for world, budget, badge, ran in shown:
        status, stop = planted[int(world), int(budget)]
        assert badge == status
        assert ran == ("1 round" + (f", stopped: {stop}" if stop else ""))


def test_a_claim_reads_in_one_short_sentence_its_detail_folded(tmp_path: Path) -> None:
    """A claim's block says its title and how many rounds it took, its conditions folded in a
    closed <details>; the verdict table's rounds never repeat the outcome beside them, and a
    decided condition shows no replicates to detect an effect."""
    folder = fake_outputs(tmp_path / "ci")
    condition = outcomes.Condition(
        "cat4 vs cat1", "cat4", "cat1", ("shape",), outcomes.estimate([3.0, 3.2, 3.1])
    )
    found = outcomes.outcome("time-concat", [condition], 2.9)
    long = outcomes.condition_words(found.rows[0]) + " and much more detail" * 40
    claim = {
        "claim": "time-concat",
        "status": found.status,
        "title": "time-concat transfers better",
        "how": " after 1 round (3 replicates)",
        "line": f"Claim: time-concat transfers better: REPRODUCED — {long}",
        "conditions": [long],
    }
    (folder / TIME_CONCAT.summary).write_text(json.dumps({"claims": [claim], "ran": "ran"}))
    rows = [row | {"rounds": 1, "stopped": found.status} for row in found.rows]
    outcomes.table(rows).write_parquet(folder / TIME_CONCAT.verdicts)
    text = page.write_report("ci", folder).read_text()
    block = re.search(r'<div class="claim good">(.*?)</div>', text, re.S)[1]
    shown, folded = block.split("<details>", 1)
    assert "time-concat transfers better after 1 round (3 replicates)" in shown
    assert len(re.sub(r"<[^>]+>", "", shown)) < 120 and "much more detail" in folded
    scan = text[text.index('<table class="dataframe verdicts">') :]
    assert "<td>1 round</td>" in scan and "round(s)" not in text
    assert "replicates to detect the smallest effect (where undecided)</th>" in text
    assert outcomes.view(outcomes.table(rows))[
        "replicates to detect the smallest effect (where undecided)"
    ].to_list() == [None]


def test_no_chart_or_table_of_the_report_shows_a_code_name(tmp_path: Path) -> None:
    """Every field a reader sees is titled through the one label map: no key of LABELS shows
    as a table header of the report or as an axis, legend or tooltip title of the toy's
    charts (the executed notebooks' charts are checked in test_notebook_results)."""
    text = page.write_report("ci", fake_outputs(tmp_path / "ci")).read_text()
    headers = {html.unescape(h) for h in re.findall(r"<th>([^<]*)</th>", text)}
    assert not headers & set(LABELS), headers & set(LABELS)
    runs = pl.DataFrame({"dominant": ["A"], "share": [0.4], "kept": ["phi1"]})
    concat = pl.DataFrame({"share": [0.4, 0.4], "k": [1, 2], "components_solved": [2, 4]})
    sweep = pl.DataFrame({"weight_decay": [1e-3], "kept": ["phi1"]})
    for chart in (
        toy_charts.kept_chart(runs),
        toy_charts.concat_chart(concat),
        toy_charts.sparsity_chart(sweep),
    ):
        assert labels.raw_names(chart.to_dict()) == []
    # the check itself finds a code name shown as a title
    raw = alt.Chart(sweep).mark_bar().encode(x="weight_decay:O", tooltip=["kept"]).to_dict()
    assert sorted(labels.raw_names(raw)) == ["kept", "weight_decay"]


def test_notebook_02_and_a_launch_show_no_code_name(tmp_path: Path) -> None:
    """Notebook 02's legend and its printed Table 2 say how a value was obtained in words (not
    'read_from_figure'), its Table 2 comparisons' headers and its difference chart's bars name
    the models (not 'cat4resnet50 − resnet50w2'); a launch names a run as 'replicate 0, cat1,
    seed 0' and a trainer's bar its rate in img/s."""
    published = pl.DataFrame(
        {
            "study": ["paper"] * 2,
            "method": ["cat4resnet50", "resnet50w2"],
            "architecture": ["cat4resnet50", "resnet50w2"],
            "eval_dataset": ["CIFAR-10"] * 2,
            "value": [93.0, 92.0],
            "value_source": ["table", "read_from_figure"],
            "uncertainty": [None, 0.2],
        }
    )
    spec = evidence_charts.dot_plot(published, "architecture", "Table 2").to_dict()
    assert labels.raw_names(spec) == []
    assert "read from the authors' figure" in json.dumps(spec)
    for comparison in ("cat4resnet50_minus_resnet50w2", "resnet50w2_minus_resnet50"):
        assert not re.search(r"cat\d|resnet50w|_", labels.label(comparison)), comparison
    printed = tables.table(evidence.as_printed(published, ["architecture", "value_source"]))
    assert [row[1] for row in printed.cells()] == [
        labels.VALUES["table"],
        labels.VALUES["read_from_figure"],
    ]
    assert "read_from_figure" not in printed._repr_html_() + repr(printed)
    bars = evidence_charts.table2_gain_frame(
        evidence.ensemble_gains(evidence.load_all()["table2"])
    )["comparison"]
    assert not [bar for bar in bars if re.search(r"cat\d|resnet50w|_", bar)], bars.unique()
    assert shown("rep0__cat1__seed0") == "replicate 0, cat1, seed 0"
    direct = labels.value_text("variant", "direct-shape")  # one name, the label map's
    assert shown("rep0__direct-shape__seed0") == f"replicate 0, {direct}, seed 0"
    bar = trainer.tqdm(total=10, file=io.StringIO())
    run = SimpleNamespace(
        folder=SimpleNamespace(metrics=tmp_path / "metrics.jsonl"),
        log_scalars=lambda record: None,
        progress=bar,
        at=SimpleNamespace(step=1),
    )
    loop_steps._log(run, {"step": 1, "loss": 0.5, "images_per_s": 1220.0})
    assert str(bar).endswith("loss 0.500, 1220 img/s]"), str(bar)
