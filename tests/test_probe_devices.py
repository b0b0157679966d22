"""Probes spread over several devices: the choice of devices, the sharing of heads and fits, and
TF32, checked on the CPU with made-up GPU counts, groups of heads on the CPU, and fits shared over
stand-in devices (a recording probe on made-up GPUs, or the CPU standing in for each GPU)."""

from __future__ import annotations

import threading

import polars as pl
import pytest
import torch

from kit.probes.base import shared_gpus
from kit.probes.devices import (
    fit_devices,
    matmul_precision,
    precision,
    probe_devices,
    shares,
)
from kit.probes.fast import FastProbe, fast_probe
from kit.probes.lbfgs import lbfgs_probe
from kit.probes.parallel import fit_many
from kit.probes.rows import ProbeError, Split
from kit.probes.settings import FastProbeSettings, LbfgsProbeSettings


def planted(n: int, seed: int) -> Split:
    generator = torch.Generator().manual_seed(seed)
    means = torch.randn(4, 12, generator=torch.Generator().manual_seed(7))
    labels = torch.randint(0, 4, (n,), generator=generator)
    return Split(means[labels] + torch.randn(n, 12, generator=generator), labels, "s")


@pytest.mark.parametrize(
    ("device", "devices", "visible", "expected"),
    [
        ("cuda", None, 8, [f"cuda:{i}" for i in range(8)]),
        ("cuda", 2, 8, ["cuda:0", "cuda:1"]),
        ("cuda:3", None, 8, ["cuda:3"]),
        ("cpu", None, 0, ["cpu"]),
        ("cpu", 3, 0, ["cpu", "cpu", "cpu"]),
    ],
)
def test_probe_devices_follow_the_settings_and_the_visible_gpus(
    device: str, devices: int | None, visible: int, expected: list[str]
) -> None:
    assert [str(d) for d in probe_devices(device, devices, visible)] == expected


@pytest.mark.parametrize(
    ("device", "devices", "visible"), [("cuda", 4, 2), ("cuda", None, 0), ("cuda:1", 2, 8)]
)
def test_impossible_device_counts_are_refused_naming_the_setting(
    device: str, devices: int | None, visible: int
) -> None:
    with pytest.raises(ProbeError, match="devices"):
        probe_devices(device, devices, visible)


@pytest.mark.parametrize(("count", "slots"), [(6, 8), (6, 4), (12, 8), (1, 3), (7, 1)])
def test_shares_cover_every_item_once_nearly_evenly(count: int, slots: int) -> None:
    parts = shares(count, slots)
    assert [i for part in parts for i in part] == list(range(count))
    assert len(parts) == min(count, slots)
    sizes = [len(part) for part in parts]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_tf32_only_on_cuda_and_only_when_allowed() -> None:
    gpus, cpu = [torch.device("cuda", 0)], [torch.device("cpu")]
    assert matmul_precision(gpus, True) == "high"
    assert matmul_precision(gpus, False) == "highest"
    assert matmul_precision(cpu, True) == "highest"
    before = torch.get_float32_matmul_precision()
    with precision(gpus, True):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before


@pytest.mark.parametrize("select_from", ["epochs", "converged"])
def test_fast_probe_split_over_groups_gives_the_one_group_result(select_from: str) -> None:
    train, evaluation = planted(1200, 0), planted(400, 1)
    settings = {
        "lrs": [0.03, 0.1, 0.3],
        "weight_decays": [1e-4, 1e-3],
        "epochs": 3,
        "batch_size": 128,
        "select_from": select_from,
    }
    one = fast_probe(train, evaluation, 4, FastProbeSettings(**settings), progress=False)
    three = fast_probe(
        train, evaluation, 4, FastProbeSettings(**settings, devices=3), progress=False
    )
    # the same heads in the same order; float32 products of narrower weights round differently
    # in the last bits, so the objective agrees to float32 precision and accuracies exactly
    assert three.history.drop("train_loss").equals(one.history.drop("train_loss"))
    assert three.history["train_loss"].to_list() == pytest.approx(
        one.history["train_loss"].to_list(), rel=1e-5
    )
    assert three.selected.equals(one.selected)


