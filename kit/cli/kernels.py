"""Where the kernels of `python -m kit run` and `lab` import `kit` from, asked before they start.

A kernel is the kernelspec's Python (jupyter_client's "python3": this interpreter) started in
the notebooks' folder with this process's environment, so it need not import the `kit` this
process imports (kit.files.checkouts says when and why). `split_problem` asks a Python started the
same way where `import kit` would resolve (without running it), and says why the command refuses
when that is another checkout than this process's, or when the command is started inside
another checkout than the one it imports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kit.files.checkouts import checkout_of, elsewhere_message, split_message
from kit.files.paths import NOTEBOOKS_DIR, REPO_ROOT

#: the kernel both commands start (the stripped notebooks name none; Lab offers its default)
KERNEL_NAME = "python3"
#: what the asked Python prints: the file `import kit` would run, found without running it
FIND_KIT = "import importlib.util as u; s = u.find_spec('kit'); print(s.origin if s else '')"
#: seconds the asked Python gets to answer
ASK_TIMEOUT_S = 60.0


def kernel_command(kernel_name: str = KERNEL_NAME) -> tuple[list[str], dict[str, str]]:
    """The interpreter a kernel of `kernel_name` runs and the environment it gets, as
    jupyter_client forms them (a spec's 'python' stands for this interpreter)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        return [sys.executable], dict(os.environ)
    python = spec.argv[0] if spec.argv else sys.executable
    major, minor = sys.version_info[:2]
    if python in {"python", f"python{major}", f"python{major}.{minor}"}:
        python = sys.executable
    return [python], dict(os.environ) | dict(spec.env or {})


def kernel_kit(notebooks: Path = NOTEBOOKS_DIR, kernel_name: str = KERNEL_NAME) -> Path | None:
    """The folder holding the `kit` a kernel started in `notebooks` imports (a checkout, or
    site-packages for an installed copy, as REPO_ROOT is then); None where it finds none."""
    command, env = kernel_command(kernel_name)
    found = subprocess.run(
        [*command, "-c", FIND_KIT],
        cwd=notebooks,
        env=env,
        capture_output=True,
        text=True,
        timeout=ASK_TIMEOUT_S,
        check=False,
    ).stdout.strip()
    return Path(found).resolve().parents[1] if found else None


def split_problem(command: str, notebooks: Path = NOTEBOOKS_DIR) -> str | None:
    """Why `python -m kit <command>` must not start here (None: it may): its kernels would
    import another checkout's `kit` than this process, or it was started inside another
    checkout than the one it imports."""
    found = kernel_kit(notebooks)
    if found is None or found != REPO_ROOT.resolve():
        return split_message(command, found, notebooks)
    other = checkout_of(Path.cwd())
    if other is not None and other != REPO_ROOT.resolve():
        return elsewhere_message(command, other)
    return None
