"""Tables and figures ready for a paper, written by `python -m kit report` beside what a run left:

- every result table the report shows (`<stem>.parquet`) as LaTeX (`<stem>.tex`: a `table`
  float with a booktabs `tabular`, headed in the label map's words, its numbers as the report
  prints them, kit.readout.numbers, laid out to fit a plain `article` page, A4 or US letter,
  without scaling: `latex_table`; `\\input` it with `\\usepackage{booktabs,array}` in the
  preamble) and
  as CSV (`<stem>.csv`: the stored columns and every digit, lists joined with "; ", each
  headed in snake_case words, `csv_name`, for a spreadsheet or another plotting tool);
- every chart an executed notebook displays and saves (`<name>.svg`, `<name>.png`, named in its
  spec's `usermeta`, kit.report.charts) also as PDF (`<name>.pdf`, drawn by vl-convert from the
  same Vega-Lite spec), for a LaTeX document's `\\includegraphics`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from kit.files import files
from kit.report import charts, tables
from kit.report.labels import label

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
    "²": r"$^2$",
    "φ": r"$\varphi$",
    "’": "'",
}
#: a minus sign before a number ('-0.5', '[-1.2, +0.3]'), set as a math minus
_MINUS = re.compile(r"(?<![\w.])-(?=\d)")


def latex_text(text: str) -> str:
    """`text` as LaTeX typesets it: its special characters escaped, a number's minus a math
    minus, the kit's symbols (−, ×, ±, ...) as LaTeX writes them; any other character as it is
    (LaTeX reads UTF-8: an accented letter of a user's task name sets)."""
    return "".join(LATEX.get(char, char) for char in _MINUS.sub("−", text))


#: the text width and height (pt) of a plain `article` page at 10pt with default margins, the
#: smaller of A4's (345 x 598) and US letter's (345 x 550): a table is laid out to fit both
TEXT_WIDTH, TEXT_HEIGHT = 345.0, 550.0
#: a text cell longer than this (characters) moves under the table as a note, its cell saying
#: which ('note a'): a source or a list of tasks reads as a sentence, not as a column
NOTE_CHARS = 40
#: widths (pt at 10pt) of Computer Modern's characters, by class, rounded up: what a cell's width
#: is estimated from (the rest: a lower-case letter's)
_NARROW, _WIDE = set("ijlft.,;:'!()[]|/ "), set("mwMW%")
_CHAR_PT = {"narrow": 3.4, "wide": 8.9, "upper": 8.2, "symbol": 8.2, "other": 5.9}
#: the font sizes (pt), their line heights (pt) and column gaps (\tabcolsep, pt) a table
#: tries, densest last
_SIZES = (("\\small", 9.0, 11.0, 6.0), ("\\footnotesize", 8.0, 9.5, 4.0))


def _char_pt(char: str) -> float:
    if char in _NARROW:
        return _CHAR_PT["narrow"]
    if char in _WIDE:
        return _CHAR_PT["wide"]
    if char in "−×±≥≤·→∞²φ":
        return _CHAR_PT["symbol"]
    if char.isupper():
        return _CHAR_PT["upper"]
    return _CHAR_PT["other"]


def _width(text: str, size: float) -> float:
    """`text`'s estimated width (pt) set at `size` pt, on one line."""
    return sum(_char_pt(char) for char in text) * size / 10


def _unbreakable(text: str, numeric: bool) -> list[str]:
    """The pieces of a cell a line may not break inside: a number or an interval whole, text
    at its spaces."""
    if numeric or re.fullmatch(r"[\[(]?[−+\-\d.,\s<>]*[\])]?\s*", text):
        return [text]
    return text.split()


@dataclass(frozen=True)
class _Columns:
    """How a table's columns are set: its size command and column gap, and each column's spec
    (`l`/`r` on one line, or `p{..}` wrapping, left or right aligned) and whether the table
    goes on a landscape page."""

    size: str
    points: float
    line: float
    gap: float
    specs: list[str]
    widths: list[float | None]
    landscape: bool

    def lines(self, cell: str, column: int) -> int:
        """The lines `cell` takes in `column` (words wrapped as a ragged paragraph does)."""
        width = self.widths[column]
        if width is None:
            return 1
        lines, used = 1, 0.0
        for word in cell.split():
            wide = _width(word + " ", self.points)
            if used and used + wide > width:
                lines, used = lines + 1, 0.0
            used += wide
        return lines

    def height(self, rows: list[list[str]]) -> float:
        """The estimated height (pt) of `rows` set in these columns."""
        return sum(
            self.line * max([self.lines(c, i) for i, c in enumerate(row)] or [1]) for row in rows
        )


def _fit(
    headers: list[str], numeric: list[bool], rows: list[list[str]], page: float = TEXT_WIDTH
) -> _Columns | None:
    """The least dense way to set the columns within `page` points of width: on one line each
    where that fits, else text wrapping in `p` columns each at least as wide as its longest
    word (a number never wraps), in a smaller size where needed; None where nothing fits."""
    columns = list(zip(*[headers, *rows], strict=True))
    for command, size, line, gap in _SIZES:
        room = page - 2 * gap * len(headers) - 2.0  # a point or two of rounding
        natural = [max(_width(cell, size) for cell in column) for column in columns]
        if sum(natural) <= room:
            specs = ["r" if n else "l" for n in numeric]
            return _Columns(
                command, size, line, gap, specs, [None] * len(specs), page != TEXT_WIDTH
            )
        least = [
            max(
                max(_width(word, size) for word in column[0].split() or [""]),
                *(_width(piece, size) for cell in column[1:] for piece in _unbreakable(cell, n)),
            )
            for column, n in zip(columns, numeric, strict=True)
        ]
        if sum(least) > room:
            continue
        spare = room - sum(least)
        wanted = [max(n - w, 0.0) for n, w in zip(natural, least, strict=True)]
        share = [spare * w / sum(wanted) if sum(wanted) else 0.0 for w in wanted]
        specs = [
            f">{{\\raggedleft\\arraybackslash}}p{{{w + s:.1f}pt}}"
            if n
            else f">{{\\raggedright\\arraybackslash}}p{{{w + s:.1f}pt}}"
            for w, s, n in zip(least, share, numeric, strict=True)
        ]
        widths: list[float | None] = [w + s for w, s in zip(least, share, strict=True)]
        return _Columns(command, size, line, gap, specs, widths, page != TEXT_WIDTH)
    return None


#: how many of a table's leading text columns say which row it is (with any number column
#: among them), repeated in each part of a table split by its columns: a variant and its
#: measure, a budget between them
KEY_COLUMNS = 2


def _parts(
    headers: list[str], numeric: list[bool], rows: list[list[str]]
) -> list[tuple[list[int], _Columns]]:
    """The table's columns in as few parts as fit a portrait page's width, each set as `_fit`
    says: the whole table where it fits, else its columns in order, each part repeating the
    leading columns that name a row (KEY_COLUMNS); on a landscape page (its width
    TEXT_HEIGHT) only where a part of one column beside them is too wide for a portrait page."""

    def fit(picks: list[int], page: float = TEXT_WIDTH) -> _Columns | None:
        return _fit(
            [headers[i] for i in picks],
            [numeric[i] for i in picks],
            [[row[i] for i in picks] for row in rows],
            page,
        )

    everything = list(range(len(headers)))
    whole = fit(everything)
    if whole is not None:
        return [(everything, whole)]
    keys: list[int] = []  # up to the KEY_COLUMNS-th text column, numbers between (a budget)
    for i in everything[:-1]:
        if sum(not numeric[k] for k in keys) == KEY_COLUMNS:
            break
        keys.append(i)
    parts: list[list[int]] = []
    for i in everything[len(keys) :]:
        if parts and fit([*parts[-1], i]) is not None:
            parts[-1].append(i)
        else:
            parts.append([*keys, i])
    fitted = [fit(part) for part in parts]
    if any(columns is None for columns in fitted):
        wide = fit(everything, TEXT_HEIGHT)
        fallback = _Columns(
            "\\footnotesize", 8.0, 9.5, 4.0, ["l"] * len(headers), [None] * len(headers), True
        )
        return [(everything, wide or fallback)]
    return [(part, columns) for part, columns in zip(parts, fitted, strict=True) if columns]


def _notes(shown: tables.Layout) -> tuple[list[list[str]], list[str]]:
    """The rows with every long text (over NOTE_CHARS characters) that more than one row holds
    said once, as a note under the table ('a: ...'), its cells saying 'note a'; and the notes."""
    counts: dict[str, int] = {}
    for row in shown.rows:
        for cell, numeric in zip(row, shown.numeric, strict=True):
            if not numeric and len(cell) > NOTE_CHARS:
                counts[cell] = counts.get(cell, 0) + 1
    letters = {
        text: chr(ord("a") + i) for i, text in enumerate(t for t, n in counts.items() if n > 1)
    }
    rows = [[f"note {letters[c]}" if c in letters else c for c in row] for row in shown.rows]
    return rows, [f"{letter}: {text}" for text, letter in letters.items()]


#: points of a page a table's rows may take beside its caption, notes and rules
ROOM_FOR_ROWS = 0.8 * TEXT_HEIGHT


def _chunks(
    rows: list[list[str]], parts: list[tuple[list[int], _Columns]], room: float
) -> list[list[list[str]]]:
    """`rows` in runs each of whose every part is at most `room` points high (a long table
    split by its rows)."""
    chunks: list[list[list[str]]] = [[]]
    for row in rows:
        trial = [*chunks[-1], row]
        tall = max(
            columns.height([[r[i] for i in picks] for r in trial]) for picks, columns in parts
        )
        if chunks[-1] and tall > room:
            chunks.append([row])
        else:
            chunks[-1].append(row)
    return chunks


def latex_table(table: tables.Table, caption: str, label: str, source: str) -> str:
    """Table floats (caption, and on the first the label `tab:<label>` with hyphens for
    underscores), each around a booktabs tabular, that fit a plain `article` page, A4 or US
    letter, never scaled: the columns as `table.layout()` shows them (numbers right-aligned), a
    long text several rows share said once in a note under the table (`_notes`), the values
    every row shares in a note too; its columns on one line each where they fit, else text
    wrapping in `p` columns (`\\usepackage{array}`) in a smaller size where needed. A table
    too wide for that is split by its columns, each part repeating the columns that name a row
    (`_parts`), one too long for a page by its rows, each part a float of its own whose caption
    says which it continues; only where even one column beside those naming a row is too wide
    for a portrait page does the table go on a landscape page (`\\usepackage{pdflscape}`)."""
    shown = table.layout()
    rows, long_notes = _notes(shown)
    parts = _parts(shown.headers, shown.numeric, rows)
    landscape = any(columns.landscape for _, columns in parts)
    notes = ([f"In every row: {'; '.join(shown.notes)}."] if shown.notes else []) + long_notes
    room = (TEXT_WIDTH if landscape else ROOM_FOR_ROWS) - 9.5 * 1.5 * len(notes)
    chunks = _chunks(rows, parts, room)
    tag = f"tab:{label.replace('_', '-')}"
    pieces = [(chunk, picks, columns) for chunk in chunks for picks, columns in parts]
    lines = [
        f"% {source}, as the report shows it; written by `python -m kit report` "
        "(needs \\usepackage{booktabs,array}"
        + (" and \\usepackage{pdflscape}" if landscape else "")
        + ")",
        *(["\\begin{landscape}"] if landscape else []),
    ]
    for number, (chunk, picks, columns) in enumerate(pieces):
        title = (
            f"\\caption{{{latex_text(caption)}}}\n\\label{{{tag}}}"
            if not number
            else f"\\caption{{(continued) part {number + 1} of {len(pieces)} of "
            f"Table~\\ref{{{tag}}}.}}"
        )
        lines += [
            "\\begin{table}[htbp]",
            "\\centering",
            title,
            columns.size,
            *([f"\\setlength{{\\tabcolsep}}{{{columns.gap:g}pt}}"] if columns.gap != 6.0 else []),
            f"\\begin{{tabular}}{{{''.join(columns.specs)}}}",
            "\\toprule",
            " & ".join(latex_text(shown.headers[i]) for i in picks) + " \\\\",
            "\\midrule",
            *(" & ".join(latex_text(row[i]) for i in picks) + " \\\\" for row in chunk),
            "\\bottomrule",
            "\\end{tabular}",
        ]
        if notes and number == len(pieces) - 1:
            lines.append(
                "\\par\\smallskip{\\footnotesize\\raggedright "
                + "\\par ".join(latex_text(note) for note in notes)
                + "\\par}"
            )
        lines.append("\\end{table}")
    if landscape:
        lines.append("\\end{landscape}")
    return "\n".join(lines) + "\n"


#: what a character of a header's words becomes in a CSV header before the rest is split into
#: words (kit.report.labels gives the words)
CSV_WORDS = {
    "−": " minus ",
    "%": " pct ",
    "×": "x",
    "±": " pm ",
    "²": "2",
    "φ": "phi",
    "'": "",
    "’": "",
}


def csv_name(column: str) -> str:
    """A stored column's CSV header: the words a reader sees for it (kit.report.labels.label)
    in snake_case, lower-case letters and digits joined by '_' ('gain_mean' reads 'gain (points,
    mean)' on the page and 'gain_points_mean' in the CSV; 'kit − paper' 'kit_minus_paper';
    '95% interval, low' '95_pct_interval_low'): one scheme for every file's headers."""
    words = "".join(CSV_WORDS.get(char, char) for char in label(column)).lower()
    return "_".join(re.findall(r"[a-z0-9]+", words)) or "column"


def csv_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` as CSV holds it: every digit kept, a list column's items joined with '; ', each
    column under its `csv_name` (a second column of the same name numbered: '_2')."""
    names: dict[str, str] = {}
    for column in frame.columns:
        name = csv_name(column)
        taken = [name, *(f"{name}_{number}" for number in range(2, len(frame.columns) + 2))]
        names[column] = next(n for n in taken if n not in names.values())
    return frame.with_columns(
        pl.col(column).cast(pl.List(pl.String)).list.join("; ")
        for column, dtype in frame.schema.items()
        if isinstance(dtype, pl.List)
    ).rename(names)


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