def test_lbfgs_fits_shared_over_threads_give_the_sequential_result() -> None:
    """Over several devices each weight decay is fitted from zero in its device's thread: the
    fits are those of each decay fitted alone (from zero) on one device. (On one device the
    decays form a warm-started path, which agrees within L-BFGS's tolerance: test_probe.)"""
    train, evaluation = planted(600, 2), planted(200, 3)
    decays = [1e-4, 1e-3, 1e-2]
    alone = [
        lbfgs_probe(train, evaluation, 4, LbfgsProbeSettings(weight_decays=[decay]))
        for decay in decays
    ]
    two = lbfgs_probe(train, evaluation, 4, LbfgsProbeSettings(weight_decays=decays, devices=2))
    assert two.history["weight_decay"].to_list() == decays
    assert pl.Series(two.history["train_loss"]).to_list() == pytest.approx(
        [fit.history["train_loss"].item() for fit in alone], rel=1e-12
    )


@pytest.mark.parametrize(
    ("device", "devices", "visible", "expected"),
    [
        ("cuda", None, 8, [f"cuda:{i}" for i in range(8)]),
        ("cuda", 3, 8, ["cuda:0", "cuda:1", "cuda:2"]),
        ("cuda", None, 1, []),  # one GPU: its heads as before
        ("cuda:2", None, 8, []),  # a chosen GPU: that one alone
        ("cpu", 3, 0, []),
    ],
)
def test_fits_are_shared_over_the_gpus_the_settings_ask_for(
    device: str, devices: int | None, visible: int, expected: list[str]
) -> None:
    settings = FastProbeSettings(device=device, devices=devices)
    assert [str(d) for d in fit_devices(settings, visible)] == expected
    assert shared_gpus(settings, 8) == (devices or 8)


class RecordingProbe(FastProbe):
    """A stand-in probe whose fit records its settings' device and waits until `together` fits
    run at once (a barrier), returning its task's name as the result."""

    def __init__(self, together: int) -> None:
        self.devices: list[tuple[str, int | None]] = []
        self.barrier = threading.Barrier(together, timeout=30)
        self.lock = threading.Lock()

    def fit(self, train, evaluation, num_classes, settings, progress=True, extra=None):  # type: ignore[no-untyped-def]
        with self.lock:
            self.devices.append((settings.device, settings.devices))
        self.barrier.wait()
        return train.name


def test_the_fits_run_at_once_one_on_each_gpu_in_order() -> None:
    """Eight fits over four stand-in GPUs (no CUDA is touched): four at once, each on its own GPU
    with `devices` unset, the results in the jobs' order."""
    gpus = [torch.device("cuda", index) for index in range(4)]
    probe = RecordingProbe(together=4)
    jobs = [
        (Split(torch.zeros(2, 3), torch.zeros(2), f"fit{i}"), planted(4, 0), {}) for i in range(8)
    ]
    found = list(fit_many(probe, jobs, 4, FastProbeSettings(device="cuda"), devices=gpus))
    assert found == [f"fit{i}" for i in range(8)]
    # each round of four ran together (the barrier), one fit on each GPU
    assert (
        sorted(probe.devices[:4])
        == sorted(probe.devices[4:])
        == [(f"cuda:{i}", None) for i in range(4)]
    )


def test_fast_probes_shared_over_stand_in_devices_give_the_one_by_one_results() -> None:
    """The fits of three representations shared over three CPU stand-ins for GPUs: each fit is
    the one it is alone on one device, bit for bit."""
    jobs = [(planted(300, seed), planted(100, seed + 10), {}) for seed in range(3)]
    settings = FastProbeSettings(lrs=[0.1], weight_decays=[1e-4, 1e-3], epochs=2, batch_size=64)
    alone = list(fit_many(FastProbe(), jobs, 4, settings))
    shared = list(fit_many(FastProbe(), jobs, 4, settings, devices=[torch.device("cpu")] * 3))
    for one, other in zip(alone, shared, strict=True):
        assert other.history.equals(one.history) and other.selected.equals(one.selected)
