"""Degraded reads that must not pass unseen: recorded for the run's summary and its report.

Some inputs are read although they cannot be checked (a checkpoint without its recorded hash, a
file the kit did not write). Each such read says so on stderr, which inside a kernel lands only
in the executed notebook; `notice` also appends it to the file NOTICES_FILE_ENV names, which
`python -m kit run` sets for the kernel it starts (its training workers inherit it). After the
notebook the runner keeps the notices as `<notebook>.notices.json` in the output folder
(`publish`), lists them in its summary and in the notebook's provenance file (`read_unverified`),
and the report lists them beside the verdicts; a notebook's `*_summary.json` records those said
before it was written (`read_unverified`, kit.report.outputs.write_json). Without the variable
(JupyterLab, plain papermill) a notice is only the stderr line.

Each notice is one short JSON line appended in one write (O_APPEND: processes writing at once do
not interleave); a line torn by a kill is skipped when read back.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kit.files.files import write_text

#: the file a process appends its notices to (set by the runner for the kernel)
NOTICES_FILE_ENV = "KIT_NOTICES_FILE"
#: a notebook's notices in its output folder, kept after its run
SUFFIX = ".notices.json"


def notice(message: str) -> None:
    """Say `message` (one line naming the file read) on stderr and record it for the run."""
    print(f"notice: {message}", file=sys.stderr, flush=True)
    target = os.environ.get(NOTICES_FILE_ENV)
    if not target:
        return
    line = (json.dumps({"notice": message}) + "\n").encode()
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)
    except OSError as error:
        print(
            f"notice: {target}: could not record the notice above ({error.strerror})",
            file=sys.stderr,
            flush=True,
        )


def so_far() -> list[str]:
    """The notices this run recorded until now (those of the file NOTICES_FILE_ENV names; none
    outside `python -m kit run`): what a summary written now records of its degraded reads."""
    target = os.environ.get(NOTICES_FILE_ENV)
    return collected(Path(target)) if target else []


def collected(path: Path) -> list[str]:
    """The notices appended to `path`, each once, in order (none when it does not exist)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            found.append(str(json.loads(line)["notice"]))
        except (ValueError, KeyError, TypeError):
            continue  # torn by a kill
    return list(dict.fromkeys(found))


def publish(collecting: Path, kept: Path) -> list[str]:
    """Keep the notices appended to `collecting` as the JSON list `kept` (replaced atomically;
    removed when there are none) and remove `collecting`; returns them."""
    found = collected(collecting)
    if found:
        write_text(kept, json.dumps(found, indent=1) + "\n")
    else:
        kept.unlink(missing_ok=True)
    collecting.unlink(missing_ok=True)
    return found


def kept_notices(folder: Path) -> dict[str, list[str]]:
    """Per notebook, the notices its last run in `folder` kept."""
    found = {}
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        try:
            content = json.loads(path.read_text())
        except (OSError, ValueError):
            content = [f"{path}: unreadable list of notices"]
        if isinstance(content, list) and content:
            found[path.name.removesuffix(SUFFIX)] = [str(item) for item in content]
    return found
