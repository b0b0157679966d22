"""The command line of training, `python -m kit.train --config run.yaml [KEY=VALUE ...]`, and the
exit status every kit command that trains or probes reports (kit.probes.faithful, kit launch).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from kit import models
from kit.data.kinds.base import DataError
from kit.data.workers import LoaderError
from kit.files import files, locks
from kit.params.params import ParameterError
from kit.runtime import machine
from kit.runtime.processes import PREEMPTED_EXIT, mark_preempted
from kit.train.checkpoint import NonFiniteLossError
from kit.train.settings import load_train_settings
from kit.train.stopping import Preempted
from kit.train.trainer import train_in_turn


def main(argv: list[str] | None = None) -> int:
    """`python -m kit.train`: train the runs of the --config files in turn; the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.train",
        description="Pretrain a ResNet with schedule-free AdamW (kit.train.trainer).",
    )
    parser.add_argument(
        "--config",
        type=Path,
        required=True,
        action="append",
        help="a run's YAML file; repeated, the runs train one after another in "
        "this one process (start-up and imports are paid once)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override a setting, dotted for sections (data.image_size=32)",
    )
    args = parser.parse_args(argv)
    return exit_code(
        lambda: train_in_turn(
            [load_train_settings(path, args.overrides) for path in args.config], watch=True
        )
    )


def exit_code(action: Callable[[], object]) -> int:
    """Run a command-line action: 0 on success, 2 for bad input or a run folder held by another
    process, 1 for a diverged run, a full disk or a stuck loader, PREEMPTED_EXIT for a run to
    resume; the message (which names the file, key, step or holder) goes to stderr without a
    traceback."""
    try:
        action()
    except (
        ParameterError,
        DataError,
        models.CheckpointError,
        locks.FolderLocked,
        machine.MachineError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Preempted as error:
        print(f"preempted: {error}", file=sys.stderr)
        mark_preempted()
        return PREEMPTED_EXIT
    except (NonFiniteLossError, files.DiskFullError, LoaderError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
