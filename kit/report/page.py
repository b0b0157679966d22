"""A report to share: `outputs/<profile>/index.html`, one page that opens offline.

It names the paper with the version whose numbers it quotes (kit.readout.citation) and the machine
the notebooks ran on (their provenance), then gathers what a run already wrote in its output
folder, under a table of contents: the verdicts (kit.report.verdicts_html: the `claim` of each
`*_summary.json`, in a table to scan and one short sentence each) with the line saying what
ran, one table per experiment setting the paper's values and the kit's side by side
(`*_vs_paper.parquet`), the other result tables (`*_verdicts.parquet`, `*_table3.parquet`,
`*_gains.parquet`), each captioned and headed in words (kit.report.labels) in as many columns as
fit its box, every chart the executed notebooks display (their Vega-Lite specs, drawn by Vega's
JavaScript, which the page carries inline: nothing is fetched when it is read), each executed
notebook rendered as HTML beside it, and the parameters each notebook ran with
(`<notebook>.parameters.yaml`, folded) with the kit version and commit, each file linked. Every
table is also written as LaTeX and CSV, every saved chart as PDF (kit.report.paper_files), and
linked under it. Inputs a notebook read unverified
(`<notebook>.notices.json`, kit.readout.notices) are listed right after the verdicts.

A folder holding a notebook's `<notebook>.incomplete` marker (written by `python -m kit run`
before the notebook starts, removed when it succeeds) is refused: a killed or failed run leaves
its result files beside an earlier run's, and no page should present them as one run's.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import polars as pl

from kit.files.files import atomic_write
from kit.files.paths import resolve
from kit.readout import notices
from kit.readout.citation import PAPER
from kit.report import charts, notebook_html, outputs, paper_files, tables, verdicts_html
from kit.report.chart_captions import chart_caption
from kit.report.charts import VEGALITE_MIME
from kit.report.labels import label
from kit.runtime import provenance
from kit.stats import outcomes

PAGE = "index.html"
#: the marker of a notebook whose last run has not finished: `<notebook>.incomplete`
INCOMPLETE_SUFFIX = ".incomplete"
#: the paper-vs-kit tables (kit.experiments.timecat.paper), one per experiment, by file name
VS_PAPER_ENDING = "_vs_paper.parquet"
#: the other result tables the page shows, by file name ending
VERDICT_ENDING = verdicts_html.VERDICT_ENDING
TABLE_ENDINGS = (VERDICT_ENDING, "_table3.parquet", "_gains.parquet")
#: what each result table is, by its file's stem (others read as their stem in words)
CAPTIONS = {
    "table2_gains": "Notebook 02: the paper's published Table 2, as differences in points "
    "(no kit measurement).",
    "table3_gains": "Notebook 02: the paper's published Table 3, catN minus cat1 in points "
    "(no kit measurement).",
    "time_concat_vs_paper": "Notebook 03, time-concat at a fixed budget, beside the paper's "
    "Table 3 (Section 5.1), in the paper's order. Paper: ResNet-50 pretrained on ImageNet-1k, one "
    "value per cell; kit: mean and standard deviation over replicates, its tasks standing for "
    "the paper's datasets by role (the pretraining mixture for ImageNet-1k, the tasks the "
    "pretraining did not train on for iNat18, CIFAR-100 and CIFAR-10).",
    "time_concat_verdicts": "Notebook 03: each claim's conditions, judged on its primary "
    "endpoint (time-concat: Section 5.1, Table 3; the bottleneck: Sections 3-4).",
    "time_concat_table3": "Notebook 03: linear-probe top-1 % of every variant on every task, "
    "mean and standard deviation over replicates, in the layout of the paper's Table 3; width "
    "is a variant's against cat1's, and compute its cost in cat1's iterations (models × width² "
    "× iterations per model: an iteration of a model twice as wide costs four of cat1's).",
    "time_concat_gains": "Notebook 03, secondary and exploratory: each variant minus the "
    "baseline on each task, paired by replicate, Holm-adjusted over the tasks of a comparison.",
    "sweep_vs_paper": "Notebook 04, the budget sweep, beside the paper's Table 3 (Section 5.1), "
    "in the paper's order and per total budget; kit: mean and standard deviation over every "
    "world seed's replicates, its tasks standing for the paper's datasets by role.",
    "sweep_verdicts": "Notebook 04: the time-concat claim's conditions in every cell of the "
    "sweep (world seed, total budget).",
}
STYLE = """
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
.table { max-width: 100%; margin: 0.5rem 0 1.5rem; }
.table table.dataframe { margin: 0; }
table.dataframe { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1.5rem;
                  max-width: 100%; }
