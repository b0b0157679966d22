"""The documentation: a README that fits, a site that builds strictly, user-facing text that cites
public sources, and a parameter reference that matches the settings classes."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import polars as pl
import pytest

from kit.cli import reference
from kit.files.paths import NOTEBOOKS_DIR, REPO_ROOT
from kit.readout.citation import PAPER

#: the README is a front page: what the kit is, the two commands, profiles, links into docs/
README_LIMIT = 8_000
#: what `grep -rn "REFERENCE.md\|issue [0-9]"` finds: internal notes and tracker numbers, which
#: readers cannot follow (cite the paper's sections and tables or public sources instead)
PRIVATE = re.compile(r"REFERENCE.md|issue [0-9]")


def user_facing_files() -> list[Path]:
    return [
        REPO_ROOT / "README.md",
        *sorted(p for p in (REPO_ROOT / "docs").rglob("*") if p.is_file()),
    ]


def test_parameter_reference_matches_the_settings() -> None:
    if reference.stale():
        shown = reference.REFERENCE_FILE.relative_to(REPO_ROOT)
        pytest.fail(
            f"{shown} differs from the settings classes. Regenerate and commit it:\n"
            f"  .venv/bin/{reference.REGENERATE}",
            pytrace=False,
        )


def test_reference_check_names_a_stale_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "parameters.md"
    path.write_text("# out of date\n")
    assert reference.command(check=True, path=path) == 1
    assert str(path) in capsys.readouterr().err
    assert reference.command(check=False, path=path) == 0
    assert reference.command(check=True, path=path) == 0


def test_reference_covers_every_schema_and_the_run_and_launch_settings() -> None:
    text = reference.markdown()
    for name in (
        "ToySettings",
        "NotebookSettings",
        "TimecatSettings",
        "TrainSettings",
        "LaunchSettings",
    ):
        assert f"`{name}`" in text, name
    assert "| `train.data.synthetic.components[].cues` |" in text
    assert "| `launch.backend` |" in text


def test_readme_fits() -> None:
    size = len((REPO_ROOT / "README.md").read_text())
    assert size <= README_LIMIT, (
        f"README.md is {size} characters, over {README_LIMIT}: move detail into docs/"
    )


def test_user_facing_text_cites_public_sources() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
        for path in user_facing_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not found, (
        "cite the paper (section, table, figure) or a public source instead:\n" + "\n".join(found)
    )


def test_the_paper_is_named_with_its_version_on_the_home_page_and_in_every_notebook() -> None:
    """The docs' home page and each notebook's first cell name the paper as kit.readout.citation
    does (the report page reads it from there): title, authors, arXiv id with its version."""
    assert PAPER.markdown() in (REPO_ROOT / "docs" / "index.md").read_text()
    for path in sorted(NOTEBOOKS_DIR.glob("*.ipynb")):
        first = next(
            c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
        )
        assert PAPER.markdown() in first.source, path.name


def test_the_paper_line_says_which_number_is_not_the_versions_own() -> None:
    """The paper line claims the quoted version's numbers only for those it printed: the one
    Table 3 value read from the authors' figure is named (as the data file marks it)."""
    from kit.experiments import evidence

    read = evidence.load("table3").filter(pl.col("value_source") == "read_from_figure")
    assert read.height == 1 and "read from the authors' figure" in PAPER.markdown()
    (row,) = read.iter_rows(named=True)
    assert f"Table 3's {row['method']} on {row['eval_dataset']}" in PAPER.from_figure
    assert "the numbers quoted are those of this version." not in PAPER.markdown()


#: the paper's Table 3 is in Section 5.1 (5.1.3 Results); "Section 5" alone names no table
BARE_SECTION_5 = re.compile(r"Section 5(?![.\d])")


def test_table_3_is_cited_as_section_5_1s_wherever_a_reader_sees_it() -> None:
    """The kit's sentences (its code, notebooks, README, the docs' home and report pages) cite
    the paper's Section 5.1, where Table 3 is, never a bare 'Section 5'."""
    paths = [
        *(REPO_ROOT / "kit").rglob("*.py"),
        *NOTEBOOKS_DIR.glob("*.ipynb"),
        REPO_ROOT / "README.md",
        REPO_ROOT / "docs" / "index.md",
        REPO_ROOT / "docs" / "report.md",
        REPO_ROOT / "docs" / "concepts.md",
        REPO_ROOT / "docs" / "notebooks.md",
    ]
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}"
        for path in paths
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BARE_SECTION_5.search(line)
    ]
    assert not found, found


def test_site_builds_strictly(tmp_path: Path) -> None:
    missing = [name for name in ("mkdocs", "material") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (pip install -e '.[dev]')")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO_ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "site" / "reference" / "parameters" / "index.html").is_file()
    # the site reads offline: no page loads a style sheet, font or script from outside
    outside = re.compile(r"<(?:link|script)[^>]+(?:href|src)=\"(?:https?:)?//[^\"]+")
    fetched = {
        f"{page.relative_to(tmp_path)}: {found}"
        for page in (tmp_path / "site").rglob("*.html")
        for found in outside.findall(page.read_text())
    }
    assert not fetched, sorted(fetched)[:5]
