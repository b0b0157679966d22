"""What produced an output: the kit's commit, the resolved package versions, the machine and
the CPU numerics its computations ran under (kit.numerics.numerics: mode, CPU model, instruction
set, caps, threads, and what of the reproducible mode was not in effect).

`python -m kit run` writes `<notebook>.provenance.json` beside each executed notebook and its
`<notebook>.parameters.yaml`; the trainer appends one record per start (first start and every
resume) to its run folder's `provenance.jsonl`, since a resumed run may continue under other code.
Together with the parameters files this is what a reproduction needs later.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from kit.files.files import atomic_write
from kit.files.paths import REPO_ROOT
from kit.numerics import cpu_records, numerics
from kit.runtime import machine


def commit() -> str:
    """The kit's git commit, with ' + local changes' when tracked files differ from it, or
    'unknown' outside a git checkout (an installed copy)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head} + local changes" if changed else head


#: what a source checkout on PYTHONPATH, not installed, says its version is
NOT_INSTALLED = "not installed: a source checkout on PYTHONPATH"


def kit_version() -> str:
    """The installed kit's version, or, run from a source checkout on PYTHONPATH (no package
    metadata, as on a node where the kit was copied rather than installed), pyproject.toml's
    version marked as not installed: an output still says which kit wrote it."""
    try:
        return metadata.version("timecat-kit")
    except metadata.PackageNotFoundError:
        import tomllib

        try:
            with (REPO_ROOT / "pyproject.toml").open("rb") as handle:
                version = tomllib.load(handle)["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            version = "unknown"
        return f"{version} ({NOT_INSTALLED})"


#: the last `packages()` found, with the state of the folders it searched
_FOUND: dict[str, Any] = {}


def _search_state() -> tuple[tuple[str, int], ...]:
    """The folders importlib.metadata searches (sys.path) with their modification times: an
    install or removal adds or removes a `*.dist-info` folder in one, changing its time."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, -1))
    return tuple(state)


def packages() -> dict[str, str]:
    """Every installed distribution's version, by name (sorted). Reading every distribution's
    metadata takes some tenths of a second, which each training run paid at its start
    (kit.train.run_folder appends a record to its folder), so the answer is kept while the
    searched folders are unchanged; a package installed since, in a kernel say, changes them."""
    state = _search_state()
    if _FOUND.get("state") != state:
        found = {
            dist.metadata["Name"]: dist.version
            for dist in metadata.distributions()
            if dist.metadata["Name"]
        }
        _FOUND.update(
            state=state, packages=dict(sorted(found.items(), key=lambda item: item[0].lower()))
        )
    return dict(_FOUND["packages"])


def record() -> dict[str, Any]:
    """The provenance of what this process is about to write."""
    return {
        "kit_commit": commit(),
        "kit_version": kit_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cores": machine.usable_cores(),
        "command": sys.argv,
        "written": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "packages": packages(),
        "cpu_numerics": numerics.in_effect() | {"other_machines": cpu_records.expected_elsewhere()},
        # what else ran: a wall time recorded here is this machine's at this load
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def ran_on(made: dict[str, Any]) -> str:
    """The machine of a record in a few words: CPU and its architecture, the cores the process
    could use (records written before they were kept leave them out), OS, torch and Python,
    then the host's name, said as one (a name such as 'vm' describes no machine)."""
    cpu = made.get("cpu_numerics") or {}
    cores = f", {made['cores']} cores" if made.get("cores") else ""
    host = f", host name {made['host']}" if made.get("host") else ""
    return (
        f"{cpu.get('cpu', 'unknown CPU')} ({cpu.get('machine', '?')}){cores}, "
        f"{made.get('platform', '?')}, torch {(made.get('packages') or {}).get('torch', '?')}, "
        f"Python {made.get('python', '?')}{host}"
    )


def write(path: Path, **extra: Any) -> None:
    """`record()` and `extra` (the notebook's wall time, the inputs it read unverified:
    kit.readout.notices) as the JSON file `path`, written atomically."""
    with atomic_write(path) as handle:
        handle.write(json.dumps(record() | extra, indent=1).encode())


def append(path: Path) -> None:
    """`record()` as one more line of the JSON-lines file `path`."""
    with open(path, "a") as handle:
        handle.write(json.dumps(record()) + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    """The records of a file `write` or `append` wrote (one for `write`)."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]
