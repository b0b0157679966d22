"""This CPU as Linux's /proc/cpuinfo gives it: its model name, its instruction-set flags and the
widest extension among them, read here alone.

The reproducible numerics record them (kit.numerics.numerics: `in_effect`), the private OpenBLAS
forces its Haswell kernels where the flags hold AVX2 and FMA (kit.numerics.openblas), and the CPU
records name a machine by them (kit.numerics.cpu_records). A leaf: it imports nothing of the kit.
"""

from __future__ import annotations

import platform
from pathlib import Path

#: the instruction-set extensions that decide which kernels a library may pick, widest first
ISA_FLAGS = ("amx_tile", "avx512f", "avx2", "avx", "sse4_2")


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def cpu_flags() -> set[str] | None:
    """The CPU's instruction-set flags (Linux's /proc/cpuinfo), or None where it cannot say."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return None
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def best_isa() -> str:
    """The widest instruction-set extension of ISA_FLAGS this CPU has (Linux), else unknown."""
    flags = cpu_flags()
    if flags is None:
        return "unknown"
    return next((flag for flag in ISA_FLAGS if flag in flags), "baseline")
