"""Where the feature probes compute: the devices a probe spreads its work over, how the work is
shared among them, and the float32 matmul precision (TF32) on CUDA.

Every choice here is a pure function of the settings and of the number of visible GPUs, so the
tests exercise them on the CPU with made-up device counts.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from kit.probes.rows import ProbeError
from kit.readout.numbers import counted


def probe_devices(device: str, devices: int | None, visible: int) -> list[torch.device]:
    """The devices of a probe whose settings say `device` and `devices`, with `visible` GPUs.

    `cuda` without an index means the first `devices` GPUs, all visible ones when `devices` is
    None; an indexed device (`cuda:3`) is that one alone. On the CPU, `devices` > 1 makes as many
    groups on the CPU: no faster, but the same code path as several GPUs."""
    place = torch.device(device)
    if place.type == "cuda" and place.index is None:
        wanted = visible if devices is None else devices
        if wanted < 1 or wanted > visible:
            raise ProbeError(
                f"devices: {counted(wanted, 'GPU')} asked for, {visible} visible "
                "(CUDA_VISIBLE_DEVICES); set devices to at most that, or leave it "
                "unset for all"
            )
        return [torch.device("cuda", index) for index in range(wanted)]
    if place.type != "cpu" and devices not in (None, 1):
        raise ProbeError(
            f"devices: {devices} needs device 'cuda' without an index (or 'cpu'), "
            f"got device '{device}'"
        )
    return [place] * (devices or 1)


def fit_devices(settings: Any, visible: int) -> list[torch.device]:
    """The GPUs a probe's (task, representation) fits are shared over, one fit on each at a time
    (kit.probes.parallel): every GPU `probe_devices` gives for settings whose `device` is cuda
    without an index, when there are several; else none, and each fit spreads its own heads or
    weight decays over its devices as before. Settings without a device (an image probe's) get
    none."""
    device, count = getattr(settings, "device", None), getattr(settings, "devices", None)
    if visible < 2 or not isinstance(device, str) or torch.device(device).type != "cuda":
        return []
    places = probe_devices(device, count, visible)
    return places if len(places) > 1 else []


def visible_gpus() -> int:
    """GPUs this process can use (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def shares(count: int, slots: int) -> list[range]:
    """`count` items (heads, weight decays) as contiguous near-equal ranges over at most `slots`
    devices, the first ones one larger; never an empty range."""
    used = max(1, min(count, slots))
    size, extra = divmod(count, used)
    bounds = [0]
    for slot in range(used):
        bounds.append(bounds[-1] + size + (slot < extra))
    return [range(start, stop) for start, stop in itertools.pairwise(bounds)]


def matmul_precision(devices: Sequence[torch.device], tf32: bool) -> str:
    """torch's float32 matmul precision for a probe: 'high' (TF32 tensor cores) on CUDA when
    `tf32` allows it, else 'highest' (true float32)."""
    return "high" if tf32 and any(d.type == "cuda" for d in devices) else "highest"


@contextlib.contextmanager
def precision(devices: Sequence[torch.device], tf32: bool) -> Iterator[None]:
    """float32 products at `matmul_precision` for the block, the previous precision after."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(matmul_precision(devices, tf32))
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
