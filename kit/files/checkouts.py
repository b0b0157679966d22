"""Which checkout's `kit` a process imports, and whether a notebook's kernel imports the one its
runner does.

Several clones or worktrees can share one virtual environment, whose editable `kit` is then one
checkout's. `python -m kit` puts the current folder first on the import path, so `python -m kit
run` or `lab` started in checkout B with the environment of checkout A runs B's kit, while the
kernels it starts in B's `notebooks/` (no `kit` there) import the environment's, A's: they would
run A's code and write to A's `outputs/`, and B's records would vouch for results that are not
there. The command refuses before it starts anything (kit.cli.kernels asks a Python started as a
kernel would be); and the kernel checks again in its first cell (`check_kernel`, called by
kit.params.kernel_params.from_notebook), against the kit root and output folder the command passes
in KIT_ROOT_ENV and OUTPUT_DIR_ENV: a kernel the command did not foresee (another kernel chosen in
Lab, another kernelspec) stops there, before it writes anything.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kit.files.paths import REPO_ROOT

#: the kit root of the `python -m kit` (run, lab) that starts a kernel: the kernel's must match
KIT_ROOT_ENV = "KIT_RUNNER_ROOT"
#: the output folder `python -m kit run` reads a notebook's results from: the kernel's must match
OUTPUT_DIR_ENV = "KIT_RUNNER_OUTPUT_DIR"


class CheckoutError(RuntimeError):
    """A kernel and the command that started it import `kit` from different checkouts."""


def checkout_of(folder: Path) -> Path | None:
    """The kit checkout (a folder holding `kit/__init__.py` and `notebooks/`) that `folder` lies
    in; None outside any."""
    for candidate in (folder.resolve(), *folder.resolve().parents):
        if (candidate / "kit" / "__init__.py").is_file() and (candidate / "notebooks").is_dir():
            return candidate
    return None


def split_message(command: str, kernel_root: Path | None, notebooks: Path) -> str:
    """Why `python -m kit <command>` refuses when its kernels, started in `notebooks`, would
    import `kit` from `kernel_root` (None: from nowhere), not from this process's checkout; and
    how to start it so that both import the same one."""
    here, python = REPO_ROOT, sys.executable
    same_kit = (
        f"`PYTHONPATH={here} {python} -m kit {command}` (its kernels then import it too), or give "
        f"{here} an environment of its own (or `{python} -m pip install -e {here}`, which makes "
        "this environment's kit that checkout's)"
    )
    if kernel_root is None:
        return (
            f"this Python ({python}) runs the kit of {here}, but a kernel it "
            f"starts in {notebooks} cannot import `kit` (it is not installed in this "
            f"environment). Start it as {same_kit}."
        )
    return (
        f"this Python ({python}) runs the kit of {here} (Python puts the folder "
        f"you start `-m kit` in first on its path), but the kernels it starts in {notebooks} "
        f"import `kit` from {kernel_root} (this environment's): they would run that "
        f"checkout's code and write to its outputs/, while `kit {command}` serves and records "
        f"{here}. To work in {here}, start it as {same_kit}; to work in {kernel_root}, run "
        f"`cd {kernel_root} && {python} -m kit {command}`."
    )


def elsewhere_message(command: str, other: Path) -> str:
    """Why `python -m kit <command>` refuses when started inside checkout `other`, while this
    process (and its kernels) import the kit of another checkout."""
    python = sys.executable
    return (
        f"this Python imports `kit` from {REPO_ROOT}, not from the checkout you "
        f"are in ({other}): it would serve, run and save the other checkout's notebooks and "
        f"write to its outputs/. Run `{python} -m pip install -e .` here (the environment then "
        f"imports this checkout), or start with PYTHONPATH={other} {python} -m kit {command}, "
        f"or run it from {REPO_ROOT}."
    )


def check_kernel(output_dir: Path | None = None) -> None:
    """In a notebook's first cell: refuse, naming both, when the command that started this
    kernel (KIT_ROOT_ENV) runs another checkout's kit than the one this kernel imports, or
    reads the results from another folder (OUTPUT_DIR_ENV) than `output_dir`, where this kernel
    writes them. Without the variables (plain papermill, `jupyter lab`) there is nothing to
    compare with."""
    runner_root = os.environ.get(KIT_ROOT_ENV)
    if runner_root and Path(runner_root).resolve() != REPO_ROOT.resolve():
        raise CheckoutError(
            f"this kernel ({sys.executable}) imports `kit` from {REPO_ROOT}, but the `python -m "
            f"kit` that started it runs the kit of {runner_root}: this notebook would run "
            f"{REPO_ROOT}'s code and write to its outputs/, not to {runner_root}'s. Start Lab or "
            f"the run as `PYTHONPATH={runner_root} python -m kit ...`, or choose a kernel whose "
            f"Python imports {runner_root}'s kit."
        )
    expected = os.environ.get(OUTPUT_DIR_ENV)
    if output_dir is not None and expected and Path(expected).resolve() != output_dir.resolve():
        raise CheckoutError(
            f"this kernel would write its results to {output_dir}, but the `python -m kit run` "
            f"that started it reads and records them in {expected}: the kernel imports `kit` "
            f"from {REPO_ROOT}. Start the run as `PYTHONPATH=<the checkout you run> python -m "
            "kit run ...`."
        )
