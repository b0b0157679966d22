"""What this machine can run, checked before compute: CUDA and its driver, GPUs per node, a C
toolchain for torch.compile, free disk and /dev/shm. Each problem is one line naming the setting
or path; `MachineError` carries them.

The installed torch wheel is built for one CUDA version (torch.version.cuda); the NVIDIA driver
must support at least that major version (CUDA's minor-version compatibility covers a newer minor
version within it). Where the driver is older, install torch from the wheel index of a CUDA
version it supports (https://download.pytorch.org/whl/cu126 and the like; docs/scale-out.md).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import psutil

from kit.numerics import cpu_records, numerics
from kit.readout.numbers import counted

#: the loaders of a training run that keep workers (train, BN recalibration, evaluation)
PERSISTENT_LOADERS = 3
#: batches each loader worker keeps ready (the training loaders' prefetch_factor, kit.data.pipeline:
#: four rather than torch's two, so that a slow JPEG does not stall the step)
PREFETCH_FACTOR = 4


class MachineError(RuntimeError):
    """This machine cannot run what the settings ask; one line per problem."""


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA version the installed NVIDIA driver supports (libcuda's
    cuDriverGetVersion), None where there is no driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int()
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return version.value // 1000, version.value % 1000 // 10


def cuda_problems(ranks_per_node: int, where: str = "device") -> list[str]:
    """Why `ranks_per_node` processes of this node cannot each drive their own GPU: a CPU build
    of torch, no driver or one too old for the build, CUDA unusable, too few visible GPUs."""
    import torch

    built = torch.version.cuda
    if built is None:
        return [
            (
                f"{where}: cuda, but torch {torch.__version__} is a CPU build; install a CUDA "
                "wheel (docs/scale-out.md)"
            )
        ]
    driver = driver_cuda_version()
    if driver is None:
        return [f"{where}: cuda, but no NVIDIA driver was found (libcuda.so.1)"]
    major = int(built.split(".")[0])
    if driver[0] < major:
        return [
            (
                f"{where}: cuda, but the NVIDIA driver supports CUDA {driver[0]}.{driver[1]} "
                f"while torch {torch.__version__} is built for CUDA {built}; update the driver "
                "or install torch from an older CUDA's wheel index (docs/scale-out.md)"
            )
        ]
    if not torch.cuda.is_available():
        return [
            (
                f"{where}: cuda, but CUDA is not usable (torch.cuda.is_available() is False; "
                f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})"
            )
        ]
    count = torch.cuda.device_count()
    if count < ranks_per_node:
        return [
            (
                f"{where}: {ranks_per_node} processes on this node but "
                f"{counted(count, 'visible GPU')}; "
                "two processes on one GPU fail in NCCL (lower nproc_per_node or processes)"
            )
        ]
    return []


def compiler_problems(where: str = "compile") -> list[str]:
    """What torch.compile (inductor) needs at run time and is missing: a C compiler (CC, cc, gcc
    or clang) and the Python headers."""
    problems = []
    compilers = [os.environ.get("CC"), "cc", "gcc", "clang"]
    if not any(name and shutil.which(name) for name in compilers):
        problems.append(
            f"{where}: true needs a C compiler (cc, gcc or clang, or CC); none is on "
            "PATH (install one, or set compile: false)"
        )
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        problems.append(
            f"{where}: true needs the Python headers; {headers} is missing (install "
            "the python3-dev package of this Python, or set compile: false)"
        )
    return problems


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def disk_problems(folder: Path, needed: int, what: str) -> list[str]:
    """Whether the file system of `folder` (or its nearest existing ancestor) has `needed`
    bytes free for `what`."""
    free = shutil.disk_usage(_existing(Path(folder))).free
    if free < needed:
        return [f"{folder}: {what} needs about {byte_size(needed)} but {byte_size(free)} is free"]
    return []


def memory_bytes() -> int:
    """This machine's memory in bytes (what psutil reads of /proc/meminfo; a function of its
    own, so tests can shrink it)."""
    return int(psutil.virtual_memory().total)


def disk_free(folder: Path) -> int:
    """Free bytes on the file system of `folder` (or its nearest existing ancestor)."""
    return shutil.disk_usage(_existing(Path(folder))).free


def loader_shared_memory(
    ranks: int, workers: int, batch: int, image_size: int, held: int = 0
) -> int:
    """Bytes of /dev/shm a node's training loaders hold at once: each worker of each persistent
    loader keeps PREFETCH_FACTOR batches of uint8 images ready, and each rank's datasets held in
    memory (`held` bytes a rank: CIFAR's arrays, which its workers map instead of copying)."""
    batches = PERSISTENT_LOADERS * workers * PREFETCH_FACTOR * batch * 3 * image_size * image_size
    return ranks * (batches + (held if workers else 0))


def shm_problems(needed: int, shm: Path = Path("/dev/shm")) -> list[str]:
    """Whether /dev/shm (where loader workers hand batches over) holds `needed` bytes."""
    if not shm.is_dir():
        return [
            (
                f"{shm}: missing; loader workers hand batches over through it (num_workers: 0 "
                "avoids it)"
            )
        ]
    size = shutil.disk_usage(shm).total
    if size < needed:
        return [
            (
                f"{shm}: {byte_size(size)} but the loaders need about {byte_size(needed)} "
                "(docker: --shm-size; or lower num_workers)"
            )
        ]
    return []


#: decimal units a byte count is said in, largest first
BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def byte_size(count: float) -> str:
    """A byte count in the largest decimal unit it reaches (`3.4 MB`, `120 bytes`), so that a
    small size never reads as `0.0 GB`."""
    for unit, size in BYTE_UNITS:
        if abs(count) >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} bytes"


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity, as Slurm and cgroups restrict it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def describe() -> str:
    """This machine in a few words: CPU model and usable cores, the GPU when torch is loaded
    and sees one (torch is not imported here: the kit's lower layers stay torch-free), and the
    CPU numerics mode (kit.numerics.numerics)."""
    # the model name with its vendor, family and model: a virtual machine's name may say no more
    # than "AMD EPYC", which covers several generations
    model = cpu_records.describe(cpu_records.identity())
    text = f"{usable_cores()} cores of {model}"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        text += f", {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"{text}, CPU numerics {numerics.mode()}: {cpu_records.expected_elsewhere(short=True)}"


def wall_seconds() -> float:
    """Seconds since this process started (a notebook's kernel: the notebook's wall time)."""
    return time.time() - psutil.Process().create_time()
