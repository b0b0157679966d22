"""The shared main job's folder (tests/main_job.py): each test session's own, so that two
sessions in one checkout neither remove nor read each other's runs."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import main_job

HOLD = """
import fcntl, sys, time
lock = open(sys.argv[1], "a")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_a_session_claims_its_folder_and_clears_only_ended_sessions(tmp_path: Path) -> None:
    running, ended, legacy, mine = (tmp_path / name for name in ("101", "102", "run", "103"))
    for folder in (running, ended, legacy, mine):
        (folder / "ci").mkdir(parents=True)
    (tmp_path / "102.lock").touch()  # its session ended: nobody holds it
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "101.lock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        claimed = main_job.claim(mine)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["101", "101.lock", "103", "103.lock"]
        assert list(mine.iterdir()) == [] and (running / "ci").is_dir()
        with (tmp_path / "103.lock").open("a") as other:  # held by this session now
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("the session's folder is not locked")
            except BlockingIOError:
                pass
    finally:
        holder.kill()
        holder.wait()
    claimed.close()
