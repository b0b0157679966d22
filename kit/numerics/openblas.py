"""The library that computes the reproducible CPU numerics' large products: a private OpenBLAS
running its Haswell kernels on one thread.

MKL's COMPATIBLE branch, the branch Intel documents as reproducible on other vendors'
processors, runs SSE2 code at about a quarter of the speed of the processor's own kernels, and
its AVX2 branch is replaced by its AUTO branch on a processor not made by Intel. OpenBLAS chooses
its kernels and its block sizes by core type, and `OPENBLAS_CORETYPE=Haswell` fixes that choice:
the same AVX2 and FMA instructions in the same order on every processor that has them, Intel's
and AMD's alike (docs/decisions.md gives the speed and the check under an emulated AMD EPYC).

The library is the `scipy-openblas32` package's, loaded here with its own copy of the settings
(the core type and one thread read when it loads), not the OpenBLAS numpy loads: numpy's keeps
its threads and kernels, and the order in which a program imports numpy, torch and the kit
changes nothing. The core type is forced only where the CPU has AVX2 and FMA; elsewhere OpenBLAS
picks its own kernels, and `kit.numerics.numerics` reports the mode as not in effect.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Any

from kit.numerics import cpu

#: the kernels every processor with CORE_FLAGS runs
CORE = "Haswell"
CORE_FLAGS = ("avx2", "fma")
#: the package that ships the library (its symbols carry the prefix `scipy_`)
PACKAGE = "scipy_openblas32"
#: CBLAS's constants: row-major storage, a matrix as stored or transposed
_ROW_MAJOR, _AS_IS, _TRANSPOSED = 101, 111, 112

_LOCK = threading.Lock()
_LIBRARY: list[ctypes.CDLL] = []


class OpenBlasError(RuntimeError):
    """The library is missing or cannot take these operands."""


def library() -> ctypes.CDLL:
    """The private OpenBLAS, loaded on first use with the core type forced (where the CPU has
    CORE_FLAGS) and one thread; the process's environment is left as it was."""
    with _LOCK:
        if not _LIBRARY:
            settings = {"OPENBLAS_NUM_THREADS": "1"}
            flags = cpu.cpu_flags()
            if flags is not None and set(CORE_FLAGS) <= flags:
                settings["OPENBLAS_CORETYPE"] = CORE
            before = {name: os.environ.get(name) for name in settings}
            os.environ.update(settings)
            try:
                loaded = ctypes.CDLL(str(_path()))
            finally:
                for name, value in before.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            loaded.scipy_openblas_get_config.restype = ctypes.c_char_p
            loaded.scipy_openblas_get_corename.restype = ctypes.c_char_p
            for name, real in (
                ("scipy_cblas_sgemm", ctypes.c_float),
                ("scipy_cblas_dgemm", ctypes.c_double),
            ):
                getattr(loaded, name).restype = None
                getattr(loaded, name).argtypes = [ctypes.c_int] * 6 + [
                    real,
                    ctypes.c_void_p,
                    ctypes.c_int,
                    ctypes.c_void_p,
                    ctypes.c_int,
                    real,
                    ctypes.c_void_p,
                    ctypes.c_int,
                ]
            _LIBRARY.append(loaded)
        return _LIBRARY[0]


def _path() -> Path:
    """The library file of PACKAGE, found without importing it (its import loads the library
    into the process's global namespace, with the settings of that moment)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise OpenBlasError(
            f"the reproducible CPU numerics compute large products with OpenBLAS from the package "
            f"{PACKAGE.replace('_', '-')}, which is not installed: install the kit as README says "
            "(its lock has it), or set TIMECAT_CPU_NUMERICS=fast"
        )
    pattern = "*.dll" if sys.platform == "win32" else "libscipy_openblas*"
    found = sorted((Path(spec.origin).parent / "lib").glob(pattern))
    if not found:
        raise OpenBlasError(f"{Path(spec.origin).parent / 'lib'}: no OpenBLAS library in it")
    return found[0]


def core() -> str:
    """The kernels the library runs (its core type, e.g. Haswell)."""
    name: bytes = library().scipy_openblas_get_corename()
    return name.decode().strip()


def describe() -> str:
    """The library's name and version, as it states them, and the kernels it runs: e.g.
    "OpenBLAS 0.3.34.481.3 Haswell"."""
    config: bytes = library().scipy_openblas_get_config()
    return " ".join([*config.decode().split()[:2], core()])


def _layout(matrix: Any) -> tuple[int, int, int, int, int]:
    """(address, rows, columns, leading dimension, CBLAS transposition) of a 2-d torch tensor
    or numpy array whose rows or columns are contiguous."""
    device = getattr(matrix, "device", "cpu")  # a torch device, or numpy's "cpu"
    if getattr(device, "type", device) != "cpu":
        raise OpenBlasError(f"a matrix on {device}: the library computes on the CPU")
    if hasattr(matrix, "data_ptr"):
        address, strides, dtype = matrix.data_ptr(), tuple(matrix.stride()), str(matrix.dtype)
    else:
        address, dtype = matrix.ctypes.data, str(matrix.dtype)
        strides = tuple(s // matrix.itemsize for s in matrix.strides)
    rows, columns = matrix.shape
    if strides[1] == 1 and strides[0] >= max(1, columns):
        return address, rows, columns, strides[0], _AS_IS
    if strides[0] == 1 and strides[1] >= max(1, rows):
        return address, rows, columns, strides[1], _TRANSPOSED
    raise OpenBlasError(
        f"a {dtype} matrix of strides {strides}: neither rows nor columns contiguous"
    )


def gemm(left: Any, right: Any, out: Any) -> None:
    """out = left @ right, for float32 or float64 matrices (torch tensors or numpy arrays, on the
    CPU) whose rows or columns are contiguous, `out`'s rows contiguous: one call of the library,
    on the calling thread (the interpreter is let go meanwhile)."""
    dtype = str(left.dtype).removeprefix("torch.")
    if {dtype, str(right.dtype).removeprefix("torch."), str(out.dtype).removeprefix("torch.")} != {
        dtype
    } or dtype not in ("float32", "float64"):
        raise OpenBlasError(f"operands of {left.dtype}, {right.dtype} into {out.dtype}")
    a, m, k, lda, trans_a = _layout(left)
    b, k_right, n, ldb, trans_b = _layout(right)
    c, m_out, n_out, ldc, trans_c = _layout(out)
    if (k_right, m_out, n_out) != (k, m, n) or trans_c != _AS_IS:
        raise OpenBlasError(f"[{m}, {k}] @ [{k_right}, {n}] into [{m_out}, {n_out}]")
    function = library().scipy_cblas_sgemm if dtype == "float32" else library().scipy_cblas_dgemm
    function(_ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc)
