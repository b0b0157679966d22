"""The order in which the suite's two test processes take its scopes (tests/conftest.py's
`_LongestFirst`): the longest first.

xdist hands a free process the next scope in its queue, a scope being a module, and orders that
queue by the number of tests in each scope. The scopes that take longest have the fewest tests
(the dress rehearsal's module: nine tests, about five minutes), so they came last, and one
process ran them alone while the other sat idle. Taking the longest scope first (the longest-
processing-time rule) leaves the short ones to fill in at the end.

How long a scope takes is estimated from its tests' ids alone (xdist's controller never collects
the tests): the seconds measured for the few tests that take a minute or so, else SLOW_S for a
test the fast lane leaves out and FAST_S for one it keeps. The figures only order the queue: a
stale one changes no test's outcome, only how evenly the two processes end.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

#: seconds each took in the full suite (`python -m pytest --durations=40`, two test processes, a
#: fresh clone at 323b0b5, 2 otherwise idle cores of a KVM guest of an AMD EPYC family 25 model
#: 17 (Zen 4), 2026-12-07): set-up and call together; the report, which reads the shared main job
#: (tests/main_job.py), about 10 s once the main job has run (its own work alone)
MEASURED_S = {
    "test_the_report_of_the_executed_notebooks_reads_offline": 10.0,
    "test_paper_checkpoints_probes_a_downloaded_release_with_the_authors_probe": 170.0,
    "test_paper_8xh100_trains_extracts_and_probes_with_two_ranks": 162.0,
    "test_notebook_03_killed_after_its_result_writes_leaves_a_folder_marked_incomplete": 118.0,
    "test_notebook_01_runs_in_lab_with_widgets_charts_and_tooltips": 60.0,
    "test_torchrun_backend_launches_back_to_back_without_failure": 53.0,
    "test_repeated_group_kills_across_a_chain_stop_it_every_time_and_resume_bit_identical": 52.0,
    "test_the_spread_script_on_an_emulated_other_machine_gives_the_recorded_bits": 46.0,
}
#: seconds taken for a test without a measured figure: one the fast lane leaves out (most take
#: 5 to 30 s) and one it keeps (most take well under a second)
SLOW_S, FAST_S = 15.0, 0.3


def test_name(nodeid: str) -> str:
    """The test function's name in a test id (`tests/test_x.py::test_y[case]` -> test_y)."""
    return nodeid.rpartition("::")[2].split("[")[0]


def seconds(nodeid: str, slow: Callable[[str], bool]) -> float:
    """How long the test `nodeid` is taken to last; `slow(nodeid)`: whether the fast lane leaves
    it out."""
    name = test_name(nodeid)
    if name in MEASURED_S:
        return MEASURED_S[name]
    return SLOW_S if slow(nodeid) else FAST_S


class LongestFirst(OrderedDict):
    """xdist's queue of scopes (scope -> {test id: done}) that hands out the scope whose tests
    are taken to last longest, when xdist takes the queue's first (`popitem(last=False)`)."""

    def __init__(self, slow: Callable[[str], bool]) -> None:
        super().__init__()
        self.slow = slow

    def cost(self, scope: str) -> float:
        return sum(seconds(nodeid, self.slow) for nodeid in self[scope])

    def popitem(self, last: bool = True) -> tuple[str, dict[str, bool]]:
        if last or not self:
            return super().popitem(last)
        longest = max(self, key=self.cost)  # the first of equals, in xdist's order
        return longest, self.pop(longest)
