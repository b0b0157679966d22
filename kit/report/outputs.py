"""Result files: a notebook's output folder, and key results as JSON that tests and later
notebooks read back instead of trusting a notebook's prose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.core import files
from kit.core.paths import resolve


def output_dir(path: str | Path) -> Path:
    """The folder `path` (relative to the repository), created if missing."""
    folder = resolve(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_json(path: Path, content: dict[str, Any]) -> None:
    """`content` as indented JSON with sorted keys."""
    files.write_text(path, json.dumps(content, indent=2, sort_keys=True))


def read_json(path: Path) -> dict[str, Any]:
    """What write_json wrote."""
    return json.loads(path.read_text())


def statements(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The (status, line) of every claim a notebook's summary states ("claims" where it lists
    several, else its one "claim"), each followed by its what-ran line where it records one."""
    found = summary.get("claims") or [summary.get("claim")]
    claims = [claim for claim in found if isinstance(claim, dict) and claim.get("line")]
    ran = summary.get("ran") or next((c.get("ran") for c in claims if c.get("ran")), "")
    return [(str(c.get("status", "")), str(c["line"])) for c in claims] + (
        [("", ran)] if ran and claims else [])
