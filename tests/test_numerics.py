"""The reproducible CPU numerics (kit.numerics.numerics): the switch, what `import kit` sets, what
provenance and `kit check` say, and the same bits from a training step under other emulated
machines (instruction-set limits, thread settings, one core), where the fast mode differs."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from kit.files.paths import REPO_ROOT
from kit.numerics import numerics
from kit.runtime import provenance

X86 = platform.machine() in ("x86_64", "AMD64")

#: a few SGD steps of the kit's smallest network on fixed data, in a fresh process; prints the
#: weights' hash and the process's numerics record
STEP = """
import hashlib, json
import kit, torch
from kit import models
from kit.numerics import numerics
from kit.numerics.threads import numerics_threads
torch.manual_seed(0)
model = models.build("resnet10", 10, width=0.125, image_size=16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
generator = torch.Generator().manual_seed(1)
x = torch.randn(32, 3, 16, 16, generator=generator)
y = torch.randint(0, 10, (32,), generator=generator)
with numerics_threads():
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print(json.dumps({"hash": digest.hexdigest(), "numerics": numerics.in_effect()}))
"""


def step(env: dict[str, str], cores: str | None = None) -> dict:
    clean = numerics.without_variables()
    command = [sys.executable, "-c", STEP]
    if cores is not None:
        command = ["taskset", "-c", cores, *command]
    done = subprocess.run(
        command,
        env=clean | {"PYTHONPATH": str(REPO_ROOT)} | env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_switch_reads_two_modes_and_refuses_others() -> None:
    assert numerics.mode({}) == "reproducible"
    assert numerics.mode({numerics.SWITCH: "fast"}) == "fast"
    assert numerics.mode({numerics.SWITCH: "0"}) == "fast"
    assert numerics.mode({numerics.SWITCH: " Reproducible "}) == "reproducible"
    with pytest.raises(numerics.NumericsError, match="TIMECAT_CPU_NUMERICS='quick'"):
        numerics.mode({numerics.SWITCH: "quick"})


@pytest.mark.environment
@pytest.mark.skipif(not X86, reason="the caps are x86-64's")
def test_importing_the_kit_puts_the_caps_in_the_environment_and_fast_leaves_it_alone() -> None:
    names = "'MKL_CBWR', 'ATEN_CPU_CAPABILITY'"
    code = f"import os, kit; print(*(os.environ.get(k) for k in ({names})))"
    clean = numerics.without_variables()
    for extra, expected in (({}, "COMPATIBLE avx2"), ({numerics.SWITCH: "fast"}, "None None")):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=clean | {"PYTHONPATH": str(REPO_ROOT)} | extra,
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == expected


#: in a fresh process: the caps and a thread count after `import kit`, then a child's import
REPLACED = """
import os, subprocess, sys
import kit
print(*(os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_NUM_THREADS")))
subprocess.run([sys.executable, "-c", "import kit"], check=True)
"""


@pytest.mark.environment
@pytest.mark.skipif(not X86, reason="the caps are x86-64's")
def test_a_users_caps_are_replaced_for_the_kits_processes_said_once_and_kept_in_fast() -> None:
    """A user's ATEN_CPU_CAPABILITY and MKL_CBWR give way to the kit's, said once (the child
    inherits the kit's values and says nothing); a thread count stays the user's; the fast mode
    keeps all of them, silently."""
    users = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO", "MKL_NUM_THREADS": "3"}
    said = (
        "kit: the reproducible CPU numerics set ATEN_CPU_CAPABILITY=avx2 (yours: avx512), "
        "MKL_CBWR=COMPATIBLE (yours: AUTO) for the kit's processes"
    )
    for extra, expected, times in (
        ({}, "avx2 COMPATIBLE 3", 1),
        ({numerics.SWITCH: "fast"}, "avx512 AUTO 3", 0),
    ):
        done = subprocess.run(
            [sys.executable, "-c", REPLACED],
            env=numerics.without_variables() | {"PYTHONPATH": str(REPO_ROOT)} | users | extra,
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == expected
        assert done.stderr.count("kit: ") == done.stderr.count(said) == times, done.stderr


@pytest.mark.environment
def test_provenance_and_the_record_say_what_was_in_effect() -> None:
    record = provenance.record()["cpu_numerics"]
    assert record["mode"] == "reproducible"  # the tests run in it (conftest)
    assert record["cpu"] and record["cpu_isa"]
    if X86:
        assert record["reproducible"], record["not_in_effect"]
        assert record["aten_capability"] == "AVX2" and record["compute_threads"] == 1
        assert record["variables"]["MKL_CBWR"] == "COMPATIBLE"
    line = numerics.describe(record)
    assert line.startswith("CPU numerics: reproducible;") and record["cpu"] in line


@pytest.mark.environment
def test_a_part_missing_is_named() -> None:
    record = numerics.in_effect() | {
        "variables": {},
        "aten_capability": "AVX512",
        "large_products": "OpenBLAS 0.3.34 SkylakeX",
    }
    missing = numerics._not_in_effect(record)
    if X86:
        assert any("MKL_CBWR is unset" in m for m in missing)
        assert any("ATen runs its AVX512 kernels" in m for m in missing)
        assert any("large products run on OpenBLAS 0.3.34 SkylakeX" in m for m in missing)


@pytest.mark.environment
def test_what_kit_check_says_without_torch_is_what_the_process_finds_with_it() -> None:
    """`before_torch` (kit check's line) holds `in_effect`'s values for what it says, and names
    what is missing as `in_effect` does, less the parts only torch can tell."""
    before, record = numerics.before_torch(), numerics.in_effect()
    assert "aten_capability" not in before
    line = numerics.describe(before)
    assert "recorded by each process that computes" in line and "ATen AVX" not in line
    missing = before.pop("not_in_effect")
    assert before == {key: record[key] for key in before}
    assert set(missing) <= set(record["not_in_effect"])


def test_kit_check_prints_the_numerics() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit", "check", "01", "--profile", "ci"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "CPU numerics: reproducible;" in done.stdout


@pytest.mark.skipif(not X86, reason="the caps are x86-64's")
def test_a_training_step_gives_the_same_bits_on_emulated_machines_and_fast_mode_does_not() -> None:
    """The reproducible mode under an MKL limited to AVX2 with two threads asked for, and on one
    core: the same weights. The fast mode at ATen's AVX2 against its portable kernels: other
    weights, so the comparison can fail."""
    reference = step({})
    assert reference["numerics"]["reproducible"]
    assert (
        step({"MKL_ENABLE_INSTRUCTIONS": "AVX2", "OMP_NUM_THREADS": "2"})["hash"]
        == (reference["hash"])
    )
    assert step({}, cores="0")["hash"] == reference["hash"]
    fast = {numerics.SWITCH: "fast", "OMP_NUM_THREADS": "1"}
    assert (
        step(fast | {"ATEN_CPU_CAPABILITY": "avx2"})["hash"]
        != (step(fast | {"ATEN_CPU_CAPABILITY": "default"})["hash"])
    )


@pytest.mark.environment
def test_computations_hold_one_thread_on_the_cpu_and_leave_a_gpu_blocks_threads() -> None:
    import torch

    from kit.numerics.threads import numerics_threads

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with numerics_threads():
            assert torch.get_num_threads() == numerics.REPRODUCIBLE_THREADS
        with numerics_threads(on_cpu=False):
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
