"""Scale-out that matches the work: each step's GPU slots match the processes it starts, Slurm
jobs ask for the cores and memory their loaders need (or whole nodes), and a job requeues itself
when its command left the preemption marker, whatever exit status srun or torchrun passed on."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import ENVIRONMENT_AT_START

from kit.experiments.timecat import jobs
from kit.launch import local, sbatch, slurm
from kit.launch.settings import (
    PROCESS_MEMORY_GB,
    WORKER_MEMORY_GB,
    LaunchSettings,
    sized_for_training,
)
from kit.probes.settings import FaithfulProbeSettings, FastProbeSettings
from kit.runtime import distributed
from kit.runtime.processes import PREEMPTED_MARKER

#: paper-8xh100's node, as its profile launches it (GPUs per node left to the kit)
NODE = LaunchSettings(backend="slurm", nproc_per_node=8)


def _timecat(probe_kind: str) -> SimpleNamespace:
    """What step_settings reads of TimecatSettings, as paper-8xh100 and paper-checkpoints set it."""
    probe = {
        "fast": FastProbeSettings(),
        "faithful": FaithfulProbeSettings(processes=5, workers=12, precision="bf16"),
    }[probe_kind]
    return SimpleNamespace(probe_kind=probe_kind, probe=probe, feature_workers=12, device="cuda")


@pytest.mark.environment
def test_the_faithful_probe_step_gets_a_gpu_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = jobs.step_settings("probe", NODE, _timecat("faithful"))
    assert (probe.nproc_per_node, probe.gpus_per_node, probe.gpus_per_worker) == (1, 5, 5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (slot,) = local.slots(probe.model_copy(update={"backend": "local"}))
    assert slot.gpus == ("0", "1", "2", "3", "4")
    # a scheduler that names its GPUs by UUID: the names are handed on as they are
    uuids = [f"GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd" for i in range(8)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(uuids))
    (slot,) = local.slots(probe.model_copy(update={"backend": "local"}))
    assert slot.environment()["CUDA_VISIBLE_DEVICES"] == ",".join(uuids[:5])
    # a probe of cached features: one process given the node's GPUs, its fits shared over them
    fast = jobs.step_settings("probe", NODE, _timecat("fast"))
    assert (fast.nproc_per_node, fast.gpus_per_node, fast.gpus_per_worker) == (1, 8, 8)
    assert fast.cpus_per_node == 12 + 1
    few = SimpleNamespace(**vars(_timecat("fast")) | {"probe": FastProbeSettings(devices=3)})
    assert jobs.step_settings("probe", NODE, few).gpus_per_worker == 3
    assert jobs.step_settings("extract", NODE, _timecat("fast")).nproc_per_node == 8


def test_exported_step_scripts_ask_for_gpus_cores_and_memory(tmp_path: Path) -> None:
    probe = sbatch.export_step(
        "probe", ["kit", "probe"], jobs.step_settings("probe", NODE, _timecat("faithful")), tmp_path
    ).read_text()
    memory = math.ceil(5 * (PROCESS_MEMORY_GB + WORKER_MEMORY_GB * 12))
    for line in (
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=5",
        "#SBATCH --cpus-per-task=65",
        f"#SBATCH --mem={memory}G",
    ):
        assert line in probe.splitlines()
    extract = (
        sbatch.export_step(
            "extract",
            ["kit", "extract"],
            jobs.step_settings("extract", NODE, _timecat("fast")),
            tmp_path,
        )
        .read_text()
        .splitlines()
    )
    assert "#SBATCH --cpus-per-task=13" in extract and "#SBATCH --gpus-per-node=8" in extract
    on_cpu = jobs.step_settings(
        "extract", NODE, SimpleNamespace(**vars(_timecat("fast")) | {"device": "cpu"})
    )
    assert on_cpu.gpus_per_node == 0


def test_training_scripts_size_cores_and_memory_from_the_loaders(tmp_path: Path) -> None:
    sized = sized_for_training([SimpleNamespace(num_workers=12, device="cuda")], NODE)
    memory = math.ceil(8 * (PROCESS_MEMORY_GB + WORKER_MEMORY_GB * 12 * 3))
    assert (sized.cpus_per_node, sized.mem_gb, sized.gpus_per_node) == (8 * 13, memory, 8)
    script = sbatch.sbatch_script([tmp_path / "a.yaml"], sized, tmp_path).splitlines()
    assert "#SBATCH --cpus-per-task=13" in script and f"#SBATCH --mem={memory}G" in script
    # srun is told too: from Slurm 22.05 it no longer takes the job's --cpus-per-task
    (srun,) = [line for line in script if line.startswith("srun ")]
    assert srun.startswith("srun --kill-on-bad-exit=1 --cpus-per-task=13 ")
    chosen = sized_for_training(
        [SimpleNamespace(num_workers=12, device="cuda")],
        NODE.model_copy(update={"cpus_per_node": 96, "mem_gb": 500}),
    )
    assert (chosen.cpus_per_node, chosen.mem_gb) == (96, 500)


def test_exclusive_asks_for_whole_nodes(tmp_path: Path) -> None:
    whole = sized_for_training(
        [SimpleNamespace(num_workers=12, device="cuda")],
        NODE.model_copy(update={"exclusive": True}),
    )
    script = sbatch.sbatch_script([tmp_path / "a.yaml"], whole, tmp_path).splitlines()
    assert "#SBATCH --exclusive" in script and "#SBATCH --mem=0" in script
    assert not [line for line in script if line.startswith("#SBATCH --mem=") and "G" in line]


def test_submitit_asks_for_the_nodes_cores_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submission file submitit writes, on any machine: submitit refuses to build one where
    no `srun` is on PATH, so a stand-in that is never run takes its place."""
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "srun").write_text("#!/bin/sh\nexit 1\n")
    (stand_in / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in}:{os.environ['PATH']}")
    sized = sized_for_training([SimpleNamespace(num_workers=12, device="cuda")], NODE)
    text = slurm.executor(sized, tmp_path)._make_submission_file_text("true", "0")
    assert "#SBATCH --cpus-per-task=104" in text and f"#SBATCH --mem={sized.mem_gb}GB" in text
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gpus-per-node=8" in text
    whole = slurm.executor(sized.model_copy(update={"exclusive": True}), tmp_path)
    text = whole._make_submission_file_text("true", "0")
    assert "#SBATCH --exclusive" in text and "#SBATCH --mem=0" in text


