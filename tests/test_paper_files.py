"""Tables and figures ready for a paper (kit.report.paper_files): `kit report` writes every result
table as LaTeX and CSV beside its parquet and every saved chart as PDF beside its SVG and PNG,
linked from the page. The LaTeX compiles with pdfLaTeX and booktabs where a TeX installation has
them (Debian's texlive-latex-base and texlive-latex-recommended, as .ci/run installs them; the
compile skips saying so where they are missing) and always passes a structural check; the
numbers of the main job's verdict table as LaTeX equal its summary's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import altair as alt
import nbformat
import polars as pl
import pytest
from test_report_page import fake_outputs

from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.readout import numbers
from kit.report import charts, page, paper_files
from kit.report.charts import VEGALITE_MIME

PDFLATEX = shutil.which("pdflatex")
NO_TEX = (
    "no pdfLaTeX with booktabs installed (apt-get install texlive-latex-base "
    "texlive-latex-recommended, as .ci/run does); the structural check still runs"
)


#: one column of a tabular's spec: `l`, `r`, or a wrapping `p{..}` with its alignment
COLUMN_SPEC = re.compile(r"(?:>\{[^{}]*\})?(?:[lr]|p\{[^{}]*\})")
#: the paper sizes a table must fit (a plain `article` page's default margins)
PAPERS = ("a4paper", "letterpaper")
#: what a table's LaTeX needs in the preamble (kit.report.paper_files)
PREAMBLE = "\\usepackage{booktabs,array,pdflscape}\n"


def has_booktabs() -> bool:
    if PDFLATEX is None or shutil.which("kpsewhich") is None:
        return False
    found = subprocess.run(["kpsewhich", "booktabs.sty"], capture_output=True, text=True)
    return bool(found.stdout.strip())


def parts_of(tex: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """A LaTeX table's tabulars (one, or a table split by its columns): each one's column
    spec, header and rows between \\midrule and \\bottomrule, as cells."""
    found = []
    for part in tex.split("\\begin{tabular}{")[1:]:
        spec = part.split("\n", 1)[0].removesuffix("}")
        head = part.split("\\toprule\n", 1)[1].split("\n", 1)[0]
        body = part.split("\\midrule\n", 1)[1].split("\\bottomrule", 1)[0]
        cells = [line.removesuffix(" \\\\").split(" & ") for line in body.strip().splitlines()]
        found.append((spec, head.removesuffix(" \\\\").split(" & "), cells))
    return found


def rows_of(tex: str) -> list[list[str]]:
    """A LaTeX table's rows as cells, a table split by its rows or columns joined again: the
    parts of one header one after the other, the headers' rows side by side."""
    by_header: dict[tuple[str, ...], list[list[str]]] = {}
    for _, head, rows in parts_of(tex):
        by_header.setdefault(tuple(head), []).extend(rows)
    return [sum(cells, []) for cells in zip(*by_header.values(), strict=True)]


def assert_structure(tex: str) -> None:
    """Table floats (one, or a table split by its columns or rows, each part continuing
    the first), each around one booktabs tabular whose every row has its columns, never
    scaled."""
    floats = tex.count("\\begin{table}")
    assert floats == tex.count("\\end{table}") == tex.count("\\begin{tabular}") >= 1
    assert tex.count("\\end{tabular}") == floats and tex.count("\\caption{") == floats
    assert "\\resizebox" not in tex and "\\scalebox" not in tex
    assert all(rule in tex for rule in ("\\toprule", "\\midrule", "\\bottomrule"))
    for spec, head, rows in parts_of(tex):
        columns = COLUMN_SPEC.findall(spec)
        assert "".join(columns) == spec, spec
        for row in [head, *rows]:
            assert len(row) == len(columns), row
    text = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    assert not re.search(r"(?<!\\)[_%&#]", text.replace(" & ", " ")), "an unescaped character"
    assert all(ord(char) < 128 for char in tex), "a character pdfLaTeX may not set"


