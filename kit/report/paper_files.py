"""Tables and figures ready for a paper, written by `python -m kit report` beside what a run left:

- every result table the report shows (`<stem>.parquet`) as LaTeX (`<stem>.tex`: a `table`
  float with a booktabs `tabular`, headed in the label map's words, its numbers as the report
  prints them, kit.core.numbers; `\\input` it with `\\usepackage{booktabs}` in the preamble) and
  as CSV (`<stem>.csv`: the stored columns and every digit, lists joined with "; ", for a
  spreadsheet or another plotting tool);
- every chart an executed notebook displays and saves (`<name>.svg`, `<name>.png`, named in its
  spec's `usermeta`, kit.report.charts) also as PDF (`<name>.pdf`, drawn by vl-convert from the
  same Vega-Lite spec), for a LaTeX document's `\\includegraphics`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import polars as pl

from kit.core import files
from kit.report import charts, tables

#: what a character of a cell or header becomes in LaTeX (text mode, pdfLaTeX's fonts)
LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "−": r"$-$",
    "–": "--",
    "—": "---",
    "×": r"$\times$",
    "±": r"$\pm$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "…": r"\ldots{}",
    "·": r"$\cdot$",
    "→": r"$\rightarrow$",
    "∞": r"$\infty$",
    "’": "'",
}
#: a minus sign before a number ('-0.5', '[-1.2, +0.3]'), set as a math minus
_MINUS = re.compile(r"(?<![\w.])-(?=\d)")


def latex_text(text: str) -> str:
    """`text` as LaTeX typesets it: its special characters escaped, a number's minus a math
    minus, the kit's symbols (−, ×, ±, ...) as LaTeX writes them; any other character as it is
    (LaTeX reads UTF-8: an accented letter of a user's task name sets)."""
    return "".join(LATEX.get(char, char) for char in _MINUS.sub("−", text))


def latex_table(table: tables.Table, caption: str, label: str, source: str) -> str:
    """A table float (its caption, and the label `tab:<label>` with hyphens for underscores)
    with a booktabs tabular: the columns as `table.layout()` shows them (numbers
    right-aligned), the values every row shares in a note under it."""
    shown = table.layout()
    spec = "".join("r" if numeric else "l" for numeric in shown.numeric)
    lines = [
        f"% {source}, as the report shows it; written by `python -m kit report` "
        "(needs \\usepackage{booktabs})",
        "\\begin{table}[htbp]",
        "\\centering",
        "\\small",
        f"\\caption{{{latex_text(caption)}}}",
        f"\\label{{tab:{label.replace('_', '-')}}}",
        f"\\begin{{tabular}}{{{spec}}}",
        "\\toprule",
        " & ".join(latex_text(header) for header in shown.headers) + " \\\\",
        "\\midrule",
        *(" & ".join(latex_text(cell) for cell in row) + " \\\\" for row in shown.rows),
        "\\bottomrule",
        "\\end{tabular}",
    ]
    if shown.notes:
        shared = latex_text("; ".join(shown.notes))
        lines.append(f"\\par\\smallskip{{\\footnotesize In every row: {shared}.}}")
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


def csv_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` as CSV holds it: every digit kept, a list column's items joined with '; '."""
    return frame.with_columns(
        pl.col(column).cast(pl.List(pl.String)).list.join("; ")
        for column, dtype in frame.schema.items()
        if isinstance(dtype, pl.List)
    )


def write_table_files(
    path: Path, shown: pl.DataFrame, stored: pl.DataFrame, caption: str
) -> list[Path]:
    """`<stem>.tex` of the table as the report shows it (`shown`) and `<stem>.csv` of the table
    as stored, beside its parquet file `path`; returns their paths."""
    tex, csv = path.with_suffix(".tex"), path.with_suffix(".csv")
    files.write_text(tex, latex_table(tables.table(shown), caption, path.stem, path.name))
    with files.atomic_write(csv) as handle:
        csv_frame(stored).write_csv(handle)
    return [tex, csv]


#: the formats a chart is listed in, in order: what a paper takes first
CHART_FILES = ("pdf", "svg", "png")


def write_chart_pdfs(
    folder: Path, specs: Iterable[tuple[str, dict[str, Any]]]
) -> dict[str, list[Path]]:
    """`<name>.pdf` beside each saved chart of `specs` (caption and spec; its name from the
    spec's usermeta, kit.report.charts.saved_name), drawn by vl-convert from the spec;
    returns, by name, the chart's files in CHART_FILES's order that exist."""
    import vl_convert

    found: dict[str, list[Path]] = {}
    for _, spec in specs:
        name = charts.saved_name(spec)
        if name is None or name in found:
            continue
        pdf = folder / f"{name}.pdf"
        with files.atomic_write(pdf) as handle:
            handle.write(vl_convert.vegalite_to_pdf(spec))
        found[name] = [p for fmt in CHART_FILES if (p := folder / f"{name}.{fmt}").exists()]
    return found


def links(paths: Iterable[Path], text: Callable[[Path], str] = lambda p: p.suffix[1:]) -> str:
    """Links to `paths` (relative to the page beside them), each named by `text`: 'pdf, svg'."""
    import html

    return ", ".join(
        f'<a href="{html.escape(path.name)}">{html.escape(text(path))}</a>' for path in paths
    )
