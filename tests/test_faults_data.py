"""Faults in data and output folders, each kept from coming back: a data file that would run code
when read, a corrupt image of a probe task found only after every run has trained, an output
folder that cannot be written passing the check as root. Each is refused before any compute, in
one line naming the file or key."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.data import kinds
from kit.data.fixtures import write_cifar, write_image_folder
from kit.data.kinds.base import DataError
from kit.data.kinds.cifar import read_cifar_pickle
from kit.data.preflight import preflight, writable_problems
from kit.data.settings import DataSettings
from kit.experiments.timecat import planning
from kit.experiments.timecat.settings import TimecatSettings
from kit.files.paths import REPO_ROOT, importable_environment
from kit.params import params


def kit_check(notebook: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kit", "check", notebook, "--profile", "ci", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        env=importable_environment(),
    )


# ---------------------------------------------------------------------------------------------
# A CIFAR pickle that runs a command when read
# ---------------------------------------------------------------------------------------------


class RunsCommand:
    """What a crafted pickle holds: unpickling it calls os.system."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple:
        return os.system, (self.command,)


def crafted_cifar(root: Path, name: str = "data_batch_1") -> Path:
    """A CIFAR-10 root in torchvision's format whose `name` runs `touch <root>/pwned` when
    unpickled; returns the marker that command would create."""
    write_cifar(root, "cifar10", 4)
    marker = root / "pwned"
    payload = {"data": RunsCommand(f"touch {marker}"), "labels": [0, 1, 2, 3]}
    (root / "cifar-10-batches-py" / name).write_bytes(pickle.dumps(payload))
    return marker


@pytest.mark.parametrize("name", ["data_batch_1", "batches.meta"])
def test_a_cifar_pickle_naming_other_code_is_refused_by_the_check(
    tmp_path: Path, name: str
) -> None:
    marker = crafted_cifar(tmp_path, name)
    problems = preflight(DataSettings(kind="cifar10", root=str(tmp_path), image_size=32))
    crafted = tmp_path / "cifar-10-batches-py" / name
    assert len(problems) == 1, problems
    assert str(crafted) in problems[0] and "posix.system" in problems[0]
    assert "not CIFAR data" in problems[0]
    assert not marker.exists()


def test_kit_check_refuses_a_crafted_cifar_batch_of_a_task(tmp_path: Path) -> None:
    marker = crafted_cifar(tmp_path / "cifar")
    parameters = tmp_path / "tasks.yaml"
    parameters.write_text(
        f"output_dir: {tmp_path / 'out'}\n"
        "tasks:\n"
        "  - {name: mixture, role: in-distribution, pretraining: true}\n"
        "  - {name: shape, role: in-mixture, components: [[shape]]}\n"
        f"  - {{name: cifar, role: unseen, num_classes: 10, data: {{kind: cifar10, "
        f"root: {tmp_path / 'cifar'}, image_size: 32}}}}\n"
    )
    checked = kit_check("03", "-f", str(parameters))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    crafted = tmp_path / "cifar" / "cifar-10-batches-py" / "data_batch_1"
    assert f"{crafted}: refuses to load posix.system: not CIFAR data" in checked.stderr
    assert not marker.exists()


def test_reading_a_crafted_cifar_pickle_runs_nothing(tmp_path: Path) -> None:
    marker = crafted_cifar(tmp_path)
    crafted = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    with pytest.raises(DataError, match="refuses to load posix.system") as refused:
        read_cifar_pickle(crafted)
    assert str(refused.value).startswith(f"{crafted}:") and "\n" not in str(refused.value)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("bytes_keys", [False, True])
