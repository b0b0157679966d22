"""An executed notebook as a standalone HTML page that renders with no network.

nbconvert's `lab` template loads require.js, MathJax, Mermaid and the widget manager from public
CDNs; offline, its formulas show as raw LaTeX and its widgets as nothing. Here the page is built
from the same template without those scripts, and what they would have drawn is drawn at export:

- the LaTeX of markdown cells (`$...$`, `$$...$$`) becomes MathML (latex2mathml), which
  browsers render natively (MathML Core: Chromium 109, Firefox, Safari), so no script runs;
- a widget output becomes static HTML from the widget state the notebook saved: a progress bar
  an HTML `<progress>` element with its last text line, any other control a sentence saying it
  needs a running kernel (JupyterLab);
- a long line of code (papermill's injected parameters cell) wraps inside its cell rather than
  run past it, cut;
- a "Hide code" button (inline script, nothing fetched) shows the outputs and the prose alone;
  it sits above the first cell, never over a chart;
- the page is titled with the notebook's own title (its first heading);
- its last line stamps the notebook's and the renderer's sha256 (`stamp`), so that a report
  written again (after each notebook `kit run` runs, by `kit report`) renders anew only the
  notebooks that changed: about a second of CPU each on 2 cores.
"""

from __future__ import annotations

import hashlib
import html
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import nbformat
from jinja2 import DictLoader
from latex2mathml.converter import convert as to_mathml

from kit.files.files import atomic_write, file_hash

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
#: the `lab` template without its CDN scripts, with a button that hides the code cells' input
TEMPLATE = "kit_offline.html.j2"
_TEMPLATE_SOURCE = """{%- extends 'index.html.j2' -%}
{% block html_head_js_requirejs %}{% endblock %}
{% block html_head_js_mathjax %}{% endblock %}
{% block html_head_js_mermaidjs %}{% endblock %}
{% block jupyter_widgets %}{% endblock %}
{% block extra_css %}{{ super() }}
<style>
body.kit-hide-code .jp-CodeCell .jp-Cell-inputWrapper { display: none; }
#kit-hide-code { display: block; margin: 0.5rem 0.5rem 0 auto; }
.kit-widget { font-family: monospace; font-size: 0.85rem; padding: 0.2rem 0; }
.kit-widget progress { width: 12rem; vertical-align: middle; margin-right: 0.5rem; }
/* a long line of code (papermill's injected parameters) wraps inside its cell, never cut */
.jp-InputArea-editor .highlight pre { white-space: pre-wrap; overflow-wrap: anywhere; }
.jp-RenderedHTMLCommon table th { hyphens: auto; }
.kit-table-notes { margin: 0.2rem 0; }
</style>
{% endblock extra_css %}
{% block body_header %}{{ super() }}
<button id="kit-hide-code" type="button" onclick="document.body.classList.toggle(
'kit-hide-code'); this.textContent = document.body.classList.contains('kit-hide-code') ?
'Show code' : 'Hide code';">Hide code</button>
{% endblock body_header %}
"""
#: a code span (left alone), display math, inline math
_MATH = re.compile(
    r"(?P<code>`+[^`]*`+)|\$\$(?P<display>.+?)\$\$|(?<![\\$])\$(?P<inline>[^$\n]+?)\$", re.S
)


def latex_to_mathml(markdown: str, formulas: dict[str, str]) -> str:
    """The markdown with each `$...$` and `$$...$$` formula (code spans untouched) replaced by a
    placeholder word, its MathML kept in `formulas`: the markdown renderer would take MathML's
    tags apart, so the MathML goes into the page after it (`put_formulas`)."""

    def replace(match: re.Match[str]) -> str:
        if match["code"]:
            return match["code"]
        if match["display"] is not None:
            mathml = to_mathml(match["display"].strip(), display="block")
        else:
            mathml = to_mathml(match["inline"].strip())
        key = f"kitformula{len(formulas)}x"
        formulas[key] = mathml
        return key

    return _MATH.sub(replace, markdown)


