"""benchmarks/suite_cpu.py: the CPU each test costs, its own and its child processes'."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from kit.files.paths import REPO_ROOT

PLANTED = """
import subprocess, sys, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def test_burns_in_its_own_process():
    burn(0.4)

def test_burns_in_a_child():
    code = "import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", code], check=True)

def test_sleeps():
    time.sleep(0.4)
"""


def test_the_cpu_of_each_test_and_of_the_processes_it_starts_is_told_apart(tmp_path: Path) -> None:
    """Planted tests: one burning CPU itself, one in a child process, one asleep; each is
    charged what it burned, where it burned it, and the sleeper nothing (its wall time is not
    CPU)."""
    (tmp_path / "test_planted.py").write_text(PLANTED)
    done = subprocess.run(
        [sys.executable, "benchmarks/suite_cpu.py", "--", "-n", "0", "-q", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = {
        name: (float(total), float(own), float(children))
        for total, own, children, name in re.findall(
            r"^ +([\d.]+) +([\d.]+) +([\d.]+)  \S+::(\w+)$", done.stdout, re.MULTILINE
        )
    }
    assert set(rows) == {"test_burns_in_its_own_process", "test_burns_in_a_child", "test_sleeps"}
    assert rows["test_burns_in_its_own_process"][1] >= 0.35
    assert rows["test_burns_in_a_child"][2] >= 0.35 and rows["test_burns_in_a_child"][1] < 0.35
    assert rows["test_sleeps"][0] < 0.2
    assert list(rows)[-1] == "test_sleeps"  # costliest first
    assert "3 tests:" in done.stdout
