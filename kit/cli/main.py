"""The command line, `python -m kit COMMAND`: run or check notebooks, launch jobs, do a job's step.

`python -m kit run [NOTEBOOK ...] --profile cpu [-f FILE ...] [--set a.b=value ...]` executes
notebooks; `check` validates their parameters, data and output folders; `launch` starts training
runs or notebook 03's steps with a backend; `extract` and `probe` are those steps themselves;
`selfcheck` measures and checks this node (kit.cli.selfcheck); `download` fetches the
authors' released checkpoints or CIFAR-10/100, checked and resumable (kit.cli.download); `lab`
starts JupyterLab saving the notebooks stripped (kit.cli.lab); `report --profile NAME` writes
`outputs/NAME/index.html` from what a run wrote; `fixtures DIR` writes tiny datasets laid out as
the paper profiles read them, and stand-ins for the released checkpoints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kit.cli import download, figures, notebook_params, reference, time_concat, write_errors
from kit.numerics import numerics
from kit.params import params
from kit.runtime import provenance
from kit.train.rates import MEASURED_RATES_HELP


def parser() -> argparse.ArgumentParser:
    """Every command and its arguments."""
    parser = argparse.ArgumentParser(prog="python -m kit", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"timecat-kit {provenance.kit_version()}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in [
        ("run", "execute notebooks with papermill"),
        ("check", "validate parameters without running anything"),
    ]:
        sub = commands.add_parser(name, help=text)
        sub.add_argument(
            "notebooks", nargs="*", help="file names, stems or prefixes such as 01 (default: all)"
        )
        sub.add_argument("--profile", default="cpu", help="a folder of parameters/ (default cpu)")
        sub.add_argument(
            "-f",
            "--file",
            dest="files",
            action="append",
            default=[],
            type=Path,
            metavar="FILE",
            help="your own YAML parameters, layered after the profile (repeatable, later wins)",
        )
        sub.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override one parameter, dotted for sections "
            "(train.lr=0.01; repeatable, applied last)",
        )
    numerics_check = commands.choices["check"]
    numerics_check.add_argument(
        "--numerics",
        action="store_true",
        help="instead: fingerprint this CPU's numerics op by op against the CPU models "
        "recorded in docs/data/cpus (about a minute)",
    )
    numerics_check.add_argument(
        "--record",
        action="store_true",
        help="with --numerics: keep the fingerprint as this CPU model's record",
    )
    store = commands.add_parser(
        "store-checks",
        help="keep the outputs of the cells tagged 'nbval-check-output' of an executed "
        "copy as the references the tests compare with (tests/nbval_references/)",
    )
    store.add_argument("executed", type=Path, help="an executed notebook, e.g. outputs/ci/01_...")
    time_concat.add_commands(commands)
    download.add_command(commands)
    commands.add_parser(
        "fixtures",
        help="write tiny datasets in the layouts the paper profiles "
        "read, to try them with TIMECAT_DATA=DIR, and stand-ins for the released "
        "checkpoints (TIMECAT_CHECKPOINTS=DIR/checkpoints)",
    ).add_argument("dir", type=Path)
    commands.add_parser(
        "reference", help="write docs/reference/parameters.md from the settings classes"
    ).add_argument(
        "--check", action="store_true", help="only compare: exit 1 naming the file if it differs"
    )
    quoted = commands.add_parser(
        "figures", help="write the figures docs/ quotes from recorded outputs (docs/results)"
    )
    quoted.add_argument(
        "--check", action="store_true", help="only compare: exit 1 naming the page if it differs"
    )
    quoted.add_argument(
        "--record",
        nargs=2,
        metavar=("PROFILE", "FOLDER"),
        help="first keep a finished output folder's summaries and provenance in docs/results",
    )
    quoted.add_argument(
        "--record-cpu",
        type=Path,
        metavar="FOLDER",
        help="first keep a finished main job's claims as this CPU model's record "
        "(docs/data/cpus), leaving docs/results as it is",
    )
    selfcheck = commands.add_parser(
        "selfcheck",
        help="check this node before a real run: GPU training "
        "rate, input pipeline, preemption, bf16 extraction, probe (a CPU subset "
        "without a GPU)",
    )
    selfcheck.add_argument(
        "--gpus", type=int, default=None, metavar="N", help="GPUs to use (default: all visible)"
    )
    selfcheck.add_argument("--rates", type=Path, metavar="JSON", help=MEASURED_RATES_HELP)
    commands.add_parser(
        "lab",
        help="JupyterLab on the repository, saving the notebooks of "
        "notebooks/ without outputs, as committed; any jupyter lab option follows",
    )
    commands.add_parser(
        "report",
        help="write outputs/PROFILE/index.html: verdicts, tables, "
        "charts, notebooks and parameters of a run, one page that opens offline",
    ).add_argument("--profile", default="cpu", help="whose outputs (default cpu)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m kit`: the exit status of the command."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lab"]:  # the rest is jupyter lab's, which argparse would refuse
        from kit.cli import lab

        return lab.command(argv[1:])
    args = parser().parse_args(argv)
    if args.command == "selfcheck":  # torch and torchvision: imported only where needed, as
        from kit.cli import selfcheck  # they are slow to import (docs/decisions.md)

        return selfcheck.command(args.gpus, args.rates)
    if args.command == "report":
        return report_command(args.profile)
    if args.command == "check" and args.numerics:
        from kit.cli import fingerprint

        return fingerprint.command(args.record)
    if args.command == "reference":
        return reference.command(args.check)
    if args.command == "figures":
        return figures.command(args.check, args.record, args.record_cpu)
    if args.command == "launch":
        return time_concat.launch_command(args)
    if args.command in ("extract", "probe"):
        return time_concat.step_command(args)
    if args.command == "download":
        return download.command(args.what, args.to, args.url, args.accept_new_archive)
    if args.command == "fixtures":
        return fixtures_command(args.dir)
    # the notebook tools (papermill, nbformat): imported only by the commands that run or read
    # notebooks, so that training, the self-check and the steps run where they are absent
    if args.command == "store-checks":
        from kit.cli import nbval_references

        print(f"stored reference outputs in {nbval_references.store_references(args.executed)}")
        return 0
    return notebooks_command(args)


def notebooks_command(args: argparse.Namespace) -> int:
    """`kit check` and `kit run`: the values first, before the notebook tools take seconds to
    import, so that a count above its bound is refused at once (kit.params.bounds); then what the
    plans cost, before anything is spent."""
    try:
        overrides = params.parse_overrides(args.overrides)
        loaded = notebook_params.refuse_invalid(args.notebooks, args.profile, args.files, overrides)
    except params.ParameterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in time_concat.cost_lines(loaded):
        print(line, flush=True)
    from kit.cli import kernels, runner

    if args.command == "run":
        return runner.run(args.notebooks, args.profile, args.files, overrides)
    try:
        runs = runner.plan(args.notebooks, args.profile, args.files, overrides)
        problems = (
            runner.output_problems(runs)
            + runner.held_problems(runs)
            + runner.machine_problems(runs)
            + list(filter(None, [kernels.split_problem("run")]))  # as `kit run` refuses
        )
        if problems:
            raise params.ParameterError("\n".join(problems))
    except params.ParameterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for planned in runs:
        print(*planned.notes, sep="\n", end="\n" if planned.notes else "")
        print(
            f"{planned.notebook.name}: parameters, data, checkpoints and output "
            f"folders valid for profile {args.profile}"
        )
    for line in time_concat.machine_lines({run.notebook.stem: run.parameters for run in runs}):
        print(line)
    print(numerics.describe(numerics.before_torch()))
    return 0


def fixtures_command(folder: Path) -> int:
    """`python -m kit fixtures DIR`: the paper profiles' datasets, tiny, in their layouts, and
    stand-ins for the released checkpoints in DIR/checkpoints."""
    from kit.data.fixtures import write_paper_data
    from kit.experiments.timecat.released import write_released

    written = [*write_paper_data(folder).values(), folder / "checkpoints"]
    write_released(folder / "checkpoints")
    print(
        f"wrote {', '.join(map(str, written))}; try: TIMECAT_DATA={folder} python -m kit "
        f"check 03 --profile paper-8xh100, or with TIMECAT_CHECKPOINTS={folder}/checkpoints "
        "--profile paper-checkpoints"
    )
    return 0


def report_command(profile: str) -> int:
    """`python -m kit report --profile NAME`: write the page, or say why not (exit 2)."""
    from kit.report import page

    try:
        print(f"wrote {page.write_report(profile)}")
    except page.ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: report not written: {write_errors.write_error(error)}", file=sys.stderr)
        return 1
    return 0
