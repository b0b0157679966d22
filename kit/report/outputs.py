"""Result files: a notebook's output folder, and key results as JSON that tests and later
notebooks read back instead of trusting a notebook's prose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from kit.files import files
from kit.files.paths import resolve
from kit.readout import notices


class ResultFileError(ValueError):
    """A result file that cannot be read; the message names it and what to do."""


def output_dir(path: str | Path) -> Path:
    """The folder `path` (relative to the repository), created if missing."""
    folder = resolve(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


#: a result JSON whose name ends so is a notebook's summary (what later readers consult)
SUMMARY_SUFFIX = "_summary.json"


def write_json(path: Path, content: dict[str, Any]) -> None:
    """`content` as indented JSON with sorted keys. A notebook's summary (`*_summary.json`) also
    records, under `read_unverified`, every input the run read unverified until now
    (kit.readout.notices), so that a reader of the verdicts alone sees what they rest on."""
    degraded = notices.so_far() if path.name.endswith(SUMMARY_SUFFIX) else []
    if degraded:
        content = content | {"read_unverified": degraded}
    files.write_text(path, json.dumps(content, indent=2, sort_keys=True))


def read_json(path: Path) -> dict[str, Any]:
    """What write_json wrote."""
    return json.loads(path.read_text())


#: the status `statements` gives what would decide the undecided claims
NEXT = "next"


def claims(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims a notebook's summary states, in order: its "claims" where it lists several,
    else its one "claim" (those with a line)."""
    found = summary.get("claims") or [summary.get("claim")]
    return [claim for claim in found if isinstance(claim, dict) and claim.get("line")]


def statements(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The (status, line) of every claim a notebook's summary states ("claims" where it lists
    several, else its one "claim"), followed by its what-ran line where it records one (status
    "") and by what would decide the claims its wall budget left undecided ("next")."""
    stated = claims(summary)
    ran = summary.get("ran") or next((c.get("ran") for c in stated if c.get("ran")), "")
    following = summary.get("next")
    return (
        [(str(c.get("status", "")), str(c["line"])) for c in stated]
        + ([("", ran)] if ran and stated else [])
        + ([(NEXT, str(following))] if following and stated else [])
    )


def read_parquet(path: Path) -> pl.DataFrame:
    """A result table; a torn or corrupt file raises ResultFileError naming it (polars' own
    error names no file)."""
    try:
        return pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ResultFileError(
            f"{path}: not a readable parquet table, torn (by a kill or a full "
            f"disk) or corrupt ({reason}); run the notebook that writes it "
            "again"
        ) from None
