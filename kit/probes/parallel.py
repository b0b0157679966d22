"""Several feature probes fitted side by side, one intra-op thread each.

An L-BFGS probe of a few thousand rows runs on one intra-op thread (`kit.numerics.threads`: its
operations are too small to split), so on a machine of several cores the others sit idle while
it fits. Fitting `workers` probes at once on threads fills them: torch releases the GIL inside
its operations, each fit is the same sequence of single-threaded operations as when fitted
alone, so every result is bit-identical to fitting the probes one after the other
(docs/benchmarks.md, "One sweep cell's cost").
"""

from __future__ import annotations

import queue
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from kit.numerics.threads import one_thread
from kit.probes.base import FeatureProbe
from kit.probes.devices import fit_devices, visible_gpus
from kit.probes.rows import Split
from kit.probes.selection import ProbeResult


def fit_many(
    probe: FeatureProbe,
    jobs: Sequence[tuple[Split, Split, Mapping[str, Split]]],
    num_classes: int,
    settings: Any,
    workers: int = 1,
    devices: Sequence[torch.device] | None = None,
) -> Iterator[ProbeResult]:
    """`probe.fit` of each (training, evaluation, extra evaluation splits), yielded in order as
    each finishes. With several `devices` (by default `fit_devices` of the settings: the visible
    GPUs where they ask for all of several), each fit runs on one of them, as many at once as
    there are devices. Otherwise, with `workers` > 1, that many fits run at once, the process
    held to one intra-op thread while they do (so that `workers` fits use `workers` cores, and
    no fit restores another's setting)."""
    places = list(fit_devices(settings, visible_gpus()) if devices is None else devices)
    if len(places) > 1 and len(jobs) > 1:
        yield from _over_devices(probe, jobs, num_classes, settings, places)
        return
    if workers == 1 or len(jobs) < 2:
        for train, evaluation, extra in jobs:
            yield probe.fit(train, evaluation, num_classes, settings, False, extra)
        return
    with one_thread(), ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(probe.fit, train, evaluation, num_classes, settings, False, extra)
            for train, evaluation, extra in jobs
        ]
        for future in futures:
            yield future.result()


def _over_devices(
    probe: FeatureProbe,
    jobs: Sequence[tuple[Split, Split, Mapping[str, Split]]],
    num_classes: int,
    settings: Any,
    places: Sequence[torch.device],
) -> Iterator[ProbeResult]:
    """The fits shared over `places`: a thread per device, each fit on the next free one (its
    settings' `device` that one, `devices` unset), yielded in order; on one intra-op thread
    where a device is the CPU (a stand-in for GPUs, as the tests use)."""
    free: queue.Queue[torch.device] = queue.Queue()
    for place in places:
        free.put(place)

    def fit(train: Split, evaluation: Split, extra: Mapping[str, Split]) -> ProbeResult:
        place = free.get()
        try:
            own = settings.model_copy(update={"device": str(place), "devices": None})
            return probe.fit(train, evaluation, num_classes, own, False, extra)
        finally:
            free.put(place)

    with (
        one_thread(any(place.type == "cpu" for place in places)),
        ThreadPoolExecutor(max_workers=len(places)) as pool,
    ):
        futures = [pool.submit(fit, *job) for job in jobs]
        for future in futures:
            yield future.result()
