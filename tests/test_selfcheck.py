"""`python -m kit selfcheck`: its pure choices, and its CPU subset end to end, passing and with
planted failures that must make it exit non-zero naming the check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_dali import needs_dali

from kit.cli import main, selfcheck
from kit.cli import selfcheck_checks as checks
from kit.data.settings import dali_installed
from kit.files.paths import REPO_ROOT


@pytest.mark.parametrize(
    ("name", "rate", "estimated"),
    [
        ("NVIDIA H100 80GB HBM3", 4_645, True),
        ("NVIDIA H200", 4_645, False),
        ("NVIDIA A100-SXM4-80GB", 16_621 / 8, False),
        ("Tesla V100-SXM2-16GB", 1200.0, False),
    ],
)
def test_expected_figures_are_found_by_gpu_name_with_a_source(
    name: str, rate: float, estimated: bool
) -> None:
    figure, source = selfcheck.expected_rate(name)
    assert figure == pytest.approx(rate)
    assert source.startswith("estimate") == estimated


def test_an_unknown_gpu_has_no_expected_figure() -> None:
    assert selfcheck.expected_rate("Tesla T4") is None


def test_more_gpus_than_visible_are_refused() -> None:
    assert selfcheck.gpus_to_use(None, 8) == 8
    assert selfcheck.gpus_to_use(2, 8) == 2
    with pytest.raises(ValueError, match="--gpus 4: only 2"):
        selfcheck.gpus_to_use(4, 2)


def test_feeding_says_how_many_cores_the_gpus_need() -> None:
    assert checks.feeding({"cpu": 100.0}, 64, 5000.0).status == "ok"
    starved = checks.feeding({"cpu": 100.0}, 16, 40_000.0)
    assert starved.status == "warn"
    assert "400 free cores" in starved.note and "data.decode: cpu" in starved.note


def test_the_fastest_input_path_that_works_is_used_and_reported() -> None:
    rates = {"cpu": 300.0, "gpu": "needs a GPU", "dali": 2500.0}
    assert checks.fastest(rates) == "dali"
    row = checks.feeding(rates, 10, 20_000.0)
    assert row.check == "input pipeline (dali)" and row.status == "ok"
    assert row.measured.startswith("2,500 img/s/core")
    assert "data.decode: dali" in row.note and "cpu 300" in row.note
    assert checks.fastest({"cpu": 300.0, "gpu": 900.0, "dali": "not installed"}) == "gpu"


def test_input_rates_measure_each_path_that_works_here(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # DALI hidden
    rates = checks.input_rates(checks.CPU_SIZES, tmp_path, torch.device("cpu"))
    assert isinstance(rates["cpu"], float) and rates["cpu"] > 0
    assert rates["gpu"] == "needs a GPU"
    assert "not installed" in rates["dali"] and "pip install -e '.[dali]'" in rates["dali"]
    assert checks.fastest(rates) == "cpu"


def test_input_rates_measure_dali_where_it_is_installed(tmp_path) -> None:
    needs_dali()
    rates = checks.input_rates(checks.CPU_SIZES, tmp_path, torch.device("cpu"))
    assert isinstance(rates["dali"], float) and rates["dali"] > 0
    assert checks.fastest(rates) == max(("cpu", "dali"), key=lambda path: rates[path])


def test_cpu_subset_passes_and_says_it_is_the_cpu_subset(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps the table to the terminal's width
    assert main.main(["selfcheck"]) == 0
    out = capsys.readouterr().out
    assert "CPU subset" in out and "selfcheck passed" in out
    for check in (
        "kit trainer",
        "input pipeline",
        "preemption and resume",
        "bf16 extraction vs fp32",
        "fast probe",
    ):
        assert check in out


def test_planted_failures_make_it_exit_non_zero_naming_each(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(checks, "BF16_TOLERANCE", 0.0)  # no bf16 result is that exact
    monkeypatch.setattr(checks, "PROBE_FLOOR", 1.01)  # no accuracy is that high
    assert main.main(["selfcheck"]) == 1
    out = capsys.readouterr().out
    assert "FAILED bf16 extraction" in out and "FAILED fast probe" in out
    assert "selfcheck passed" not in out
    assert out.count("FAILED") == 2  # the other checks still ran and passed


def test_the_input_check_decodes_jpegs_as_detailed_as_imagenets(tmp_path: Path) -> None:
    """The decode rate was measured on smooth pictures, a third the size of a photograph's
    JPEG (ImageNet's training files average about 110 kB): it overstated a node's decoding."""
    paths = checks.jpegs(tmp_path, 4)
    sizes = [Path(path).stat().st_size for path in paths]
    assert 80_000 < sum(sizes) / len(sizes) < 160_000, sizes


def test_the_gpu_input_script_measures_every_decode_path_against_the_step(tmp_path: Path) -> None:
    """benchmarks/gpu_input.py at its tiny size on the CPU, without compiling (the suite's
    seconds; the compiled step is the trainer's, tested there): the eager ceiling, then the step
    fed by each decode path that runs here, each part of the gpu path alone and beside the step,
    and the step's options that need no compiling, each ratio to the ceiling, and what it ran
    on, as the JSON the GPU run writes."""
    out = tmp_path / "rates.json"
    script = REPO_ROOT / "benchmarks" / "gpu_input.py"
    command = [sys.executable, str(script), "--device", "cpu", "--tiny", "--eager", "--parts"]
    command += ["--steps", "optimizer for-loop", "channels-last off"]
    command += ["compile reduce-overhead (CUDA graphs)"]
    done = subprocess.run(
        [*command, "--out", str(out)], cwd=tmp_path, timeout=600, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "step: compile reduce-overhead (CUDA graphs): not measured with --eager" in done.stdout
    record = json.loads(out.read_text())
    found = {(r["input"], r["workers"], r["compiled"]): r for r in record["rates"]}
    paths = ["cpu", "gpu", "gpu-cuda"] + (["dali"] if dali_installed() else [])  # dev extra's
    parts = [
        f"gpu/{name}"
        for name in (
            "decode engines whole",  # nvImageCodec's CPU backend: the dev extra's
            "decode engines regions",
            "decode cuda decoder",
            "resize float32",
            "resize float16",
            "all (engines)",
            "all (cuda decoder)",
        )
    ]
    steps = ["step: optimizer for-loop", "step: channels-last off"]
    assert set(found) == (
        {("synthetic", 0, False)}
        | {(path, 1, False) for path in paths}
        | {(name, 0, False) for part in parts for name in (part, f"{part} + step")}
        | {(name, 0, False) for name in steps}
    )
    assert found[("synthetic", 0, False)]["ratio"] == 1.0
    for rate in found.values():
        assert 0 < rate["low"] <= rate["median"] <= rate["high"]
        assert rate["ratio"] == rate["median"] / found[("synthetic", 0, False)]["median"]
    on = record["measured_on"]
    assert on["device"] == "cpu" and on["cores"] >= 1 and on["hardware_jpeg"] is True
