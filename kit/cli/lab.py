"""`python -m kit lab`: JupyterLab at the repository root, saving the kit's notebooks the way
they are committed.

It starts `jupyter lab` with `strip_on_save` as the contents manager's pre-save hook. A notebook
of the kit's `notebooks/` folder is then written without outputs, execution counts, kernel
metadata (`language_info`, widget state) or view state (a collapsed input or output: the cell
metadata `jupyter.source_hidden` and `jupyter.outputs_hidden` of nbformat's schema, and the older
`collapsed` and `scrolled`), cell ids kept: the stripping of the git filter in the README, with
the same keys. Running or collapsing cells in Lab therefore leaves `git status` clean and the test
suite unaffected; what a run computes is written to `outputs/<profile>/` by the notebook itself.
Other files are saved untouched. The hook strips the notebooks of the `notebooks/` folder at the
server's root, whichever checkout's `kit` the server imported.

Several clones or worktrees can share one virtual environment, whose `kit` is then one
checkout's. Started from inside another checkout, `kit lab` refuses, naming both: its kernels
would import that other checkout's `kit` and write to that checkout's `outputs/`. Lab's news
announcements are off (no prompt, nothing fetched).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbstripout import strip_output

from kit.core.paths import NOTEBOOKS_DIR, REPO_ROOT

#: the keys the kit strips beyond nbstripout's defaults (README's `--extra-keys`): the kernel's
#: version details, and the view state Lab saves when a cell's input or output is collapsed
KIT_KEYS = ["metadata.language_info", "cell.metadata.jupyter"]
#: nbstripout's command line strips these by default; its `strip_output` function does not
NBSTRIPOUT_DEFAULTS = [
    "metadata.signature",
    "metadata.widgets",
    "cell.metadata.collapsed",
    "cell.metadata.ExecuteTime",
    "cell.metadata.execution",
    "cell.metadata.heading_collapsed",
    "cell.metadata.hidden",
    "cell.metadata.scrolled",
]
EXTRA_KEYS = NBSTRIPOUT_DEFAULTS + KIT_KEYS


def is_kit_notebook(root_dir: str | Path, path: str) -> bool:
    """Whether `path` (relative to Lab's root folder) is a notebook of the `notebooks/` folder
    at that root: the checkout Lab serves, whichever checkout the server's `kit` is."""
    root = Path(root_dir).resolve()
    target = (root / path.strip("/")).resolve()
    return target.suffix == ".ipynb" and target.parent == root / NOTEBOOKS_DIR.name


def strip_on_save(model: dict[str, Any], path: str, contents_manager: Any, **kwargs: Any) -> None:
    """FileContentsManager.pre_save_hook: strip a kit notebook before it is written."""
    if model.get("type") != "notebook" or not is_kit_notebook(contents_manager.root_dir, path):
        return
    notebook = nbformat.from_dict(model["content"])
    model["content"] = strip_output(
        notebook, keep_output=False, keep_count=False, keep_id=True, extra_keys=EXTRA_KEYS
    )


def arguments(extra: list[str]) -> list[str]:
    """The `jupyter lab` command line: the repository as root, the hook, then `extra`."""
    return [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        f"--ServerApp.root_dir={REPO_ROOT}",
        f"--FileContentsManager.pre_save_hook={__name__}.strip_on_save",
        "--LabApp.news_url=None",
        *extra,
    ]


def other_checkout(folder: Path) -> Path | None:
    """The kit checkout (a folder holding `kit/` and `notebooks/`) that `folder` lies in, when
    it is not the one this `kit` was imported from; None otherwise."""
    for candidate in (folder.resolve(), *folder.resolve().parents):
        if (candidate / "kit" / "__init__.py").is_file() and (candidate / "notebooks").is_dir():
            return None if candidate == REPO_ROOT.resolve() else candidate
    return None


def command(extra: list[str]) -> int:
    """Replace this process by JupyterLab (its own Ctrl-C and messages then apply); refuse,
    saying why, when started inside another checkout than the one whose `kit` is imported."""
    other = other_checkout(Path.cwd())
    if other is not None:
        print(
            f"kit lab: this Python imports `kit` from {REPO_ROOT}, not from the checkout you are "
            f"in ({other}): Lab would serve, run and save the other checkout's notebooks and "
            f"write to its outputs/. Run `{sys.executable} -m pip install -e .` here (the "
            f"environment then imports this checkout), or start with "
            f"PYTHONPATH={other} {sys.executable} -m kit lab, or run it from {REPO_ROOT}.",
            file=sys.stderr,
        )
        return 2
    line = arguments(extra)
    os.execv(line[0], line)
    return 0  # not reached: execv does not return
