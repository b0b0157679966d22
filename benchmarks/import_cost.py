"""CPU seconds a fresh process spends importing what the kit's processes import at start.

Every kernel, `kit` command, torchrun rank and loader fork server pays its imports again, and
the test suite starts a few hundred of them, so a second of import in a common module is minutes
of the suite's CPU. Each case is timed in its own fresh interpreter (process CPU time, median of
`--repeats`), optionally with a module hidden (`--without NAME`: imported as missing, as where it
is not installed), to show what one package costs:

    python benchmarks/import_cost.py --without rfc3987_syntax

prints, per case, the median CPU seconds with everything installed here and with NAME hidden.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from kit.numerics import cpu_records
from kit.runtime import machine

#: what the kit's processes import first: a notebook kernel's charts, `kit run`'s runner, a
#: training rank, a loader fork server's preload
CASES = {
    "altair (charts in every kernel)": "altair",
    "nbformat (kit run, nbval)": "nbformat",
    "kit.cli.runner (kit run)": "kit.cli.runner",
    "kit.train.__main__ (a rank)": "kit.train.__main__",
    "kit.data.pipeline (fork server)": "kit.data.pipeline",
}


def cpu_seconds(module: str, hidden: str | None) -> float:
    """Process CPU time of `import module` in a fresh interpreter, `hidden` made unimportable."""
    hide = f"sys.modules[{hidden!r}] = None; " if hidden else ""
    code = (
        f"import sys, time; {hide}start = time.process_time(); import {module}; "
        "print(time.process_time() - start)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--without", help="a module to hide in the second column")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{machine.usable_cores()} cores of {cpu_records.describe(cpu_records.identity())}")
    print(f"{'import':40} {'CPU s':>7} {'without ' + (args.without or '-'):>24}")
    for label, module in CASES.items():
        columns = [None, args.without] if args.without else [None]
        medians = [
            statistics.median(cpu_seconds(module, hidden) for _ in range(args.repeats))
            for hidden in columns
        ]
        print(f"{label:40} " + " ".join(f"{value:>7.2f}" for value in medians))


if __name__ == "__main__":
    main()
