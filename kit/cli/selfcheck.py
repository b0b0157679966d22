"""`python -m kit selfcheck [--gpus N]`: the first thing to run on a new node.

On a GPU node (about ten minutes) it reports the software stack, the kit's ResNet-50 training
rate in bf16 at 224 px with and without torch.compile against a bare loop and against the
published figure for the GPU, the input path it would use (`data.decode`: the fastest per core
of CPU decoding, torchvision's GPU decoder and DALI) and whether it feeds the GPUs, a
short training run stopped by a preemption signal and resumed, bf16 feature extraction against
float32, and the fast probe on the GPUs. Without a GPU it runs the same checks at small sizes
on the CPU (well under a minute) and says so. It exits 1 naming every failed check.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from kit.cli import selfcheck_checks as checks
from kit.cli.selfcheck_checks import CheckFailed, Row, Sizes
from kit.readout.numbers import counted
from kit.runtime import machine, provenance
from kit.train import rates
from kit.train.rates import expected_rate

#: the kit's training step must reach this share of the bare loop's rate
TRAINER_FLOOR = 0.85
#: below this share of the expected figure the node is reported as slow (a warning)
EXPECTED_SHARE = 0.7


def driver_version() -> str:
    """The NVIDIA driver's version from nvidia-smi, or why it is unknown."""
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH"
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.split("\n")[0].strip() or f"nvidia-smi failed: {done.stderr.strip()}"


def environment(gpus: int) -> list[Row]:
    """The software stack and the devices the checks use."""
    rows = [
        Row("timecat-kit", provenance.kit_version(), "", "info", f"commit {provenance.commit()}"),
        Row("torch", torch.__version__, "", "info", f"Python {platform.python_version()}"),
        Row("CPU cores usable", str(machine.usable_cores()), "", "info"),
    ]
    if not gpus:
        return rows + [Row("GPU", "none", "", "info", "CPU subset: small sizes, no GPU rows")]
    nccl = (
        ".".join(map(str, torch.cuda.nccl.version()))
        if torch.distributed.is_nccl_available()
        else "not built"
    )
    return rows + [
        Row("NVIDIA driver", driver_version(), "", "info"),
        Row("CUDA (torch build)", str(torch.version.cuda), "", "info"),
        Row("NCCL", nccl, "", "info"),
        Row(
            "GPUs",
            f"{gpus} x {torch.cuda.get_device_name(0)}",
            f"{torch.cuda.device_count()} visible",
            "info",
        ),
    ]


def training_rows(
    sizes: Sizes, device: torch.device, gpus: int, folder: Path
) -> tuple[list[Row], float]:
    """The bare loop, the kit's step eager and compiled (GPU only), and the expected figure;
    also the best per-GPU rate found (what the input pipeline must feed)."""
    bare = checks.bare_rate(sizes, device)
    label = (
        f"{sizes.model} {'bf16' if device.type == 'cuda' else 'fp32'} {sizes.image_size} "
        f"px, batch {sizes.batch}"
    )
    rows = [Row("bare loop", f"{bare:,.0f} img/s", "", "info", label)]
    best = 0.0
    for compiled in [False, True] if device.type == "cuda" else [False]:
        rate = checks.trainer_rate(sizes, device, compiled, folder / f"compiled-{compiled}")
        best, ratio = max(best, rate), rate / bare
        slow = device.type == "cuda" and not compiled and ratio < TRAINER_FLOOR
        rows.append(
            Row(
                f"kit trainer{' + compile' if compiled else ''}",
                f"{rate:,.0f} img/s",
                f"{ratio:.2f} x bare",
                "FAIL" if slow else "ok" if device.type == "cuda" else "info",
                "CPU: timings only, not judged"
                if device.type == "cpu"
                else f"eager must reach {TRAINER_FLOOR} x bare",
            )
        )
        if slow:
            raise CheckFailed(
                f"the kit's training step runs at {ratio:.2f} x the bare loop, "
                f"below {TRAINER_FLOOR}",
                rows,
            )
    if device.type == "cpu":
        return rows + [Row("compile", "skipped", "", "skip", "CPU subset")], best
    expected = expected_rate(torch.cuda.get_device_name(device))
    if expected is None:
        rows.append(
            Row("expected figure", "unknown GPU", "", "skip", torch.cuda.get_device_name(device))
        )
    else:
        share = best / expected[0]
        rows.append(
            Row(
                "vs expected figure",
                f"{share:.0%}",
                f"{expected[0]:,.0f} img/s",
                "ok" if share >= EXPECTED_SHARE else "warn",
                expected[1],
            )
        )
    return rows, best


