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

from kit.core import numbers
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.report import charts, page, paper_files
from kit.report.charts import VEGALITE_MIME

PDFLATEX = shutil.which("pdflatex")
NO_TEX = (
    "no pdfLaTeX with booktabs installed (apt-get install texlive-latex-base "
    "texlive-latex-recommended, as .ci/run does); the structural check still runs"
)


def has_booktabs() -> bool:
    if PDFLATEX is None or shutil.which("kpsewhich") is None:
        return False
    found = subprocess.run(["kpsewhich", "booktabs.sty"], capture_output=True, text=True)
    return bool(found.stdout.strip())


def rows_of(tex: str) -> list[list[str]]:
    """A LaTeX table's rows between \\midrule and \\bottomrule, as cells."""
    body = tex.split("\\midrule\n", 1)[1].split("\\bottomrule", 1)[0]
    return [line.removesuffix(" \\\\").split(" & ") for line in body.strip().splitlines()]


def assert_structure(tex: str) -> None:
    """A table float around one booktabs tabular whose every row has its columns."""
    assert tex.count("\\begin{table}") == tex.count("\\end{table}") == 1
    assert tex.count("\\begin{tabular}") == tex.count("\\end{tabular}") == 1
    assert all(rule in tex for rule in ("\\toprule", "\\midrule", "\\bottomrule"))
    (spec,) = re.findall(r"\\begin\{tabular\}\{([lr]+)\}", tex)
    head = tex.split("\\toprule\n", 1)[1].split("\n", 1)[0]
    for row in [head.removesuffix(" \\\\").split(" & "), *rows_of(tex)]:
        assert len(row) == len(spec), row
    text = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    assert not re.search(r"(?<!\\)[_%&#]", text.replace(" & ", " ")), "an unescaped character"
    assert all(ord(char) < 128 for char in tex), "a character pdfLaTeX may not set"


def compile_latex(tables: list[Path], folder: Path) -> Path:
    """A document \\input-ing `tables`, compiled by pdfLaTeX; its PDF."""
    document = folder / "tables.tex"
    document.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
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
        assert back.columns == stored.columns
        for column in stored.columns:  # every digit kept
            if stored[column].dtype.is_float():
                assert back[column].to_list() == pytest.approx(
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


def test_the_main_jobs_verdict_table_as_latex_holds_its_summarys_numbers(
    notebook_outputs, tmp_path: Path
) -> None:
    """Notebook 03 as the test session executed it: its verdict table as the report writes it
    in LaTeX holds, for every condition, the mean and 95% interval of its summary
    (time_concat_summary.json) as kit.core.numbers prints them; it compiles where pdfLaTeX is
    installed, and passes the structural check everywhere."""
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
