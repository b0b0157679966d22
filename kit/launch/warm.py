"""Worker processes started before their command, so that importing torch and torchvision (about
5 s on a CPU node, as long as a small run trains) overlaps what the kernel does meanwhile.

A warm process (`python -m kit.launch.warm`) imports the trainer's modules, then waits for one
command
on its standard input: the module and arguments of `python -m`, the environment, working folder,
CPU cores and log file it would have had if started cold. It then calls the module's `main` with
those arguments (every launched module has one) and exits with its status; it exits quietly when
its input closes (the kernel that started it has ended), and when the kernel dies while it
works it gets SIGTERM (kit.runtime.processes.dying_with_parent), which a trainer takes as preemption
and an idle warm process, not ignoring it, dies of. Only processes without a GPU are warmed:
CUDA reads CUDA_VISIBLE_DEVICES once, and on a GPU node a process is started for hours of
training, not seconds.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from kit.files.files import change_stamp
from kit.files.paths import REPO_ROOT, importable_environment
from kit.runtime.processes import ignoring_signals, module_main

#: what a warm process imports before its command (torch and torchvision come with it)
PRELOAD = "kit.train.trainer"
KIT_SOURCES = Path(__file__).parents[1]
#: signals an idle warm process ignores: a stop sent to the kernel's whole process tree must not
#: kill a process that has no command yet
IDLE_IGNORED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)


def source_stamp(folder: Path) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Modules as they are on disk: a warm process imported the code of its stamp, so it is
    used only while the stamp is unchanged (an edit made in JupyterLab takes effect, and so does
    one whose modification time was put back: the change stamp holds the status-change time)."""
    return tuple(
        (str(path.relative_to(folder)), change_stamp(path)) for path in sorted(folder.rglob("*.py"))
    )


class WarmProcesses:
    """Warm processes of one kernel, each used for one command."""

    def __init__(self, sources: Path = KIT_SOURCES) -> None:
        self.idle: list[subprocess.Popen] = []
        self.sources = sources
        self.stamp = source_stamp(sources)

    def start(self, count: int) -> None:
        """Have `count` idle warm processes (starting the missing ones)."""
        self._drop_stale()
        self.idle = [process for process in self.idle if process.poll() is None]
        for _ in range(count - len(self.idle)):
            self.idle.append(
                subprocess.Popen(
                    [sys.executable, "-m", "kit.launch.warm"],
                    stdin=subprocess.PIPE,
                    cwd=REPO_ROOT,
                    env=importable_environment(),
                    preexec_fn=ignoring_signals(IDLE_IGNORED),
                )
            )

    def run(
        self, command: Sequence[str], env: dict[str, str], cpus: Sequence[int], log: Path
    ) -> subprocess.Popen | None:
        """Hand `command` (`python -m module ...`) to an idle warm process; None when none is
        idle, alive and current."""
        self._drop_stale()
        if list(command[:2]) != [sys.executable, "-m"]:
            return None
        order = {
            "argv": list(command[2:]),
            "env": env,
            "cwd": str(REPO_ROOT),
            "cpus": list(cpus),
            "log": str(log),
        }
        while self.idle:
            process = self.idle.pop(0)
            try:
                assert process.stdin is not None
                process.stdin.write(json.dumps(order).encode() + b"\n")
                process.stdin.close()
            except (BrokenPipeError, ValueError):  # it died while it waited
                continue
            return process
        return None

    def _drop_stale(self) -> None:
        if (stamp := source_stamp(self.sources)) != self.stamp:
            self.stop()
            self.stamp = stamp

    def stop(self) -> None:
        """End the idle processes."""
        for process in self.idle:
            process.kill()
            process.wait()
        self.idle = []


def main() -> int:
    importlib.import_module(PRELOAD)
    line = sys.stdin.buffer.readline()
    if not line:
        return 0
    order = json.loads(line)
    os.chdir(order["cwd"])
    os.environ.clear()
    os.environ.update(order["env"])
    if order["cpus"]:
        os.sched_setaffinity(0, order["cpus"])
    signal.signal(signal.SIGINT, signal.default_int_handler)  # USR1/2 ignored as in a cold start
    log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    import torch  # already imported: OpenMP read OMP_NUM_THREADS before the command had it

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    module, *arguments = order["argv"]
    sys.argv = [module, *arguments]
    return module_main(module)(arguments)  # as launch_step's inline backend


if __name__ == "__main__":
    sys.exit(main())
