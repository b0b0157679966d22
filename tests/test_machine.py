"""Fail fast, in words: CUDA, the driver, GPUs per node, the compiler, disk and /dev/shm are
checked before compute, each problem one line naming the setting or path (torch.cuda is
monkeypatched: these tests run without a GPU)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from kit.data import kinds
from kit.data.settings import DataSettings
from kit.runtime import distributed, machine, processes


def _gpus(
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    driver: tuple[int, int] | None = (13, 0),
    built: str | None = "13.0",
) -> None:
    monkeypatch.setattr(torch.version, "cuda", built)
    monkeypatch.setattr(machine, "driver_cuda_version", lambda: driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda _device: None)


@pytest.mark.environment
def test_cuda_without_a_gpu_is_a_sentence_not_a_zero_division(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _gpus(monkeypatch, 0)
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(machine.MachineError, match=r"device: cuda, but CUDA is not usable"):
        distributed.start_process("cuda")


@pytest.mark.parametrize(
    ("driver", "built", "words"),
    [
        (None, "13.0", "no NVIDIA driver"),
        ((12, 4), "13.0", "supports CUDA 12.4 while torch .* is built for CUDA 13.0"),
        ((13, 0), None, "CPU build"),
    ],
)
def test_driver_and_build_are_checked(
    monkeypatch: pytest.MonkeyPatch, driver: tuple | None, built: str | None, words: str
) -> None:
    _gpus(monkeypatch, 8, driver, built)
    assert len(problems := machine.cuda_problems(1)) == 1
    assert re.search(words, problems[0])


def test_a_newer_driver_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 8, (13, 1), "13.0")
    assert machine.cuda_problems(8) == []


def test_more_torchrun_ranks_than_gpus_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "5")
    with pytest.raises(machine.MachineError, match=r"8 processes on this node but 4 visible"):
        distributed.start_process("cuda")


def test_srun_tasks_bound_to_one_gpu_each_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 1)
    for key in ("LOCAL_WORLD_SIZE", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "8")
    monkeypatch.setattr(distributed, "slurm_environment", lambda _environ: {"LOCAL_RANK": "3"})
    assert distributed.start_process("cuda").device == torch.device("cuda", 0)


def test_srun_tasks_sharing_too_few_gpus_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpus(monkeypatch, 2)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "8")
    monkeypatch.setattr(distributed, "slurm_environment", lambda _environ: {})
    with pytest.raises(machine.MachineError, match=r"8 Slurm tasks on this node see 2 GPUs"):
        distributed.start_process("cuda")


def test_ranks_on_node_reads_torchrun_then_slurm() -> None:
    assert distributed.ranks_on_node({"LOCAL_WORLD_SIZE": "4", "SLURM_NTASKS_PER_NODE": "8"}) == 4
    assert distributed.ranks_on_node({"SLURM_STEP_TASKS_PER_NODE": "8(x2)"}) == 8
    assert distributed.ranks_on_node({}) == 1


def test_missing_compiler_and_headers_are_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(machine.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    problems = machine.compiler_problems()
    assert len(problems) == 2
    assert "C compiler" in problems[0] and str(tmp_path / "Python.h") in problems[1]


def test_disk_and_shm_compare_with_the_need(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    assert machine.disk_problems(tmp_path / "not" / "yet", free // 2, "cache") == []
    assert str(tmp_path / "x") in machine.disk_problems(tmp_path / "x", free * 2, "cache")[0]
    assert machine.shm_problems(1, tmp_path) == []
    assert "docker: --shm-size" in machine.shm_problems(10**18, tmp_path)[0]
    assert "missing" in machine.shm_problems(1, tmp_path / "absent")[0]


def test_loader_shared_memory_by_hand() -> None:
    # 8 ranks x 3 loaders x 12 workers x 4 batches x 128 images x 3 x 224 x 224 bytes
    assert machine.loader_shared_memory(8, 12, 128, 224) == 8 * 3 * 12 * 4 * 128 * 150528
    # and each rank's CIFAR arrays, held in shared memory for its workers (none without workers)
    held = kinds.get("cifar100").held_bytes(DataSettings(kind="cifar100", root="x", image_size=32))
    assert held == 60_000 * (3 * 32 * 32 + 8)
    assert machine.loader_shared_memory(8, 12, 128, 32, held) == 8 * (
        3 * 12 * 4 * 128 * 3072 + held
    )
    assert machine.loader_shared_memory(8, 0, 128, 32, held) == 0


def test_preempted_marker_is_written_where_the_launcher_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    processes.mark_preempted()  # unset: nothing
    marker = tmp_path / "job.preempted"
    monkeypatch.setenv(processes.PREEMPTED_MARKER, str(marker))
    processes.mark_preempted()
    assert marker.exists()