def compile_latex(tables: list[Path], folder: Path, paper: str = "a4paper") -> Path:
    """A plain `article` document on `paper` \\input-ing `tables`, compiled by pdfLaTeX; its
    PDF (its log beside it)."""
    document = folder / f"tables-{paper}.tex"
    document.write_text(
        f"\\documentclass[{paper}]{{article}}\n{PREAMBLE}\\begin{{document}}\n"
        + "".join(f"\\input{{{table.as_posix()}}}\n" for table in tables)
        + "\\end{document}\n"
    )
    done = subprocess.run(
        [PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", document.name],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return document.with_suffix(".pdf")


def test_latex_text_escapes_what_latex_would_read_as_markup() -> None:
    assert paper_files.latex_text("gain (points, 95% interval)") == r"gain (points, 95\% interval)"
    assert paper_files.latex_text("a_b & c") == r"a\_b \& c"
    assert paper_files.latex_text("[-0.5, +1.2]") == r"[$-$0.5, +1.2]"
    assert paper_files.latex_text("random-init") == "random-init"
    assert (
        paper_files.latex_text("4 ResNet-50s − a 2× wide") == r"4 ResNet-50s $-$ a 2$\times$ wide"
    )
    assert paper_files.latex_text("< 0.001") == r"\textless{} 0.001"
    assert paper_files.latex_text("café") == "café"  # LaTeX reads UTF-8


def report_with_a_saved_chart(folder: Path) -> Path:
    """fake_outputs' folder, its notebook also showing a chart `chart_saver` saved."""
    fake_outputs(folder)
    saved = charts.chart_saver(folder, ["svg", "png"])(
        alt.Chart(pl.DataFrame({"variant": ["cat1", "cat4"], "top1": [61.5, 64.2]}))
        .mark_bar()
        .encode(x="variant:N", y="top1:Q"),
        "accuracy",
    )
    notebook = nbformat.read(folder / "03_time_concat.ipynb", as_version=4)
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            "show(chart, 'accuracy')",
            outputs=[
                nbformat.v4.new_output(
                    "display_data",
                    data={VEGALITE_MIME: saved.to_dict(), "text/plain": "<chart>"},
                )
            ],
        )
    )
    nbformat.write(notebook, folder / "03_time_concat.ipynb")
    return page.write_report("ci", folder)


