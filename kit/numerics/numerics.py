"""CPU numerics whose order of operations is fixed by the code and the shapes, not by the core
count, the load or (as far as the records show) the machine.

Float addition is not associative, so a result depends on the order in which a library sums,
and the libraries torch calls choose that order by machine: oneDNN's convolutions by instruction
set and cache sizes, MKL's BLAS by instruction set (and, on a processor not made by Intel, it
ignores a requested Intel branch), ATen's kernels by the widest vectors the CPU offers, and every
threaded reduction by the number of threads. Seeded training amplifies a last-bit difference
into points of accuracy.

In the `reproducible` mode (the default) the kit takes, for its numerics, only paths whose
order of operations is fixed by the code and the shapes:
- MKL runs its COMPATIBLE branch (SSE2 without the approximate reciprocals, whose results
  differ between vendors), the one branch Intel documents as reproducible on processors of
  other vendors (`MKL_CBWR=COMPATIBLE`; its AVX2 branch is ignored on AMD processors);
- ATen's kernels and oneDNN's convolutions are held to AVX2 (`ATEN_CPU_CAPABILITY=avx2`,
  `ONEDNN_MAX_CPU_ISA=AVX2`), which every x86-64 processor of the last decade has, Intel's and
  AMD's alike, and whose instructions round exactly (no approximate reciprocals);
- the large products that the kit cuts into tiles (kit.numerics.blocked: the probes' products over
  many rows) run on a private OpenBLAS with its Haswell kernels forced (kit.numerics.openblas):
  the same AVX2 and FMA instructions in the same order on every processor that has them, at
  about four times the speed of MKL's COMPATIBLE branch;
- NNPACK is not used (it picks kernels by CPU);
- the optimizer's square roots are correctly rounded (kit.numerics.rounding): MKL's COMPATIBLE
  square root rests on an instruction whose result is the processor's own;
- every operation runs on one intra-op thread, so that no library splits a reduction by the
  core count or by what runs beside it; the probes' large products and gathers and
  extraction's batches are cut instead into blocks that the shapes fix, each one operation on
  one thread, spread over the process's threads (kit.numerics.blocked), so that a large fit or
  extraction uses every core and gives the same bits on one as on many; the rest of the kit's
  speed comes from running several processes or probes at once.

What that buys is measured, not assumed (docs/reproducibility.md): on one CPU model the same
bits under other instruction-set limits, thread settings, one core and a competing load
(benchmarks/cpu_spread.py); across CPU models, what each recorded model gave
(kit.numerics.cpu_records, docs/data/cpus/): the operations of a numerics fingerprint
(`python -m kit check --numerics`) and how far the ci profile's values and the main job's
claims moved. oneDNN documents identical results only on identical hardware, and a CPU without
AVX2 or of another architecture (ARM) runs other kernels.

The environment part must be in place before torch loads; `import kit` sets it (so `kit run`,
its papermill kernels, `kit lab`'s kernels and every worker or Slurm job started from them
inherit it), and `apply()` sets the in-process part where the kit computes. Setting
`TIMECAT_CPU_NUMERICS=fast` turns all of it off: torch then uses the fastest paths this CPU
offers, and results may differ in the last bits from another run's, which training turns
into points. What was in effect is recorded in every output folder's provenance (`in_effect`).
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from kit.files.paths import REPO_ROOT
from kit.numerics import cpu

#: the switch: `reproducible` (the default) or `fast`
SWITCH = "TIMECAT_CPU_NUMERICS"
REPRODUCIBLE, FAST = MODES = ("reproducible", "fast")
#: read by ATen (its kernels' dispatch) and MKL (its branch) when they first run
REPRODUCIBLE_ENVIRONMENT = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "COMPATIBLE",
}
#: intra-op threads of a computation in the reproducible mode, and of a small one in either
REPRODUCIBLE_THREADS = 1
#: which definition of the reproducible mode a record was made under: 2 adds correctly rounded
#: square roots (kit.numerics.rounding); 3 runs every product on OpenBLAS's Haswell kernels, the
#: small ones too (kit.numerics.blocked.PRODUCT_WORK), and folds each batch norm into its
#: convolution for extraction (kit.models.fold_batch_norms); a record without one was made
#: under 1. Bits are compared only between records of the same version
#: (kit.numerics.cpu_records)
VERSION = 3
#: each earlier version in words, as the kit's sentences about other machines name it
EARLIER = {
    1: "before square roots were correctly rounded",
    2: "before small products ran on OpenBLAS and extraction folded batch norms",
}
#: variables that change which code paths, block sizes or threads the CPU libraries take
#: (torch's, numpy's OpenBLAS, the kit's own OpenBLAS), as users' shells and sites set them:
#: recorded in provenance where set, and the one list a child whose numerics a test or a
#: benchmark sets itself starts without (`without_variables`). The kit's processes take
#: REPRODUCIBLE_ENVIRONMENT's values whatever the user's (`prepare_environment`), and the kit's
#: OpenBLAS its core type and one thread (kit.numerics.openblas)
NUMERICS_VARIABLES = (
    SWITCH,
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "KMP_AFFINITY",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_DEFAULT_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_BLOCK_FACTOR",
)
#: what the mode rests on beyond what one machine can check, recorded with every output
LIMITS = (
    "MKL's COMPATIBLE branch is documented by Intel as reproducible on other vendors' "
    "processors; OpenBLAS's Haswell kernels (the large products) and ATen's and oneDNN's AVX2 "
    "kernels are the same code on every AVX2 processor, "
    "but oneDNN documents identical results only on identical hardware, and recorded CPU "
    "models did differ (docs/reproducibility.md); a CPU without AVX2 or of another "
    "architecture runs other kernels"
)
#: benchmarks/cpu_spread.py's latest output: how far results moved across emulated machines
SPREAD_RECORD = REPO_ROOT / "docs" / "data" / "cpu_spread.json"


class NumericsError(ValueError):
    """The switch holds a value the kit does not know."""


def mode(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """The numerics mode asked for by the switch (`reproducible` when unset)."""
    value = (environ if environ is not None else os.environ).get(SWITCH, "").strip().lower()
    if value in ("", "1", "true", "on"):
        return REPRODUCIBLE
    if value in ("0", "false", "off"):
        return FAST
    if value not in MODES:
        raise NumericsError(
            f"{SWITCH}={value!r}: expected one of {', '.join(MODES)} (docs/reproducibility.md)"
        )
    return value


def without_variables() -> dict[str, str]:
    """This process's environment without NUMERICS_VARIABLES: for a child whose numerics a
    benchmark or test sets itself."""
    return {k: v for k, v in os.environ.items() if k not in NUMERICS_VARIABLES}


def reproducible() -> bool:
    return mode() == "reproducible"


def environment() -> dict[str, str]:
    """The variables a process needs before torch loads, for this mode (none in `fast`, and
    none off x86-64, where ATen and MKL take no instruction-set branch the kit could fix)."""
    if mode() != "reproducible" or platform.machine() not in ("x86_64", "AMD64"):
        return {}
    return dict(REPRODUCIBLE_ENVIRONMENT)


def prepare_environment() -> None:
    """Put `environment()` into this process's environment (children inherit it). Called by
    `import kit`, before anything of the kit loads torch. A value of the user's that differs is
    replaced, and said once on stderr (the children inherit the kit's, so they say nothing)."""
    wanted = environment()
    replaced = {
        name: os.environ[name]
        for name, value in wanted.items()
        if os.environ.get(name, value) != value
    }
    os.environ.update(wanted)
    if replaced:
        print(
            "kit: the reproducible CPU numerics set "
            + ", ".join(
                f"{name}={wanted[name]} (yours: {value})" for name, value in replaced.items()
            )
            + f" for the kit's processes; {SWITCH}=fast keeps yours (docs/reproducibility.md)",
            file=sys.stderr,
            flush=True,
        )


def apply() -> None:
    """The in-process part, where the kit computes: in the reproducible mode, no NNPACK (the
    thread count is set around each computation, kit.numerics.threads, so that the
    process keeps its own setting). Idempotent; nothing in `fast` mode."""
    if mode() != "reproducible":
        return
    import torch

    torch.backends.nnpack.set_flags(False)


def _settings() -> dict[str, Any]:
    """The parts of `in_effect` read without torch: the mode, the CPU and the variables."""
    return {
        "mode": mode(),
        "version": VERSION,
        "cpu": cpu.cpu_model(),
        "machine": platform.machine(),
        "cpu_isa": cpu.best_isa(),
        "variables": {name: os.environ[name] for name in NUMERICS_VARIABLES if name in os.environ},
    }


def before_torch() -> dict[str, Any]:
    """What `in_effect` says that a process knows before it imports torch (the mode, the CPU,
    the variables its children inherit, the library of the large products and the threads of
    a computation), with what of the mode is missing among those: for `kit check`, whose
    process computes nothing, so that it spends no seconds importing torch. The kernels ATen
    dispatches to and oneDNN's and NNPACK's use are torch's own; each process that computes
    records them (`in_effect`, in its output's provenance)."""
    record = _settings()
    if mode() == "reproducible":
        record |= {"large_products": _large_products(), "compute_threads": REPRODUCIBLE_THREADS}
    record["not_in_effect"] = _not_in_effect(record) if mode() == "reproducible" else []
    return record


def in_effect() -> dict[str, Any]:
    """What decides the CPU numerics of this process's computations: the mode, the CPU, the
    relevant variables, the kernels ATen dispatches to, oneDNN's and NNPACK's use and the
    intra-op threads of a computation. `reproducible` is true only where every part of the mode
    is in effect (`not_in_effect` says what is missing)."""
    record = _settings()
    import torch

    apply()
    record |= {
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        "onednn": bool(torch.backends.mkldnn.enabled),
        "nnpack": bool(torch._C._get_nnpack_enabled()),
        "large_products": _large_products() if mode() == "reproducible" else "torch's products",
        "compute_threads": (
            REPRODUCIBLE_THREADS if mode() == "reproducible" else torch.get_num_threads()
        ),
    }
    record["not_in_effect"] = _not_in_effect(record) if mode() == "reproducible" else []
    record["reproducible"] = mode() == "reproducible" and not record["not_in_effect"]
    record["limits"] = LIMITS
    return record


def _large_products() -> str:
    """What computes the large products cut into blocks (kit.numerics.blocked): the library with
    its kernels, or why it cannot."""
    from kit.numerics import openblas

    try:
        return openblas.describe()
    except (OSError, openblas.OpenBlasError) as error:
        return f"no library ({error})"


def _not_in_effect(record: dict[str, Any]) -> list[str]:
    """The parts of the reproducible mode this process lacks, each in a few words."""
    if record["machine"] not in ("x86_64", "AMD64"):
        return [
            f"a {record['machine']} CPU: the caps are x86-64's, and its kernels differ from an "
            "x86-64 machine's"
        ]
    missing = [
        f"{name} is {record['variables'].get(name, 'unset')}, not {value}"
        for name, value in environment().items()
        if record["variables"].get(name) != value
    ]
    if environment() and record.get("aten_capability", "AVX2") != "AVX2":
        missing.append(
            f"ATen runs its {record['aten_capability']} kernels (the CPU lacks AVX2, or torch "
            "ran an operation before the kit set the environment)"
        )
    if environment() and not str(record.get("large_products", "")).endswith(" Haswell"):
        missing.append(
            f"large products run on {record.get('large_products')}, not OpenBLAS's Haswell "
            "kernels (kit.numerics.openblas: the CPU lacks AVX2 or FMA, or the library is missing)"
        )
    if record.get("nnpack"):
        missing.append("NNPACK is on")
    return missing


def describe(record: dict[str, Any] | None = None) -> str:
    """`in_effect()` in one line, as the run summaries print it; a record of `before_torch()`
    (`kit check`'s) says the kernels are recorded by each process that computes."""
    record = record or in_effect()
    parts = [f"CPU numerics: {record['mode']}", f"{record['cpu']} ({record['cpu_isa']})"]
    threads = record.get("compute_threads")
    counted = (
        "torch's intra-op threads"
        if threads is None
        else f"{threads} intra-op {'thread' if threads == 1 else 'threads'}"
    )
    kernels = (
        f"ATen {record['aten_capability']}, oneDNN {'on' if record['onednn'] else 'off'}"
        if "aten_capability" in record
        else "ATen's and oneDNN's kernels recorded by each process that computes"
    )
    parts.append(f"{kernels}, {counted} a computation")
    if record.get("large_products"):
        parts.append(f"large products on {record['large_products']}")
    caps = ", ".join(f"{k}={v}" for k, v in record["variables"].items() if k != SWITCH)
    parts.append(caps or "no caps")
    if record["not_in_effect"]:
        parts.append("not in effect: " + "; ".join(record["not_in_effect"]))
    return "; ".join(parts)
