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
checkout's. When the kernels Lab starts in `notebooks/` would import another checkout's `kit`
than the server (kit.cli.kernels asks, as a kernel would), or when started from inside another
checkout, `kit lab` refuses, naming both and saying how to start it; each kernel checks again in
its first cell (kit.files.checkouts). Lab's news announcements are off: no prompt (the setting
default in `lab_config/`), nothing fetched. Its kernels talk to the server over Unix sockets, as
`python -m kit run`'s do, not local TCP (kit.cli.lab_kernels).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbstripout import strip_output

from kit.cli import kernels
from kit.files.checkouts import KIT_ROOT_ENV
from kit.files.paths import NOTEBOOKS_DIR, REPO_ROOT

#: the kit's Jupyter configuration folder (JUPYTER_CONFIG_PATH): Lab's setting defaults
CONFIG_DIR = Path(__file__).with_name("lab_config")
#: the kernel manager of Lab's kernels: Unix sockets, not local TCP (kit.cli.lab_kernels)
KERNEL_MANAGER = "kit.cli.lab_kernels.LocalSocketKernelManager"
#: what `python -m kit lab --help` says before JupyterLab's own help
HELP = f"""usage: python -m kit lab [JUPYTER LAB OPTIONS ...]

JupyterLab on the kit's repository ({REPO_ROOT}), as its notebooks are meant to be run:
  - the repository is Lab's root; the notebooks are in notebooks/, their results go to
    outputs/<profile>/ (profile 'interactive' unless a notebook's parameters cell says another);
  - saving a notebook of notebooks/ writes it without outputs, execution counts or view state,
    as committed, so running them leaves `git status` clean;
  - Lab's news announcements are off (no prompt, nothing fetched);
  - its kernels talk to it over Unix sockets in Jupyter's runtime folder, not local TCP;
  - it refuses to start, saying how to, when its kernels would import `kit` from another
    checkout than this command (several clones sharing one environment), and each kernel
    checks it again in the notebook's first cell.

options: the kit adds none; every option is JupyterLab's and is passed on as given, e.g.
  --port 8890, --no-browser, --ip 0.0.0.0, --allow-root (as root, in a container).
JupyterLab's own help follows.
"""
HELP_FLAGS = {"-h", "--help", "--help-all"}

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
    """The `jupyter lab` command line: the repository as root, the hook, then `extra`. Run as
    `-m jupyterlab`, by this very interpreter (`jupyter lab` runs the first `jupyter-lab` script
    it finds, which may be another environment's)."""
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={REPO_ROOT}",
        f"--FileContentsManager.pre_save_hook={__name__}.strip_on_save",
        f"--MappingKernelManager.kernel_manager_class={KERNEL_MANAGER}",
        "--LabApp.news_url=None",
        *extra,
    ]


def environment() -> dict[str, str]:
    """Lab's environment: the kit's Jupyter configuration folder last on JUPYTER_CONFIG_PATH
    (its `labconfig/default_setting_overrides.json`: Lab's announcements set to never fetch
    news, so Lab does not ask whether to; a setting the user changes in Lab still wins), and
    this kit's root for the kernels' first-cell check (kit.files.checkouts)."""
    paths = [os.environ.get("JUPYTER_CONFIG_PATH"), str(CONFIG_DIR)]
    return os.environ | {
        "JUPYTER_CONFIG_PATH": os.pathsep.join(filter(None, paths)),
        KIT_ROOT_ENV: str(REPO_ROOT),
    }


def command(extra: list[str]) -> int:
    """Replace this process by JupyterLab (its own Ctrl-C and messages then apply); refuse,
    saying why, when its kernels would import another checkout's `kit` than this process, or
    when started inside another checkout (kit.cli.kernels). With `--help`, the kit's help
    first, then JupyterLab's."""
    if HELP_FLAGS & set(extra):
        print(HELP, flush=True)
    else:
        problem = kernels.split_problem("lab")
        if problem is not None:
            print(f"kit lab: {problem}", file=sys.stderr)
            return 2
    line = arguments(extra)
    os.execve(line[0], line, environment())
    return 0  # not reached: execve does not return
