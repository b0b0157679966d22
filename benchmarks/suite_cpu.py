"""CPU seconds each test of the suite costs, its own and its child processes', as a table.

`pytest --durations` gives wall time, which on a busy 2-core machine says more about what ran
beside a test than about the test: a notebook run in the shared main job can take five times its
CPU while the dress rehearsal trains next to it. What sets the suite's length on 2 cores is the
CPU its tests spend, most of it in the processes they start (kernels, torchrun ranks, loader
fork servers), so this runs pytest with a plugin that records, per test, the CPU time of the
test process and of the child processes it reaped in that time (`getrusage`), and prints the
tests that cost most, the cost by module and the totals:

    python benchmarks/suite_cpu.py --top 40                   # the whole suite, as CI runs it
    python benchmarks/suite_cpu.py -- -n 0 tests/test_rehearsal.py

A child's CPU counts when it is reaped: the shared main job's notebook runs (tests/main_job.py),
started in a background thread of a test process, land on whichever test that process runs when
each ends, so run the main job alone (`kit run --profile ci`) for its own figure. A process
that outlives its parent (a loader fork server, whose trainer has ended) is reaped by init and
counted by no test: the totals are a lower bound on what the machine spent (`/proc/stat`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: where the plugin, in each test process, writes its rows (one file per process)
ROWS_ENV = "KIT_SUITE_CPU_ROWS"
_ROWS: list[tuple[str, float, float]] = []


def _cpu() -> tuple[float, float]:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The plugin: one test's set-up, call and tear-down, with the CPU they took."""
    own, children = _cpu()
    yield
    own_after, children_after = _cpu()
    _ROWS.append((item.nodeid, own_after - own, children_after - children))


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = os.environ.get(ROWS_ENV)
    if folder and _ROWS:
        (Path(folder) / f"{os.getpid()}.json").write_text(json.dumps(_ROWS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=30, help="how many of the costliest tests")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="suite_cpu_") as folder:
        path = os.pathsep.join(filter(None, [str(here), os.environ.get("PYTHONPATH")]))
        env = os.environ | {ROWS_ENV: folder, "PYTHONPATH": path}
        command = [sys.executable, "-m", "pytest", "-p", Path(__file__).stem, *args.pytest_args]
        done = subprocess.run(command, cwd=here.parent, env=env, check=False)
        rows = [row for file in Path(folder).glob("*.json") for row in json.loads(file.read_text())]
    if not rows:
        sys.exit(f"pytest exited {done.returncode} and recorded no test")
    rows.sort(key=lambda row: -(row[1] + row[2]))
    print(f"\n{'CPU s':>8} {'own':>7} {'children':>8}  test")
    for nodeid, own, children in rows[: args.top]:
        print(f"{own + children:8.1f} {own:7.1f} {children:8.1f}  {nodeid}")
    modules: collections.Counter[str] = collections.Counter()
    for nodeid, own, children in rows:
        modules[nodeid.partition("::")[0]] += own + children
    print(f"\n{'CPU s':>8}  module")
    for module, seconds in modules.most_common(args.top):
        print(f"{seconds:8.1f}  {module}")
    own, children = sum(row[1] for row in rows), sum(row[2] for row in rows)
    # here, not at the top: pytest loads this module as a plugin before the suite's conftest has
    # set the environment the kit reads on import
    from kit.numerics import cpu_records
    from kit.runtime import machine

    cores, cpu = machine.usable_cores(), cpu_records.describe(cpu_records.identity())
    print(f"\n{cores} cores of {cpu}; load average at the end {os.getloadavg()[0]:.1f}")
    print(
        f"{len(rows)} tests: {own + children:.1f} s of CPU ({own:.1f} s in the test processes, "
        f"{children:.1f} s in processes they started); pytest exited {done.returncode}"
    )
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
