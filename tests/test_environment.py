"""The tests that read the process's environment (marked `environment`) pass again under the
variables users and sites commonly set: a site's OpenBLAS, OpenMP and MKL settings,
other values of the kit's own numerics caps, visible GPUs, a fixed hash seed, the C locale, a
TMPDIR on another file system (tmpfs), torch's and XDG's folders elsewhere. A pytest in a
subprocess runs them, so CI sees both the environment it has and this one; the marker selects
them, so the list cannot drift from the tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import NESTED_ENV, TESTS_DIR

from kit.files.paths import REPO_ROOT
from kit.numerics import numerics

#: a user's or a site's settings, each of another value than the kit's where the kit has one
USERS_ENVIRONMENT = {
    "TIMECAT_CPU_NUMERICS": "fast",  # a user's daily choice; the tests run reproducible (conftest)
    "OPENBLAS_CORETYPE": "Haswell",
    "OPENBLAS_L2_SIZE": "512",
    "OPENBLAS_NUM_THREADS": "2",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "3",
    "MKL_CBWR": "AUTO",
    "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    "KMP_AFFINITY": "granularity=fine,compact,1,0",
    "ATEN_CPU_CAPABILITY": "avx512",
    "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
    "CUDA_VISIBLE_DEVICES": "0",
    # a shell inside a Slurm allocation or a torchrun worker (tests/conftest.py clears them)
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "PYTHONHASHSEED": "123",
    "LANG": "C",
    "LC_ALL": "C",
}
#: folders a user's environment points elsewhere (made under the test's own folder, not created)
USERS_FOLDERS = (
    "TORCH_HOME",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
)
MARKER = "pytest.mark.environment"  # a decorator, or a module's pytestmark


def marked_modules() -> list[Path]:
    """The test modules with a test marked `environment` (this one's excepted)."""
    return sorted(
        path
        for path in TESTS_DIR.glob("test_*.py")
        if path.name != Path(__file__).name and MARKER in path.read_text()
    )


def test_the_users_environment_sets_a_value_other_than_the_kits_for_each_of_its_caps() -> None:
    """Otherwise the run below would not show that the kit replaces a user's value; and the
    kit's list names every numerics variable of the set."""
    for name, value in numerics.REPRODUCIBLE_ENVIRONMENT.items():
        assert USERS_ENVIRONMENT.get(name, value) != value, name
    launchers = {name for name in USERS_ENVIRONMENT if name.startswith("SLURM_")}
    assert set(USERS_ENVIRONMENT) - launchers - {
        "PYTHONHASHSEED",
        "LANG",
        "LC_ALL",
        "CUDA_VISIBLE_DEVICES",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
    } <= (set(numerics.NUMERICS_VARIABLES))


@pytest.mark.slow
def test_the_environment_reading_tests_pass_under_a_users_variables(tmp_path: Path) -> None:
    modules = marked_modules()
    assert modules, f"no test module has {MARKER}"
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(
        prefix="kit-tests-tmpdir-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    ) as tmpdir:
        env = (
            os.environ
            | {"PYTHONPATH": str(REPO_ROOT), NESTED_ENV: "1", "TMPDIR": tmpdir}
            | USERS_ENVIRONMENT
            | {name: str(tmp_path / name.lower()) for name in USERS_FOLDERS}
        )
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "0", "-q", "-m", "environment", "-p"]
            + ["no:cacheprovider", *(str(m.relative_to(REPO_ROOT)) for m in modules)],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=480,
        )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-2000:]
