"""Every output folder records what produced it: the kit's commit, package versions, machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import yaml

from kit.files.paths import REPO_ROOT
from kit.runtime import provenance


def test_a_record_names_the_commit_and_the_resolved_versions(tmp_path: Path) -> None:
    provenance.write(tmp_path / "x.provenance.json")
    (made,) = provenance.read(tmp_path / "x.provenance.json")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert made["kit_commit"].split()[0] == head
    assert made["packages"]["torch"] == metadata.version("torch")
    assert made["packages"]["polars"] == metadata.version("polars")
    assert made["python"].startswith("3.11")


def test_outside_a_checkout_the_commit_is_unknown(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    assert provenance.commit() == "unknown"


def test_the_machine_line_names_the_host_as_a_host_name() -> None:
    """A host name ('vm') is no machine description: the line says what the machine is and
    gives the name as one, last."""
    made = provenance.record() | {"host": "vm"}
    line = provenance.ran_on(made)
    assert line.startswith(made["cpu_numerics"]["cpu"]), line
    assert line.endswith(", host name vm") and "vm:" not in line, line


def test_each_start_of_a_run_appends_a_record(tmp_path: Path) -> None:
    provenance.append(tmp_path / "provenance.jsonl")
    provenance.append(tmp_path / "provenance.jsonl")
    assert len(provenance.read(tmp_path / "provenance.jsonl")) == 2


def test_the_cli_says_its_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"timecat-kit {metadata.version('timecat-kit')}"


#: a machine where the kit was copied, not installed, and the notebook tools are absent (a GPU
#: node's image): no package metadata for the kit, papermill and nbformat not importable
SOURCE_CHECKOUT_ONLY = """
import importlib.metadata as m, sys
_real = m.version
def _version(name):
    if name == "timecat-kit":
        raise m.PackageNotFoundError(name)
    return _real(name)
m.version = _version
for blocked in ("papermill", "nbformat", "nbclient"):
    sys.modules[blocked] = None
"""


def test_a_source_checkout_without_the_notebook_tools_trains_and_says_it_is_not_installed(
    tmp_path: Path,
) -> None:
    """`python -m kit --version` and `python -m kit.train` from a checkout on PYTHONPATH: the
    version is pyproject's, marked as not installed, in what they print and record."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SOURCE_CHECKOUT_ONLY)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO_ROOT}"}
    shown = subprocess.run(
        [sys.executable, "-m", "kit", "--version"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert provenance.NOT_INSTALLED in shown
    assert metadata.version("timecat-kit") in shown
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": "resnet10",
                "width": 0.25,
                "num_classes": 4,
                "seed": 0,
                "batch_size": 8,
                "iterations": 2,
                "log_every": 1,
                "num_workers": 0,
                "output_dir": str(tmp_path / "run"),
                "data": {
                    "kind": "synthetic",
                    "image_size": 16,
                    "synthetic": {
                        "num_train": 32,
                        "num_eval": 8,
                        "components": [{"weight": 1.0, "cues": ["colour"]}],
                    },
                },
            }
        )
    )
    subprocess.run(
        [sys.executable, "-m", "kit.train", "--config", str(config)],
        env=env,
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    record = json.loads((tmp_path / "run" / "provenance.jsonl").read_text().splitlines()[0])
    assert record["kit_version"].endswith(f"({provenance.NOT_INSTALLED})")


def test_the_packages_are_read_again_once_one_is_installed(tmp_path: Path, monkeypatch) -> None:
    """The list is kept between records while the searched folders are unchanged, and a
    distribution installed since (here a `*.dist-info` folder on sys.path) is in the next one."""
    first = provenance.packages()
    assert provenance.packages() == first
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert "kit-planted-package" not in provenance.packages()
    info = site / "kit_planted_package-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kit-planted-package\nVersion: 1.2.3\n"
    )
    assert provenance.packages()["kit-planted-package"] == "1.2.3"
