"""The lock: `uv.lock` pins every package README's commands and `.ci/run` install, and
`requirements-lock.txt` (conda's `environment.yml`) is its export; both must follow
`pyproject.toml`. uv's own check compares the lock's recorded inputs with the project's, offline
and in well under a second (https://docs.astral.sh/uv/concepts/projects/sync/).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kit.files.paths import REPO_ROOT

#: uv beside the interpreter (README's commands install it there), else on PATH
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed (README's commands)")

#: how requirements-lock.txt is made from uv.lock (its header says the same)
EXPORT = ["export", "--frozen", "--no-hashes", "--extra", "dev", "-o", "requirements-lock.txt"]


def uv(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UV, *args, "--offline", "--python", sys.executable],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def locked_version(name: str) -> str:
    packages = tomllib.loads((REPO_ROOT / "uv.lock").read_text())["package"]
    return next(p["version"] for p in packages if p["name"] == name)


def test_the_lock_is_current_with_pyproject() -> None:
    done = uv("lock", "--check")
    assert done.returncode == 0, (
        f"uv.lock is stale against pyproject.toml; run `uv lock`:\n{done.stderr}"
    )


#: what uv logs (-v) when the lock's recorded requirements are not the project's: it then
#: resolves anew, which offline needs registry metadata in uv's cache. A machine that only ever
#: installed from the lock (README's commands) has none and answers "No solution found ... the
#: network was disabled"; one that resolved before answers "needs to be updated". Either way
#: the lock was found stale, which is what the check is for
STALE = "Resolving despite existing lockfile due to mismatched requirements"


def test_a_changed_requirement_makes_the_lock_stale(tmp_path: Path) -> None:
    # the check above can fail: the same lock against a pyproject.toml with one floor raised
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    project = tmp_path / "pyproject.toml"
    text = project.read_text()
    assert '"polars>=1.10"' in text
    project.write_text(text.replace('"polars>=1.10"', '"polars>=1.10,!=1.10.1"'))
    done = uv("lock", "--check", "-v", cwd=tmp_path)
    assert done.returncode != 0
    assert STALE in done.stderr or "needs to be updated" in done.stderr, done.stderr[-2000:]
    # and the current lock is not: no fresh resolution at all
    current = uv("lock", "--check", "-v")
    assert current.returncode == 0 and STALE not in current.stderr


def test_the_conda_requirements_are_the_locks_export(tmp_path: Path) -> None:
    exported = tmp_path / "requirements-lock.txt"
    shutil.copy(REPO_ROOT / "uv.lock", tmp_path / "uv.lock")
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    done = uv(*EXPORT[:-1], str(exported), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    body = exported.read_text().split("\n", 2)[2]  # after the header naming the output path
    committed = (REPO_ROOT / "requirements-lock.txt").read_text()
    assert f"uv {' '.join(EXPORT)}" in committed.splitlines()[1]
    assert committed.split("\n", 2)[2] == body, "run `uv " + " ".join(EXPORT) + "`"


def test_the_lock_pins_the_papers_torch_and_a_portable_index() -> None:
    assert locked_version("torch") == "2.14.1" and locked_version("torchvision") == "0.29.1"
    lock = (REPO_ROOT / "uv.lock").read_text()
    sources = set(re.findall(r'registry = "([^"]+)"', lock))
    assert sources == {"https://pypi.org/simple"}, "the lock names a local index or mirror"


def test_the_commands_bootstrap_the_locked_uv() -> None:
    # the uv that README's commands install first is the one the lock keeps (sync leaves it)
    wanted = f"pip install -q uv=={locked_version('uv')} "
    for name in ("README.md", ".ci/run", "docs/getting-started.md"):
        text = (REPO_ROOT / name).read_text()
        assert wanted in text, f"{name} does not install {wanted.strip()}"
        assert "pip install -q uv==" not in text.replace(wanted, ""), name


def test_the_lock_leaves_out_the_iri_grammar_every_jsonschema_import_would_build() -> None:
    """rfc3987-syntax (jsonschema's format-nongpl extra) compiles a Lark grammar when jsonschema
    is imported, about 1 s of CPU in every kernel and `kit` command; the lock excludes it, so an
    environment installed from the lock imports altair and nbformat without it."""
    packages = {p["name"] for p in tomllib.loads((REPO_ROOT / "uv.lock").read_text())["package"]}
    assert "rfc3987-syntax" not in packages and "jsonschema" in packages
    grammar = "{'rfc3987_syntax', 'lark'}"
    code = f"import sys, altair, nbformat; print(sorted({grammar} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", "jsonschema built the IRI grammar at import"