def test_the_report_writes_every_table_as_latex_and_csv_and_every_chart_as_pdf(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ci"
    text = report_with_a_saved_chart(folder).read_text()
    for stem in ("time_concat_table3", "time_concat_vs_paper", "time_concat_gains"):
        tex, csv = folder / f"{stem}.tex", folder / f"{stem}.csv"
        assert tex.exists() and csv.exists(), stem
        assert_structure(tex.read_text())
        assert f'href="{tex.name}"' in text and f'href="{csv.name}"' in text
        stored = pl.read_parquet(folder / f"{stem}.parquet")
        back = pl.read_csv(csv)
        assert back.columns == [paper_files.csv_name(column) for column in stored.columns]
        for column in stored.columns:  # every digit kept
            if stored[column].dtype.is_float():
                assert back[paper_files.csv_name(column)].to_list() == pytest.approx(
                    stored[column].to_list(), nan_ok=True
                )
    table3 = (folder / "time_concat_table3.tex").read_text()
    assert "61.5 & 1.2" in table3 and "61.54321" not in table3  # one precision rule
    pdf = folder / "accuracy.pdf"
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert all(f'href="accuracy.{fmt}"' in text for fmt in ("pdf", "svg", "png"))


@pytest.mark.skipif(not has_booktabs(), reason=NO_TEX)
def test_the_reports_latex_tables_compile(tmp_path: Path) -> None:
    folder = tmp_path / "ci"
    report_with_a_saved_chart(folder)
    written = compile_latex(sorted(folder.glob("*.tex")), folder)
    assert written.read_bytes()[:5] == b"%PDF-"
    for tex in sorted(folder.glob("time_concat_*.tex")):
        assert_fits_a_page(tex, tmp_path)


def test_the_main_jobs_verdict_table_as_latex_holds_its_summarys_numbers(
    notebook_outputs, tmp_path: Path
) -> None:
    """Notebook 03 as the test session executed it: its verdict table as the report writes it
    in LaTeX holds, for every condition, the mean and 95% interval of its summary
    (time_concat_summary.json) as kit.readout.numbers prints them; it compiles where pdfLaTeX is
    installed, it and the table beside the paper's fitting an A4 and a letter page, and passes
    the structural check everywhere."""
    shared = notebook_outputs("03_time_concat", TIME_CONCAT.verdicts)
    folder = tmp_path / "ci"
    folder.mkdir()
    for path in shared.glob("03_time_concat*"):
        if path.is_file():
            shutil.copy2(path, folder)
    for name in (TIME_CONCAT.summary, TIME_CONCAT.verdicts, TIME_CONCAT.vs_paper):
        shutil.copy2(shared / name, folder)
    page.write_report("ci", folder)
    tex = (folder / TIME_CONCAT.verdicts).with_suffix(".tex").read_text()
    assert_structure(tex)
    rows = rows_of(tex)
    summary = json.loads((folder / TIME_CONCAT.summary).read_text())
    assert summary["verdicts"], "the summary holds no verdict"
    for verdict in summary["verdicts"]:
        row = next(r for r in rows if paper_files.latex_text(verdict["condition"]) in r)
        mean = paper_files.latex_text(numbers.signed(verdict["mean"]))
        interval = paper_files.latex_text(numbers.interval(verdict["low"], verdict["high"]))
        assert mean in row and interval in row, (verdict["condition"], row)
    if has_booktabs():
        compile_latex([folder / Path(TIME_CONCAT.verdicts).with_suffix(".tex").name], folder)
        for name in (TIME_CONCAT.verdicts, TIME_CONCAT.vs_paper):
            assert_fits_a_page((folder / name).with_suffix(".tex"), tmp_path)


def assert_fits_a_page(tex: Path, folder: Path) -> None:
    """`tex` compiled alone in a plain `article` on A4 and on US letter (default margins): no
    overfull box, no float taller than the page (kit.report.paper_files lays it out to fit)."""
    for paper in PAPERS:
        alone = folder / f"{tex.stem}-{paper}"
        alone.mkdir(exist_ok=True)
        compile_latex([tex], alone, paper)
        log = (alone / f"tables-{paper}.log").read_text(errors="replace")
        overfull = re.findall(r"^Overfull \\hbox \((.+?)\)", log, re.MULTILINE)
        assert not overfull, f"{tex.name} on {paper}: overfull by {overfull}"
        assert "Float too large for page" not in log, f"{tex.name} on {paper}: too long"


#: result tables of a ci run (tests/paper_tables/README.md)
PAPER_TABLES = Path(__file__).parent / "paper_tables"


@pytest.mark.skipif(not has_booktabs(), reason=NO_TEX)
@pytest.mark.parametrize("stem", sorted(p.stem for p in PAPER_TABLES.glob("*.parquet")))
def test_every_result_table_as_latex_fits_an_a4_and_a_letter_page(
    stem: str, tmp_path: Path
) -> None:
    """Each result table of a ci run, written as the report writes it, compiles alone in a
    plain `article` on A4 and on US letter (default margins) with no overfull box and no float
    taller than the page: text wraps, a long text shared by rows is a note under the table,
    and a table too wide or too long for a page is split, its parts repeating the columns that
    name a row; nothing is scaled."""
    folder = tmp_path / "ci"
    folder.mkdir()
    path = folder / f"{stem}.parquet"
    shutil.copy2(PAPER_TABLES / path.name, path)
    page.captioned_table(path)
    tex = path.with_suffix(".tex")
    assert_structure(tex.read_text())
    assert_fits_a_page(tex, tmp_path)


#: a CSV header: snake_case words, lower-case letters and digits joined by '_'
SNAKE_CASE = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")


def test_every_csv_header_is_snake_case_words_in_one_scheme_across_files(tmp_path: Path) -> None:
    """Each result table's CSV headed in snake_case words (the label map's, never a code name
    such as 'cat4resnet50_minus_resnet50w2', nor 'ID gain' beside 'gain_mean', nor a '−'),
    unique within its file, one stored column under one header in every file."""
    assert paper_files.csv_name("gain_mean") == "gain_points_mean"
    assert paper_files.csv_name("kit − paper") == "kit_minus_paper"
    assert paper_files.csv_name("ID gain") == "in_distribution_gain_points"
    assert paper_files.csv_name("cat4resnet50_minus_resnet50w2") == (
        "4_concatenated_resnet_50s_minus_a_2x_wide_resnet_50"
    )
    seen: dict[str, str] = {}
    for stored in sorted(PAPER_TABLES.glob("*.parquet")):
        frame = pl.read_parquet(stored)
        csv = tmp_path / f"{stored.stem}.csv"
        paper_files.write_table_files(tmp_path / stored.name, frame, frame, "caption")
        headers = pl.read_csv(csv, n_rows=1).columns
        assert len(set(headers)) == len(headers), (stored.name, headers)
        for column, header in zip(frame.columns, headers, strict=True):
            assert SNAKE_CASE.fullmatch(header), (stored.name, column, header)
            assert seen.setdefault(column, header) == header, (stored.name, column)