table.dataframe th, table.dataframe td { border-bottom: 1px solid #ddd; padding: 0.2rem 0.4rem; }
table.dataframe th { vertical-align: bottom; hyphens: auto; }
.kit-table-notes { font-size: 0.85rem; color: #444; margin: 0.2rem 0; }
caption { caption-side: top; text-align: left; color: #444; font-size: 0.9rem;
          padding: 0 0 0.3rem; }
nav.toc { background: #f6f6f6; padding: 0.4rem 1rem; margin: 0 0 1.5rem; }
nav.toc ol { margin: 0.2rem 0; } details { margin: 0.3rem 0 1rem; }
.chart { overflow-x: auto; max-width: 100%; }
.claim { padding: 0.4rem 0.8rem; border-left: 4px solid #999; background: #f6f6f6;
         margin: 0.4rem 0; }
.claim.good { border-color: #31a354; } .claim.bad { border-color: #d6616b; }
.claim.unsure { border-color: #e6a23c; }
.claim details { margin: 0.2rem 0 0; font-size: 0.9rem; }
.ran { color: #555; font-size: 0.85rem; margin: 0 0 1rem; }
.status { font-weight: bold; text-transform: uppercase; font-size: 0.8rem; margin-right: 0.5rem; }
.badge { font-weight: bold; text-transform: uppercase; font-size: 0.75rem; padding: 0.1rem 0.4rem;
         border-radius: 0.3rem; background: #eee; white-space: nowrap; }
.badge.good { background: #c7e9c0; } .badge.bad { background: #fcbba1; }
.badge.unsure { background: #fdd0a2; } p.paper { font-size: 1.05rem; }
p.machine { color: #555; font-size: 0.9rem; margin-top: -0.5rem; }
.chart { margin: 0.5rem 0 1.5rem; } pre { background: #f6f6f6; padding: 0.6rem; overflow: auto; }
"""


class ReportError(Exception):
    """The report cannot be written: its message names the folder and what is missing."""


def write_report(profile: str, folder: Path | None = None) -> Path:
    """Write the report of `profile`'s outputs (`folder`, default `outputs/<profile>`) and the
    HTML of each executed notebook it links to; returns the page's path."""
    folder = resolve(Path("outputs") / profile) if folder is None else folder
    unfinished = incomplete_notebooks(folder)
    if unfinished:
        raise ReportError(
            f"{folder}: the last run of {', '.join(unfinished)} did not finish (killed, failed "
            "or still running), so this folder may mix its result files with an earlier run's; "
            f"re-run `python -m kit run {' '.join(unfinished)} --profile {profile}` to complete "
            "it, then the report"
        )
    notebooks = executed_notebooks(folder)
    if not notebooks and not list(folder.glob(f"*{outputs.SUMMARY_SUFFIX}")):
        raise ReportError(
            f"{folder}: no executed notebook or *_summary.json to report on; "
            f"run `python -m kit run --profile {profile}` first"
        )
    links = [notebook_html.render(path) for path in notebooks]
    specs = [(caption, spec) for path in notebooks for caption, spec in chart_specs(path)]
    sections = [
        _section("Verdicts", verdicts_html.verdicts(folder, read_table_raw)),
        *(
            [_section("Read unverified", unverified_html(kept))]
            if (kept := notices.kept_notices(folder))
            else []
        ),
        _section("The kit beside the paper", paper_tables(folder)),
        _section("Result tables", result_tables(folder)),
        _section("Charts", charts_html(specs, paper_files.write_chart_pdfs(folder, specs))),
        _section(
            "Executed notebooks",
            "<ul>"
            + "".join(
                f'<li><a href="{html.escape(link.name)}">{html.escape(link.stem)}</a></li>'
                for link in links
            )
            + "</ul>"
            if links
            else "<p>No executed notebook.</p>",
        ),
        _section("Parameters and version", provenance_html(folder)),
    ]
    page = folder / PAGE
    title = f"timecat-kit report: profile {profile}"
    with atomic_write(page) as handle:
        handle.write(_page(title, machine_html(folder), sections, bool(specs)).encode())
    return page


def incomplete_marker(executed: Path) -> Path:
    """The marker saying that the notebook whose executed copy is `executed` is being run, or
    that its last run did not finish."""
    return executed.with_suffix(INCOMPLETE_SUFFIX)


def incomplete_notebooks(folder: Path) -> list[str]:
    """The notebooks whose last run in `folder` did not finish (their marker is there)."""
    return sorted(
        p.name.removesuffix(INCOMPLETE_SUFFIX) for p in folder.glob(f"*{INCOMPLETE_SUFFIX}")
    )


def executed_notebooks(folder: Path) -> list[Path]:
    """The executed copies in `folder` (not the partial ones of a run that failed)."""
    return sorted(p for p in folder.glob("*.ipynb") if not p.name.endswith(".partial.ipynb"))


def chart_specs(notebook: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The caption and Vega-Lite spec of every chart the executed notebook displays, in order:
    the notebook's title number, the heading of the section showing the chart and what the
    chart shows (kit.report.chart_captions)."""
    number = notebook.stem.split("_", 1)[0]
    heading = notebook.stem
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type == "markdown":
            titles = [ln.lstrip("#").strip() for ln in cell.source.splitlines() if ln[:1] == "#"]
            heading = titles[-1] if titles else heading
        for output in cell.get("outputs", []):
            spec = output.get("data", {}).get(VEGALITE_MIME)
            if spec:
                title = heading if heading.startswith(number) else f"{number} · {heading}"
                yield chart_caption(title, charts.saved_name(spec)), spec


def unverified_html(kept: dict[str, list[str]]) -> str:
    """The inputs each notebook read without being able to check them (kit.readout.notices)."""
    return (
        "<p>These inputs were read without a way to check their content; the results "
        "above rest on them.</p><ul>"
        + "".join(
            f"<li>{html.escape(notebook)}: {html.escape(line)}</li>"
            for notebook, lines in kept.items()
            for line in lines
        )
        + "</ul>"
    )


def paper_tables(folder: Path) -> str:
    """One table per experiment setting the paper's values and the kit's side by side."""
    paths = sorted(folder.glob(f"*{VS_PAPER_ENDING}"), key=_in_notebook_order)
    if not paths:
        return "<p>No experiment of this run set its numbers beside the paper's.</p>"
    return "".join(captioned_table(p) for p in paths)


def result_tables(folder: Path) -> str:
    """Each result table, formatted as the notebooks show it."""
    paths = sorted(
        (p for p in folder.glob("*.parquet") if p.name.endswith(TABLE_ENDINGS)),
        key=_in_notebook_order,
    )
    if not paths:
        return "<p>No results table in this run's outputs.</p>"
    return "".join(captioned_table(p) for p in paths)


def _in_notebook_order(path: Path) -> tuple[int, str]:
    """Tables in the order of CAPTIONS (the notebooks' order), others after them by name."""
    order = list(CAPTIONS)
    return (order.index(path.stem) if path.stem in order else len(order), path.name)


def captioned_table(path: Path) -> str:
    """A result table with its caption (what it is, its file and the same table as LaTeX and
    CSV linked: kit.report.paper_files writes them), in as many columns as fit its box
    (kit.report.tables.Table.layout)."""
    caption = CAPTIONS.get(path.stem, label(path.stem).capitalize() + ".")
    frame = read_table(path)
    written = paper_files.write_table_files(path, frame, read_table_raw(path), caption)
    shown = tables.table(frame)._repr_html_()
    body = shown.replace(
        '<table class="dataframe">',
        f'<table class="dataframe"><caption>{html.escape(caption)} <small>('
        f"{paper_files.links([path, *written], lambda p: p.name)})</small></caption>",
        1,
    )
    return f'<div class="table" id="{html.escape(path.stem)}">{body}</div>'


def read_table_raw(path: Path) -> pl.DataFrame:
    """A result table as stored; ReportError naming it when it cannot be read."""
    try:
        return outputs.read_parquet(path)
    except outputs.ResultFileError as error:
        raise ReportError(str(error)) from None


def read_table(path: Path) -> pl.DataFrame:
    """A result table as the notebooks show it (a verdict table through `outcomes.view`)."""
    frame = read_table_raw(path)
    return outcomes.view(frame) if path.name.endswith(VERDICT_ENDING) else frame


def charts_html(
    specs: list[tuple[str, dict[str, Any]]], saved: dict[str, list[Path]] | None = None
) -> str:
    """A placeholder per chart, captioned (with its files for a paper linked where `saved`
    names them: PDF, SVG, PNG), and the script that draws them all with vegaEmbed."""
    if not specs:
        return "<p>No chart in the executed notebooks.</p>"
    divs, calls = [], []
    for i, (notebook, spec) in enumerate(specs):
        found = (saved or {}).get(charts.saved_name(spec) or "", [])
        names = paper_files.links(found, lambda p: p.name)
        files_of = f" <small>({names})</small>" if found else ""
        divs.append(
            f'<figure class="chart"><div id="chart{i}"></div>'
            f"<figcaption>{html.escape(notebook)}{files_of}</figcaption></figure>"
        )
        # "</" must not end the script element early, whatever a spec's strings contain
        inline = json.dumps(spec).replace("</", "<\\/")
        calls.append(
            f"vegaEmbed('#chart{i}', {inline}, "
            "{actions: false}).catch(e => { document.getElementById("
            f"'chart{i}').textContent = 'chart could not be drawn: ' + e; }});"
        )
    return "".join(divs) + "<script>\n" + "\n".join(calls) + "\n</script>"


def provenance_html(folder: Path) -> str:
    """What produced each notebook's results (its `.provenance.json`: kit commit, Python,
    package versions) and the parameters it ran with."""
    parts = []
    for path in sorted(folder.glob("*.parameters.yaml")):
        stem = path.name.removesuffix(".parameters.yaml")
        recorded = folder / f"{stem}.provenance.json"
        parts.append(f"<h3>{html.escape(stem)}</h3>")
        if recorded.exists():
            (made,) = provenance.read(recorded)
            parts.append(
                f"<p>timecat-kit {html.escape(made['kit_version'])}"
                f", commit {html.escape(made['kit_commit'])}, Python "
                f"{html.escape(made['python'])}, torch "
                f"{html.escape(made['packages'].get('torch', '?'))}, run "
                f"{html.escape(made['written'])} (all package versions in "
                f'<a href="{html.escape(recorded.name)}">{html.escape(recorded.name)}</a>).</p>'
            )
        parts.append(
            f"<details><summary>the parameters it ran with (<a "
            f'href="{html.escape(path.name)}">{html.escape(path.name)}</a>)</summary>'
            f"<pre><code>{html.escape(path.read_text())}</code></pre></details>"
        )
    return "".join(parts)


def machine_html(folder: Path) -> str:
    """Where the notebooks ran, one line per machine naming its notebooks (their
    `.provenance.json`): host, CPU, cores, OS, torch and Python."""
    machines: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.provenance.json")):
        (made,) = provenance.read(path)
        machines.setdefault(provenance.ran_on(made), []).append(path.name.split("_", 1)[0])
    return "".join(
        f'<p class="machine">Ran on {html.escape(line)} (notebook{"s" * (len(stems) > 1)} '
        f"{html.escape(', '.join(stems))}).</p>"
        for line, stems in machines.items()
    )


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _section(title: str, body: str) -> str:
    return f'<section id="{_anchor(title)}"><h2>{html.escape(title)}</h2>{body}</section>'


def _contents(sections: list[str]) -> str:
    """The table of contents: a link to each section."""
    found = [re.match(r'<section id="([^"]+)"><h2>(.*?)</h2>', s) for s in sections]
    items = "".join(f'<li><a href="#{m[1]}">{m[2]}</a></li>' for m in found if m)
    return f'<nav class="toc"><strong>Contents</strong><ol>{items}</ol></nav>'


def _page(title: str, machine: str, sections: list[str], with_charts: bool) -> str:
    """The whole page; with charts, Vega, Vega-Lite and vega-embed inlined before them."""
    script = ""
    if with_charts:
        import vl_convert

        # vl_convert's stub omits the default snippet (the libraries as window globals)
        bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]
        script = f"<script>{bundle}</script>"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>'
        f"{html.escape(title)}</title><style>{STYLE}</style>{script}</head><body>"
        f"<h1>{html.escape(title)}</h1>{PAPER.html()}{machine}{_contents(sections)}"
        f"{''.join(sections)}"
        "</body></html>"
    )