def _run_exported(tmp_path: Path, srun_body: str) -> tuple[int, str]:
    """Run an exported sbatch script with stand-ins for srun and scontrol that log their calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name, body in (("srun", srun_body), ("scontrol", "echo localhost")):
        (bin_dir / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {calls}\n{body}\n')
        (bin_dir / name).chmod(0o755)
    script = sbatch.export_step("train", ["kit", "probe"], NODE, tmp_path / "out")
    env = os.environ | {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node1",
    }
    code = subprocess.run(["bash", str(script)], env=env, check=False).returncode
    return code, calls.read_text()


def test_a_preempted_command_requeues_by_its_marker_though_srun_exits_1(tmp_path: Path) -> None:
    code, calls = _run_exported(tmp_path, f'touch "${PREEMPTED_MARKER}"; exit 1')
    assert code == 0 and "scontrol requeue 42" in calls


def test_a_failed_command_without_the_marker_is_not_requeued(tmp_path: Path) -> None:
    code, calls = _run_exported(tmp_path, "exit 1")
    assert code == 1 and "requeue" not in calls


@pytest.mark.environment
def test_a_suite_started_inside_an_allocation_runs_as_one_process() -> None:
    """The tests launch their own runs: a shell inside a Slurm job or a torchrun worker
    (tests/test_environment.py sets both) must leave this process and its trainers outside
    that job's ranks (tests/conftest.py clears the launchers' variables)."""
    environ = ENVIRONMENT_AT_START
    assert distributed.slurm_environment(environ) == {}
    assert distributed.ranks_on_node(environ) == 1
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK"} & set(environ)