def test_cifar_in_the_real_format_still_loads(
    tmp_path: Path, protocol: int, bytes_keys: bool
) -> None:
    """Arrays, labels and class names, at the protocols Python 2 and 3 write, with text or
    bytes keys, and numpy scalars among the labels."""
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(tmp_path, "cifar10", 4, bytes_keys)
    pixels = np.arange(4 * 3072, dtype=np.uint8).reshape(4, 3072) % 251
    batch = {
        "batch_label": "training batch 1 of 5",
        "data": pixels,
        "labels": [np.int64(3), 1, 2, 0],
        "filenames": [f"f{i}.png" for i in range(4)],
    }
    (folder / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=protocol))
    assert not preflight(DataSettings(kind="cifar10", root=str(tmp_path), image_size=32))
    read = read_cifar_pickle(folder / "data_batch_1")
    assert np.array_equal(read["data"], pixels) and read["labels"] == [3, 1, 2, 0]
    data = DataSettings(kind="cifar10", root=str(tmp_path), image_size=32)
    train = kinds.get("cifar10").open_split(data, "train", 10)
    assert train.classes == [f"c{i}" for i in range(10)] and len(train) == 5 * 4
    assert train.labels[:4].tolist() == [3, 1, 2, 0]
    assert np.array_equal(train.images[0].permute(2, 0, 1).reshape(-1).numpy(), pixels[0])


# ---------------------------------------------------------------------------------------------
# A corrupt image in a probe task
# ---------------------------------------------------------------------------------------------


def task_folder(root: Path) -> Path:
    """A two-class image folder of real JPEGs, one of them truncated; returns that one."""
    write_image_folder(root, ("ant", "bee"), {"train": 3, "val": 2})
    corrupt = root / "val" / "bee" / "bee1.JPEG"
    corrupt.write_bytes(corrupt.read_bytes()[:200])
    return corrupt


def test_a_corrupt_image_of_a_probe_task_is_refused_before_anything_trains(tmp_path: Path) -> None:
    corrupt = task_folder(tmp_path / "ants")
    loaded, _ = params.load(
        "03_time_concat",
        "ci",
        overrides={
            "output_dir": str(tmp_path / "out"),
            "tasks": [
                {"name": "mixture", "role": "in-distribution", "pretraining": True},
                {"name": "shape", "role": "in-mixture", "components": [["shape"]]},
                {
                    "name": "ants",
                    "role": "unseen",
                    "num_classes": 2,
                    "data": {
                        "kind": "imagefolder",
                        "root": str(tmp_path / "ants"),
                        "image_size": 16,
                    },
                },
            ],
        },
    )
    assert isinstance(loaded, TimecatSettings)  # the pre-flight sample (bee0) decodes
    with pytest.raises(DataError, match="tasks: ants") as refused:
        planning.launch(planning.plan(loaded).trainings, loaded)
    assert str(corrupt) in str(refused.value)
    runs = planning.runs_dir(loaded)
    assert not [*runs.rglob("checkpoint.pt"), *runs.rglob("metrics.jsonl")]


# ---------------------------------------------------------------------------------------------
# An output folder that cannot be written
# ---------------------------------------------------------------------------------------------


def test_an_output_folder_the_file_system_refuses_is_named() -> None:
    """/proc refuses new files even for root, for whom os.access says yes."""
    problems = writable_problems(Path("/proc/nope"))
    assert len(problems) == 1 and problems[0].startswith("/proc/nope: ")
    assert "No such file or directory" in problems[0] and not Path("/proc/nope").exists()


def test_a_writable_output_folder_passes_and_is_not_created(tmp_path: Path) -> None:
    assert writable_problems(tmp_path) == []
    assert writable_problems(tmp_path / "new" / "deeper") == []
    assert not (tmp_path / "new").exists()
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


def test_an_output_folder_behind_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    problems = writable_problems(tmp_path / "file" / "out")
    assert len(problems) == 1 and str(tmp_path / "file" / "out") in problems[0]


def test_kit_check_refuses_an_output_folder_that_cannot_be_written() -> None:
    checked = kit_check("01", "--set", "output_dir=/proc/nope")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    lines = checked.stderr.strip().splitlines()
    assert len(lines) == 1 and "/proc/nope" in lines[0], checked.stderr
