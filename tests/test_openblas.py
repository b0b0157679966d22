"""The reproducible numerics' large products (kit.numerics.openblas): a private OpenBLAS on its
Haswell kernels, whatever the program imported first, the same bits on an emulated AMD EPYC."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from kit.files.paths import REPO_ROOT
from kit.numerics import cpu, numerics, openblas

HASWELL = platform.machine() in ("x86_64", "AMD64") and set(openblas.CORE_FLAGS) <= (
    cpu.cpu_flags() or set()
)

#: in a fresh process: numpy's OpenBLAS core, then (after `import kit` and one product of
#: the kit's) the kit's core and numpy's again, and whether OPENBLAS_CORETYPE is still what the
#: process started with (unset, or the user's)
CORES = """
import ctypes, os
import numpy, torch
def numpy_core():
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "openblas" in path and "numpy" in path:
            library = ctypes.CDLL(path)
            for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename"):
                if hasattr(library, name):
                    getattr(library, name).restype = ctypes.c_char_p
                    return getattr(library, name)().decode()
before, asked = numpy_core(), os.environ.get("OPENBLAS_CORETYPE")
import kit
from kit.numerics import openblas
print(before, openblas.core(), numpy_core(), os.environ.get("OPENBLAS_CORETYPE") == asked)
"""

#: OpenBLAS settings as a site or a user sets them for numpy: another core type than the kit's
USERS_OPENBLAS = {
    "OPENBLAS_CORETYPE": "Sandybridge",
    "OPENBLAS_L2_SIZE": "512",
    "OPENBLAS_NUM_THREADS": "2",
}


@pytest.mark.environment
@pytest.mark.skipif(not HASWELL, reason="the Haswell kernels need a CPU with AVX2 and FMA")
@pytest.mark.parametrize("users", [{}, USERS_OPENBLAS], ids=["clean", "users-openblas"])
def test_the_kit_runs_haswell_kernels_whatever_was_imported_first_and_leaves_numpys_alone(
    users: dict[str, str],
) -> None:
    """In an environment without the numerics variables (kit.numerics.numerics's list) numpy keeps
    its own core; with a user's OpenBLAS settings numpy runs the user's core. Either way the
    kit's copy runs Haswell's and the environment is left as it was."""
    done = subprocess.run(
        [sys.executable, "-c", CORES],
        env=numerics.without_variables() | {"PYTHONPATH": str(REPO_ROOT)} | users,
        capture_output=True,
        text=True,
        check=True,
    )
    numpy_before, kit_core, numpy_after, kept = done.stdout.split()
    assert kit_core == "Haswell"
    assert numpy_after == numpy_before and kept == "True"
    if users:
        assert numpy_before == users["OPENBLAS_CORETYPE"]


@pytest.mark.environment
def test_a_product_is_numpys_to_rounding_for_tensors_arrays_and_transposed_views() -> None:
    generator = np.random.default_rng(0)
    for dtype, tolerance in ((np.float32, 1e-4), (np.float64, 1e-12)):
        a = generator.standard_normal((300, 700)).astype(dtype)
        b = generator.standard_normal((300, 90)).astype(dtype)
        expected = a.astype(np.float64).T @ b.astype(np.float64)
        out = np.empty((700, 90), dtype)
        openblas.gemm(a.T, b, out)  # a transposed view: no copy
        assert np.abs(out - expected).max() <= tolerance * np.abs(expected).max()
        tensor_out = torch.empty(700, 90, dtype=torch.from_numpy(a).dtype)
        openblas.gemm(torch.from_numpy(a).t(), torch.from_numpy(b), tensor_out)
        assert np.array_equal(tensor_out.numpy(), out)


def test_operands_it_cannot_take_are_refused_naming_them() -> None:
    a, b = torch.ones(4, 3), torch.ones(3, 2)
    with pytest.raises(openblas.OpenBlasError, match=r"\[4, 3\] @ \[3, 2\] into \[4, 5\]"):
        openblas.gemm(a, b, torch.empty(4, 5))
    with pytest.raises(openblas.OpenBlasError, match="torch.float16"):
        openblas.gemm(a.half(), b.half(), torch.empty(4, 2).half())
    with pytest.raises(openblas.OpenBlasError, match="a matrix on meta"):
        openblas.gemm(a.to("meta"), b, torch.empty(4, 2))
    with pytest.raises(openblas.OpenBlasError, match="neither rows nor columns contiguous"):
        openblas.gemm(torch.ones(8, 6)[::2, ::2], b, torch.empty(4, 2))


#: products of the shapes the probes tile (float32 and float64, a transposed left operand as
#: in a weight's gradient), each as a hash of its bits; `import kit` is light (no torch)
BITS = """
import hashlib
import numpy as np
import kit
from kit.numerics import openblas
rng = np.random.default_rng(0)
for dtype in (np.float32, np.float64):
    for m, k, n in ((256, 2048, 100), (192, 512, 400)):
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        g = rng.standard_normal((m, n)).astype(dtype)
        out, grad = np.empty((m, n), dtype), np.empty((k, n), dtype)
        openblas.gemm(a, b, out)
        openblas.gemm(a.T, g, grad)
        print(hashlib.sha256(out.tobytes() + grad.tobytes()).hexdigest()[:16], openblas.core())
"""


@pytest.mark.skipif(not HASWELL, reason="the Haswell kernels need a CPU with AVX2 and FMA")
@pytest.mark.skipif(
    shutil.which("qemu-x86_64") is None, reason="qemu-x86_64 (Debian's qemu-user) is missing"
)
def test_the_products_have_the_same_bits_on_an_emulated_amd_epyc() -> None:
    """QEMU's EPYC-Milan (an AMD processor's CPUID: vendor, family, caches) runs the same
    library: the same kernels and block sizes, so the same bits as this machine."""
    env = numerics.without_variables() | {"PYTHONPATH": str(REPO_ROOT)}
    here = subprocess.run(
        [sys.executable, "-c", BITS], env=env, capture_output=True, text=True, check=True
    ).stdout
    emulated = subprocess.run(
        ["qemu-x86_64", "-cpu", "EPYC-Milan", sys.executable, "-c", BITS],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    assert here.count("Haswell") == 4
    assert emulated == here
