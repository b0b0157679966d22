"""Several feature probes fitted side by side, one intra-op thread each.

An L-BFGS probe of a few thousand rows runs on one intra-op thread (`kit.core.threads`: its
operations are too small to split), so on a machine of several cores the others sit idle while
it fits. Fitting `workers` probes at once on threads fills them: torch releases the GIL inside
its operations, each fit is the same sequence of single-threaded operations as when fitted
alone, so every result is bit-identical to fitting the probes one after the other
(docs/benchmarks.md, "One sweep cell's cost").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kit.core.threads import one_thread
from kit.probes.base import FeatureProbe
from kit.probes.rows import Split
from kit.probes.selection import ProbeResult


def fit_many(
    probe: FeatureProbe,
    jobs: Sequence[tuple[Split, Split, Mapping[str, Split]]],
    num_classes: int,
    settings: Any,
    workers: int = 1,
) -> Iterator[ProbeResult]:
    """`probe.fit` of each (training, evaluation, extra evaluation splits), yielded in order as
    each finishes. With
    `workers` > 1, that many fits run at once, the process held to one intra-op thread while
    they do (so that `workers` fits use `workers` cores, and no fit restores another's
    setting)."""
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
