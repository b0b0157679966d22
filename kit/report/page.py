"""A report to share: `outputs/<profile>/index.html`, one page that opens offline.

It gathers what a run already wrote in its output folder: the verdicts (the `claim` of each
`*_summary.json`), the kit's tables set against the paper's (`*_table3.parquet`,
`*_gains.parquet`, `*_vs_paper.parquet`), every chart the executed notebooks display (their
Vega-Lite specs, drawn by Vega's JavaScript, which the page carries inline: nothing is fetched
when it is read), each executed notebook rendered as HTML beside it, and the parameters each
notebook ran with (`<notebook>.parameters.yaml`) with the kit version and commit. Inputs a
notebook read unverified (`<notebook>.notices.json`, kit.core.notices) are listed right after the
verdicts.

A folder holding a notebook's `<notebook>.incomplete` marker (written by `python -m kit run`
before the notebook starts, removed when it succeeds) is refused: a killed or failed run leaves
its result files beside an earlier run's, and no page should present them as one run's.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import polars as pl

from kit.core import notices, provenance
from kit.core.files import atomic_write
from kit.core.paths import resolve
from kit.report import outcomes, outputs, tables
from kit.report.charts import LAB_VEGALITE_MIME

PAGE = "index.html"
#: the marker of a notebook whose last run has not finished: `<notebook>.incomplete`
INCOMPLETE_SUFFIX = ".incomplete"
#: result tables the page shows (the kit's numbers beside the paper's), by file name ending
VERDICT_ENDING = "_verdicts.parquet"
TABLE_ENDINGS = (VERDICT_ENDING, "_table3.parquet", "_gains.parquet", "_vs_paper.parquet")
#: how the verdict statuses read
STATUS_CLASS = {
    "reproduced": "good",
    "contradicted": "bad",
    "inconclusive": "unsure",
    "untested (one budget)": "unsure",
    "depends on the budget": "unsure",
    "depends on the world": "unsure",
}
STYLE = """
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
table.dataframe { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1.5rem; }
table.dataframe th, table.dataframe td { border-bottom: 1px solid #ddd; padding: 0.2rem 0.6rem; }
.claim { padding: 0.4rem 0.8rem; border-left: 4px solid #999; background: #f6f6f6;
         margin: 0.4rem 0; }
.claim.good { border-color: #31a354; } .claim.bad { border-color: #d6616b; }
.claim.unsure { border-color: #e6a23c; } .ran { color: #555; font-size: 0.85rem; margin: 0 0 1rem; }
.status { font-weight: bold; text-transform: uppercase; font-size: 0.8rem; margin-right: 0.5rem; }
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
    if not notebooks and not list(folder.glob("*_summary.json")):
        raise ReportError(
            f"{folder}: no executed notebook or *_summary.json to report on; "
            f"run `python -m kit run --profile {profile}` first"
        )
    links = [render_notebook(path) for path in notebooks]
    specs = [(path.stem, spec) for path in notebooks for spec in chart_specs(path)]
    sections = [
        _section("Verdicts", verdicts(folder)),
        *(
            [_section("Read unverified", unverified_html(kept))]
            if (kept := notices.kept_notices(folder))
            else []
        ),
        _section("The kit's results beside the paper's", result_tables(folder)),
        _section("Charts", charts_html(specs)),
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
    with atomic_write(page) as handle:
        handle.write(
            _page(f"timecat-kit report: profile {profile}", sections, bool(specs)).encode()
        )
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


def chart_specs(notebook: Path) -> Iterator[dict[str, Any]]:
    """The Vega-Lite spec of every chart the executed notebook displays, in order."""
    for cell in nbformat.read(notebook, as_version=4).cells:
        for output in cell.get("outputs", []):
            spec = output.get("data", {}).get(LAB_VEGALITE_MIME)
            if spec:
                yield spec


def render_notebook(notebook: Path) -> Path:
    """The executed notebook as a standalone HTML page beside it (`<stem>.html`)."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(embed_images=True).from_notebook_node(
        nbformat.read(notebook, as_version=4)
    )
    target = notebook.with_suffix(".html")
    with atomic_write(target) as handle:
        handle.write(body.encode())
    return target


def verdicts(folder: Path) -> str:
    """Per notebook that recorded claims: each claim's outcome as a badge and its sentence, then
    the line saying what ran."""
    lines = []
    for path in sorted(folder.glob("*_summary.json")):
        for status, line in outputs.statements(json.loads(path.read_text())):
            if not status:
                lines.append(f'<p class="ran">{html.escape(line)}</p>')
                continue
            lines.append(
                f'<div class="claim {STATUS_CLASS.get(status, "")}"><span '
                f'class="status">{html.escape(status)}</span>{html.escape(line)} '
                f"<small>({html.escape(path.name)})</small></div>"
            )
    return "".join(lines) or "<p>No notebook of this run recorded a verdict.</p>"


def unverified_html(kept: dict[str, list[str]]) -> str:
    """The inputs each notebook read without being able to check them (kit.core.notices)."""
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


def result_tables(folder: Path) -> str:
    """Each result table, formatted as the notebooks show it."""
    paths = sorted(p for p in folder.glob("*.parquet") if p.name.endswith(TABLE_ENDINGS))
    if not paths:
        return "<p>No results table in this run's outputs.</p>"
    return "".join(
        f"<h3>{html.escape(p.stem)}</h3>{tables.table(read_table(p))._repr_html_()}" for p in paths
    )


def read_table(path: Path) -> pl.DataFrame:
    """A result table as the notebooks show it (a verdict table through `outcomes.view`);
    ReportError naming it when it cannot be read."""
    try:
        frame = outputs.read_parquet(path)
    except outputs.ResultFileError as error:
        raise ReportError(str(error)) from None
    return outcomes.view(frame) if path.name.endswith(VERDICT_ENDING) else frame


def charts_html(specs: list[tuple[str, dict[str, Any]]]) -> str:
    """A placeholder per chart and the script that draws them all with vegaEmbed."""
    if not specs:
        return "<p>No chart in the executed notebooks.</p>"
    divs, calls = [], []
    for i, (notebook, spec) in enumerate(specs):
        divs.append(
            f'<div class="chart"><small>{html.escape(notebook)}</small>'
            f'<div id="chart{i}"></div></div>'
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
        if recorded.exists():
            (made,) = provenance.read(recorded)
            parts.append(
                f"<p>{html.escape(stem)}: timecat-kit {html.escape(made['kit_version'])}"
                f", commit {html.escape(made['kit_commit'])}, Python "
                f"{html.escape(made['python'])}, torch "
                f"{html.escape(made['packages'].get('torch', '?'))}, run "
                f"{html.escape(made['written'])} (all package versions in "
                f"<code>{html.escape(recorded.name)}</code>).</p>"
            )
        parts.append(f"<h3>{html.escape(path.name)}</h3><pre>{html.escape(path.read_text())}</pre>")
    return "".join(parts)


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{body}</section>"


def _page(title: str, sections: list[str], with_charts: bool) -> str:
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
        f"<h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>"
    )
