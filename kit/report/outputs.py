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