def put_formulas(page: str, formulas: dict[str, str]) -> str:
    """The rendered page with every placeholder of `latex_to_mathml` replaced by its MathML."""
    if not formulas:
        return page
    return re.sub(r"kitformula\d+x", lambda m: formulas.get(m[0], m[0]), page)


def _widget_html(model_id: str, state: dict[str, Any], fallback: str) -> str:
    """A widget as static HTML: a progress bar as `<progress>` beside its text line; any other
    control as a sentence saying it needs a running kernel."""
    models = {key: value.get("state", {}) for key, value in state.items()}

    def bars(key: str) -> list[dict[str, Any]]:
        model = models.get(key, {})
        if model.get("_model_name") in ("FloatProgressModel", "IntProgressModel"):
            return [model]
        children = model.get("children", [])
        return [bar for child in children for bar in bars(str(child).removeprefix("IPY_MODEL_"))]

    found = bars(model_id)
    text = html.escape(fallback.strip())
    if found:
        bar = found[0]
        return (
            f'<div class="kit-widget"><progress value="{bar.get("value", 0)}" '
            f'max="{bar.get("max", 100)}"></progress>{text}</div>'
        )
    return (
        '<div class="kit-widget"><em>An interactive control: it needs a running kernel; open '
        "the notebook in JupyterLab to use it.</em></div>"
    )


def offline(notebook: nbformat.NotebookNode, formulas: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of `notebook` that needs no script to render: its formulas as placeholders (their
    MathML in `formulas`), its widgets static."""
    copy = nbformat.from_dict(notebook)
    state = copy.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in copy.cells:
        if cell.cell_type == "markdown":
            cell.source = latex_to_mathml(cell.source, formulas)
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:
                view = data.pop(WIDGET_VIEW)
                fallback = data.pop("text/plain", "")
                data["text/html"] = _widget_html(view.get("model_id", ""), state, fallback)
    return copy


def title(notebook: nbformat.NotebookNode, default: str) -> str:
    """The notebook's title: the text of its first heading, else `default`."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return default


def stamp(notebook: Path) -> str:
    """The last line of `notebook`'s page: the sha256 of the notebook's bytes and of what
    renders it (this module's source, nbconvert's and latex2mathml's versions)."""
    renderer = hashlib.sha256(Path(__file__).read_bytes())
    for package in ("nbconvert", "latex2mathml"):
        renderer.update(metadata.version(package).encode())
    digest = file_hash(notebook)
    return f"<!-- rendered from {notebook.name} sha256 {digest} by {renderer.hexdigest()} -->\n"


def _stamped(page: Path, line: str) -> bool:
    """Whether `page` exists and ends with `line`."""
    if not page.is_file():
        return False
    with page.open("rb") as handle:
        handle.seek(max(0, page.stat().st_size - len(line.encode())))
        return handle.read() == line.encode()


def render(notebook: Path) -> Path:
    """The executed notebook as a standalone offline HTML page beside it (`<stem>.html`),
    titled with the notebook's title; kept as it is where its stamp says it was rendered from
    these bytes by this renderer (without importing nbconvert)."""
    target, line = notebook.with_suffix(".html"), stamp(notebook)
    if _stamped(target, line):
        return target
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        embed_images=True,
        template_file=TEMPLATE,
        extra_loaders=[DictLoader({TEMPLATE: _TEMPLATE_SOURCE})],
    )
    formulas: dict[str, str] = {}
    read = nbformat.read(notebook, as_version=4)
    named = {"metadata": {"name": title(read, notebook.stem)}}
    body, _ = exporter.from_notebook_node(offline(read, formulas), resources=named)
    with atomic_write(target) as handle:
        handle.write(f"{put_formulas(body, formulas).rstrip()}\n{line}".encode())
    return target
