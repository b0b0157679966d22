"""Two checkouts, one environment: `python -m kit lab` and `run` refuse, naming both, when the
kernels they start would import the other checkout's `kit`, and a kernel refuses in its first
cell when its kit or output folder is not its command's (kit.cli.kernels, kit.files.checkouts).

The checkouts are two copies of this working tree (its tracked and untracked, not ignored
files, as a clone at this commit holds them); the environment is a virtual environment of this
interpreter whose `kit` is checkout A (a path file naming A, as an editable install makes), and
whose other packages and Jupyter's data files are this environment's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest

from kit.cli import kernels, lab, runner
from kit.files import checkouts
from kit.files.paths import REPO_ROOT
from kit.params import kernel_params

#: the notebook the runs try (the quickest at the ci profile)
NOTEBOOK = "02_surveyed_evidence"
#: the output folders the runs and the kernel are given, inside each checkout
OUTPUT, KERNEL_OUTPUT = "outputs/split-checkouts", "outputs/split-kernel"


def copy_checkout(target: Path) -> Path:
    """This working tree's files (tracked, and untracked but not ignored) copied to `target`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def two_checkouts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Checkouts A and B and the Python of an environment whose `kit` is A's."""
    root = tmp_path_factory.mktemp("checkouts")
    first, second = copy_checkout(root / "A"), copy_checkout(root / "B")
    environment = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", environment], check=True)
    python = environment / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "kit_checkout_a.pth").write_text(
        f"{first}\n{sysconfig.get_paths()['purelib']}\n"  # A's kit, this environment's packages
    )
    (environment / "share").symlink_to(Path(sys.prefix) / "share")  # Jupyter's data files
    return first, second, python


def kit_command(
    python: Path, cwd: Path, *arguments: str, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KIT_")}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [python, "-m", "kit", *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_kit_lab_in_the_other_checkout_refuses_naming_both(two_checkouts) -> None:
    """Started in B with A's environment, `kit lab` serves B while its kernels import A's kit:
    it refuses, naming both and how to start it; started as it says (or in A), it starts."""
    first, second, python = two_checkouts
    refused = kit_command(python, second, "lab", "--no-browser")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stderr
    assert str(first) in said and str(second) in said, said
    assert f"PYTHONPATH={second}" in said and f"cd {first}" in said, said
    for cwd, pythonpath in ((second, second), (first, None)):
        started = kit_command(python, cwd, "lab", "--version", pythonpath=pythonpath)
        assert started.returncode == 0, started.stderr  # JupyterLab's own answer
        assert started.stdout.strip()[:1].isdigit(), started.stdout


@pytest.mark.slow
def test_kit_run_in_the_other_checkout_refuses_and_writes_nothing(two_checkouts) -> None:
    """Started in B with A's environment, `kit check` says so and `kit run` refuses before any
    kernel starts, naming both; nothing is written to either checkout's output folder. Started
    as it says, the notebook runs and its kernel writes where the runner records it, in B."""
    first, second, python = two_checkouts
    arguments = ("run", NOTEBOOK, "--profile", "ci", "--set", f"output_dir={OUTPUT}")
    checked = kit_command(python, second, "check", *arguments[1:])
    assert checked.returncode == 2 and str(first) in checked.stderr, checked.stderr
    refused = kit_command(python, second, *arguments)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert str(first) in refused.stderr and str(second) in refused.stderr, refused.stderr
    assert f"PYTHONPATH={second}" in refused.stderr, refused.stderr
    assert not (first / OUTPUT).exists() and not (second / OUTPUT).exists()
    ran = kit_command(python, second, *arguments, pythonpath=second)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert (second / OUTPUT / f"{NOTEBOOK}.ipynb").is_file()
    assert (second / OUTPUT / f"{NOTEBOOK}.provenance.json").is_file()
    assert list((second / OUTPUT).glob("*.parquet")), "the kernel wrote no results in B"
    assert not (first / OUTPUT).exists(), "the kernel wrote to the other checkout"


@pytest.mark.slow
def test_a_kernel_of_the_other_checkout_stops_at_its_first_cell(
    two_checkouts, tmp_path: Path
) -> None:
    """A kernel that imports A's kit, started for B's command (the variables `kit run` and
    `kit lab` set), stops in the first cell after the parameters, naming both, before it
    writes anything: the check that catches a kernel the command did not foresee."""
    first, second, python = two_checkouts
    executed = tmp_path / "executed.ipynb"
    env = {key: value for key, value in os.environ.items() if not key.startswith("KIT_")}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [
            python,
            "-m",
            "papermill",
            second / "notebooks" / f"{NOTEBOOK}.ipynb",
            executed,
            "-p",
            "profile",
            "ci",
            "-p",
            "output_dir",
            KERNEL_OUTPUT,
            "--cwd",
            second / "notebooks",
        ],
        env=env | {checkouts.KIT_ROOT_ENV: str(second)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode != 0
    errors = [
        output
        for cell in nbformat.read(executed, as_version=4).cells
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert [error.ename for error in errors] == ["CheckoutError"], result.stderr[-2000:]
    assert str(first) in errors[0].evalue and str(second) in errors[0].evalue
    assert not (first / KERNEL_OUTPUT).exists() and not (second / KERNEL_OUTPUT).exists()


def test_the_kernels_kit_is_asked_from_the_notebooks_folder(tmp_path: Path) -> None:
    """Asked as a kernel would be (this Python, in the notebooks' folder), the kit is this
    checkout's; in a folder holding another `kit`, that one, which the command then refuses."""
    assert kernels.kernel_kit() == REPO_ROOT.resolve()
    assert kernels.split_problem("run") is None
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "__init__.py").write_text("")
    assert kernels.kernel_kit(tmp_path) == tmp_path.resolve()
    said = kernels.split_problem("run", tmp_path)
    assert said is not None and str(tmp_path.resolve()) in said and str(REPO_ROOT) in said


def test_kit_run_refuses_before_planning_when_its_kernels_import_another_kit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "__init__.py").write_text("")
    assert runner.run(None, "no-such-profile", notebooks_dir=tmp_path) == 2
    said = capsys.readouterr().err
    assert str(tmp_path.resolve()) in said and "no-such-profile" not in said, said


def test_a_kernel_checks_the_kit_and_output_folder_of_its_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No variable: nothing to compare (plain papermill, `jupyter lab`); this kit and this
    folder: passes; another kit root or output folder: refused, naming both."""
    for name in (checkouts.KIT_ROOT_ENV, checkouts.OUTPUT_DIR_ENV):
        monkeypatch.delenv(name, raising=False)
    checkouts.check_kernel(tmp_path)
    monkeypatch.setenv(checkouts.KIT_ROOT_ENV, str(REPO_ROOT))
    monkeypatch.setenv(checkouts.OUTPUT_DIR_ENV, str(tmp_path))
    checkouts.check_kernel(tmp_path)
    with pytest.raises(checkouts.CheckoutError, match="another") as raised:
        checkouts.check_kernel(tmp_path / "another")
    assert str(tmp_path) in str(raised.value)
    monkeypatch.setenv(checkouts.KIT_ROOT_ENV, str(tmp_path))
    with pytest.raises(checkouts.CheckoutError) as raised:
        kernel_params.from_notebook(NOTEBOOK, {"profile": "ci"})
    assert str(tmp_path) in str(raised.value) and str(REPO_ROOT) in str(raised.value)


def test_lab_passes_its_kit_to_its_kernels() -> None:
    assert lab.environment()[checkouts.KIT_ROOT_ENV] == str(REPO_ROOT)