def run_checks(gpus: int, console: Console) -> list[Row]:
    """Every check in turn, each failure kept as a FAIL row with its reason."""
    sizes = checks.GPU_SIZES if gpus else checks.CPU_SIZES
    device = torch.device("cuda", 0) if gpus else torch.device("cpu")
    rows = environment(gpus)
    with checks.scratch() as scratch:
        folder = Path(scratch)
        rate = [0.0]

        def training() -> list[Row]:
            found, rate[0] = training_rows(sizes, device, gpus, folder)
            return found

        def pipeline() -> list[Row]:
            return [
                checks.feeding(
                    checks.input_rates(sizes, folder, device),
                    machine.usable_cores(),
                    rate[0] * max(gpus, 1),
                )
            ]

        steps: list[tuple[str, Callable[[], list[Row]]]] = [
            ("training rate", training),
            ("input pipeline", pipeline),
            (
                "preemption and resume",
                lambda: [checks.preemption_resume(sizes, device.type, folder)],
            ),
            ("bf16 extraction", lambda: [checks.bf16_extraction(sizes, device)]),
            (
                "fast probe",
                lambda: [checks.probe_check(sizes, "cuda" if gpus else "cpu", max(gpus, 1))],
            ),
        ]
        for name, step in steps:
            with console.status(f"selfcheck: {name}"):
                rows += _attempt(name, step)
    return rows


def _attempt(name: str, step: Callable[[], list[Row]]) -> list[Row]:
    """A check's rows, or the rows it had plus a FAIL row saying why it failed."""
    try:
        return step()
    except CheckFailed as error:
        done = error.args[1] if len(error.args) > 1 else []
        return [*done, Row(name, "failed", "", "FAIL", str(error.args[0]))]
    except Exception as error:  # noqa: BLE001 - any crash is a finding of the self-check, reported, not raised
        return [Row(name, "crashed", "", "FAIL", f"{type(error).__name__}: {error}")]


def report(rows: list[Row], console: Console, gpus: int) -> int:
    """Print the table and the verdict; 1 when any check failed."""
    table = Table(title="kit selfcheck" + ("" if gpus else " (CPU subset: no GPU found)"))
    for column in ("check", "measured", "against", "status", "note"):
        table.add_column(column, overflow="fold")
    colours = {"ok": "green", "warn": "yellow", "FAIL": "bold red"}
    for row in rows:
        status = f"[{colours[row.status]}]{row.status}[/]" if row.status in colours else row.status
        table.add_row(row.check, row.measured, row.against, status, row.note)
    console.print(table)
    failed = [row for row in rows if row.status == "FAIL"]
    for row in failed:
        console.print(f"FAILED {row.check}: {row.note}", markup=False, highlight=False)
    if not failed:
        console.print(
            "selfcheck passed"
            + ("" if gpus else " (CPU subset only: run it again on a GPU node for the GPU checks)")
        )
    return 1 if failed else 0


def gpus_to_use(asked: int | None, visible: int) -> int:
    """The GPUs the checks use: all visible unless `--gpus` says fewer; more is an error."""
    if asked is not None and asked > visible:
        raise ValueError(f"--gpus {asked}: only {counted(visible, 'GPU')} visible")
    return visible if asked is None else asked


def command(asked: int | None, measured: Path | None = None) -> int:
    """`python -m kit selfcheck`: the exit status. With `measured` (a JSON file written by
    benchmarks/gpu_input.py), the training rate is compared with that node's figure."""
    console = Console()
    try:
        for line in rates.use_measured(measured) if measured is not None else []:
            console.print(f"rates: {line}", markup=False)
        gpus = gpus_to_use(asked, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    except ValueError as error:
        console.print(f"error: {error}", markup=False)
        return 2
    return report(run_checks(gpus, console), console, gpus)
