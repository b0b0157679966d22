"""Every size-like setting is costed against this machine's memory before anything starts
(kit.experiments.timecat.memory): `kit check` says the plan's memory and disk beside the
machine's, and `kit check` and `kit run` refuse a plan that would not fit, naming the key and
the figure, before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.cli import runner
from kit.cli.main import main as kit_main
from kit.runtime import machine

#: a machine of 8 GB: the ci profile's plan fits, and plans that grow to 9-10 GB (as they once
#: did) do not
SMALL = 8 * 10**9


@pytest.fixture()
def small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "memory_bytes", lambda: SMALL)
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)


def check(capsys: pytest.CaptureFixture[str], tmp_path: Path, *sets: str) -> tuple[int, str, str]:
    arguments = ["check", "03", "--profile", "ci", "--set", f"output_dir={tmp_path}"]
    for value in sets:
        arguments += ["--set", value]
    code = kit_main(arguments)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.usefixtures("small_machine")
def test_kit_check_says_the_plans_memory_and_disk_beside_the_machines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = check(capsys, tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    memory = next(line for line in lines if line.startswith("this machine: memory: about "))
    assert memory.endswith(" at the peak (training) of 8.0 GB"), memory
    assert any(
        line.startswith("this machine: disk: about 24.6 MB still to write under ")
        and line.endswith(" free")
        for line in lines
    ), lines


@pytest.mark.usefixtures("small_machine")
@pytest.mark.parametrize(
    ("override", "said"),
    [
        (
            "train.data.synthetic.num_train=100000000",
            "train.data.synthetic.num_train: 100000000 makes the plan's training hold about "
            "10.4 GB of memory (rows indexed: about 9.6 GB), but this machine has 8.0 GB; lower "
            "train.data.synthetic.num_train",
        ),
        (
            "train.data.image_size=4096",
            "train.data.image_size: 4096 makes the plan's training hold about 686.4 GB",
        ),
        (
            "feature_workers=1024",
            "feature_workers: 1024 makes the plan's feature extraction and probing hold about "
            "12.3 GB of memory (feature loader workers: about 11.9 GB), but this machine has "
            "8.0 GB; lower feature_workers",
        ),
        (
            "side_by_side=1024",
            "side_by_side: 1024 backbones or probes at once, one thread each, but this machine "
            "has 2 usable cores; lower side_by_side to 2 or less",
        ),
    ],
    ids=["rows", "image_size", "feature_workers", "side_by_side"],
)
def test_a_plan_that_would_not_fit_is_refused_naming_the_key_and_the_figure(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    override: str,
    said: str,
) -> None:
    """`kit check` called these valid with the unchanged cost, and `kit run` grew its processes
    to 9-10 GB in silence: both refuse them before anything starts."""
    code, _, err = check(capsys, tmp_path, override)
    assert code == 2 and f"error: this machine: {said}" in err, err
    monkeypatch.setattr(runner, "execute", lambda *_: pytest.fail("started"))
    arguments = ["run", "03", "--profile", "ci", "--set", f"output_dir={tmp_path}"]
    assert kit_main([*arguments, "--set", override]) == 2
    assert said in capsys.readouterr().err
    assert not list(tmp_path.glob("*.partial.ipynb"))
