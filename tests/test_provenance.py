"""Every output folder records what produced it: the kit's commit, package versions, machine."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from kit.core import provenance
from kit.core.paths import REPO_ROOT


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
