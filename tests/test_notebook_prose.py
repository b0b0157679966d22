"""Notebook prose says what ran, not what a profile was once thought to run: notebook 01's
sentence about the sparsity sweep is counted from the sweep (planted sweeps of either ending),
notebook 03 names its probe only through the line computed from its parameters and lists its
run table once."""

from __future__ import annotations

import re

import nbformat
import polars as pl
import pytest

from kit.experiments import toy_summary
from kit.files.paths import NOTEBOOKS_DIR


def _sweep(kept: dict[float, list[str]]) -> pl.DataFrame:
    """A planted sparsity sweep (toy.sparsity_sweep's rows): what each model kept, by weight
    decay."""
    return pl.DataFrame(
        [{"weight_decay": d, "kept": k} for d, models in kept.items() for k in models]
    )


@pytest.mark.parametrize(
    ("largest", "said"),
    [
        (
            ["none"] * 3 + ["phi1"],
            "at the largest weight decay 0.1: 1 of 4 kept only φ1, 3 of 4 kept no feature",
        ),
        (
            ["phi1"] * 3 + ["both"],
            "at the largest weight decay 0.1: 1 of 4 kept both features, 3 of 4 kept only φ1",
        ),
    ],
)
def test_the_sparsity_line_counts_what_the_largest_weight_decay_left(
    largest: list[str], said: str
) -> None:
    sweep = _sweep({0.0: ["both"] * 4, 0.01: ["phi2"] * 4, 0.1: largest})
    line = toy_summary.sparsity_line(sweep)
    assert line.startswith("At the smallest weight decay 0: 4 of 4 kept both features;"), line
    assert said in line, line
    assert "phi" not in line


def _cells(stem: str, kind: str) -> list[str]:
    notebook = nbformat.read(NOTEBOOKS_DIR / f"{stem}.ipynb", as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == kind]


#: a sentence that ties a probe to a profile by name, which the parameters decide
PROFILE_PROBE = re.compile(r"[^.]*\bprobe\b[^.]*\((?:the )?(?:cpu|ci|paper)[^)]*profiles?\)[^.]*\.")


def test_notebook_03_says_which_probe_ran_only_from_its_parameters() -> None:
    prose = " ".join(_cells("03_time_concat", "markdown")).replace("\n", " ")
    assert not PROFILE_PROBE.findall(prose)
    planted = "The fast probe with `select_from: converged` (the cpu and ci profiles) finishes."
    assert PROFILE_PROBE.findall(planted)  # the sentence the notebook said before
    code = "\n".join(_cells("03_time_concat", "code"))
    assert "measure.probe_description(P)" in code


def test_notebook_03_shows_its_run_table_once() -> None:
    code = "\n".join(_cells("03_time_concat", "code"))
    assert code.count("planning.run_table(") == 1


def test_notebook_01_counts_the_sparsity_sweep_rather_than_saying_it() -> None:
    prose = " ".join(_cells("01_toy_counterexample", "markdown"))
    assert "largest values none" not in prose
    assert "toy_summary.sparsity_line(sparsity)" in "\n".join(
        _cells("01_toy_counterexample", "code")
    )
