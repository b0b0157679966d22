"""This process's place in a distributed job: rank, world size, device; Slurm and torchrun alike."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from kit.runtime import machine
from kit.runtime.processes import DEFAULT_GROUP_TIMEOUT_S, rendezvous_port


@dataclass(frozen=True)
class Process:
    """This process's place in the run: rank, world size and device."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list such as `gpu[003-006,9],cpu1` (gpu003)."""
    depth, end = 0, len(nodelist)
    for index, character in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(character, 0)
        if character == "," and depth == 0:
            end = index
            break
    first = nodelist[:end]
    if "[" not in first:
        return first
    prefix, rest = first.split("[", 1)
    ranges, suffix = rest.split("]", 1)
    return prefix + ranges.split(",")[0].split("-")[0] + suffix


def slurm_environment(environ: dict[str, str]) -> dict[str, str]:
    """torchrun's variables for a process started by `srun` with several tasks (none when
    torchrun's are set or the step has one task): Slurm's rank, task count and local id; the
    first node as the rendezvous host and a port derived from the job id, the same on every
    node and different for concurrent jobs."""
    tasks = int(environ.get("SLURM_STEP_NUM_TASKS", environ.get("SLURM_NTASKS", "1")))
    if "WORLD_SIZE" in environ or "SLURM_PROCID" not in environ or tasks < 2:
        return {}
    nodelist = (
        environ.get("SLURM_STEP_NODELIST")
        or environ.get("SLURM_JOB_NODELIST")
        or environ.get("SLURM_NODELIST", "localhost")
    )
    port = rendezvous_port(int(environ.get("SLURM_JOB_ID", "0")))
    return {
        "RANK": environ["SLURM_PROCID"],
        "WORLD_SIZE": str(tasks),
        "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"),
        "MASTER_ADDR": environ.get("MASTER_ADDR") or first_host(nodelist),
        "MASTER_PORT": environ.get("MASTER_PORT") or str(port),
    }


def ranks_on_node(environ: dict[str, str]) -> int:
    """How many processes of the job run on this node and share its visible GPUs: torchrun's
    LOCAL_WORLD_SIZE, else Slurm's tasks on this node, else 1."""
    for key in ("LOCAL_WORLD_SIZE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"):
        value = environ.get(key, "").split("(")[0].split(",")[0]
        if value.isdigit():
            return int(value)
    return 1


def start_process(device: str, timeout_s: int = DEFAULT_GROUP_TIMEOUT_S) -> Process:
    """Join the process group when launched with several ranks, by torchrun or by srun; with
    device cuda, first check that CUDA is usable and that each rank of this node has its own
    GPU (MachineError naming the problem otherwise)."""
    os.environ.update(slurm_environment(dict(os.environ)))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        local_ranks = ranks_on_node(dict(os.environ))
        bound = "SLURM_PROCID" in os.environ and "LOCAL_WORLD_SIZE" not in os.environ
        problems = machine.cuda_problems(1 if bound else local_ranks)
        if problems:
            raise machine.MachineError("\n".join(problems))
        if bound:  # srun may bind one GPU per task: the local rank counts visible devices
            count = torch.cuda.device_count()
            if 1 < count < local_ranks:
                raise machine.MachineError(
                    f"device: {local_ranks} Slurm tasks on this node see {count} GPUs each; "
                    "request one GPU per task or at least as many GPUs as tasks"
                )
            local_rank %= count
        torch.cuda.set_device(local_rank)
    chosen = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if world_size > 1:
        dist.init_process_group(
            "nccl" if use_cuda else "gloo",
            device_id=chosen if use_cuda else None,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return Process(rank, world_size, chosen)


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size (0 and 1 outside a process group)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    """Wait for every rank (nothing outside a process group)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum over processes, in place (the tensor itself with one process)."""
    if rank_and_world()[1] > 1:
        dist.all_reduce(tensor)
    return tensor
