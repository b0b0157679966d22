"""The time-concat experiment's command line: `python -m kit launch ...` trains its runs (cat<n>
from a base run, or notebook 03's from a profile) and starts notebook 03's extraction and
probing as jobs; `python -m kit extract|probe` does one of those steps in this process; `kit
check` and `kit run` check this machine against notebook 03's plan."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from kit.cli.notebook_params import Loaded
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.sweep_settings import SweepSettings, cells
from kit.files.paths import shown
from kit.launch.backends import launch
from kit.launch.runs import Launched, is_finished
from kit.launch.sbatch import export_plan
from kit.launch.settings import parse_settings
from kit.params.params import ParameterError
from kit.readout.numbers import counted
from kit.train import rates
from kit.train.rates import EXPECTED_TRAIN_RATES, MEASURED_RATES_HELP
from kit.train.settings import TrainSettings, load_train_settings


def planned_configs(
    base_file: Path,
    overrides: list[str],
    runs: list[int],
    seeds: list[int],
    total: int | None,
    iterations: list[int] | None,
    root: str | None,
) -> list[TrainSettings]:
    """The time-concat runs for every n of `runs` (one iterations value per n, or the
    total split n ways), from one base configuration."""
    from kit.experiments.timecat import budget

    base = load_train_settings(base_file, overrides)
    if iterations is not None and len(iterations) != len(runs):
        raise ParameterError(f"--iterations: give one value per n of --runs {runs}")
    return [
        budget.configure(planned, base)
        for index, n in enumerate(runs)
        for planned in budget.split(
            n, seeds, root or base.output_dir, total, iterations[index] if iterations else None
        )
    ]


def add_profile_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--profile, -f FILE and --set KEY=VALUE for notebook 03's parameters, layered as
    `python -m kit run` layers them."""
    parser.add_argument(
        "--profile", required=required, help="a folder of parameters/ (notebook 03's parameters)"
    )
    parser.add_argument(
        "-f",
        "--file",
        dest="files",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="YAML parameters layered after the profile (repeatable, later wins)",
    )
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one parameter (applied last)",
    )


def add_commands(commands: argparse._SubParsersAction) -> None:
    """`launch plan|run|extract|probe` (start work with a backend) and `extract`, `probe` (do
    notebook 03's steps in this process, as a launched job does)."""
    group = commands.add_parser(
        "launch",
        help="train runs, or notebook 03's extraction and "
        "probing, with a launch backend (local, torchrun, Slurm)",
    )
    launched = group.add_subparsers(dest="launch_command", required=True)
    launch_help = "a LaunchSettings setting (repeatable)"
    for name, text in [
        (
            "plan",
            "write every run's config and an sbatch array script; with "
            "--profile, notebook 03's runs, extract.sbatch, probe.sbatch and "
            "submit.sh, which chains them",
        ),
        ("run", "train the unfinished runs with a backend"),
    ]:
        sub = launched.add_parser(name, help=text)
        sub.add_argument("--config", type=Path, help="the base run's YAML file")
        sub.add_argument("--runs", type=int, nargs="+", help="values of n")
        sub.add_argument("--total", type=int, help="total budget in iterations")
        sub.add_argument("--iterations", type=int, nargs="+", help="iterations per run, per n")
        sub.add_argument("--seeds", type=int, nargs="+")
        sub.add_argument("--root", help="folder holding cat<n>/seed<s> (default: output_dir)")
        sub.add_argument(
            "--out", type=Path, required=True, help="where configs, logs and the sbatch scripts go"
        )
        sub.add_argument(
            "--launch",
            dest="launch",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=launch_help,
        )
        sub.add_argument("--no-wait", action="store_true", help="slurm: return once submitted")
        sub.add_argument(
            "overrides", nargs="*", metavar="KEY=VALUE", help="override a setting of the base run"
        )
        if name == "plan":
            add_profile_arguments(sub, required=False)
            sub.add_argument(
                "--gpu",
                choices=sorted(name.lower() for name in EXPECTED_TRAIN_RATES),
                default="h100",
                help="the GPU the expected wall times are for (default h100)",
            )
            sub.add_argument("--rates", type=Path, metavar="JSON", help=MEASURED_RATES_HELP)
    for name, text in [
        (
            "extract",
            "extract the features notebook 03 probes, as a job with the profile's launch settings",
        ),
        ("probe", "probe them as a job and write the notebook's results tables"),
    ]:
        sub = launched.add_parser(name, help=text)
        add_profile_arguments(sub)
        sub.add_argument(
            "--launch",
            dest="launch",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=launch_help + ", over the profile's launch",
        )
        sub.add_argument("--no-wait", action="store_true", help="slurm: return once submitted")
    for name, text in [
        (
            "extract",
            "extract every feature notebook 03 probes into the cache "
            "(one process, or each rank of torchrun/srun its shard)",
        ),
        ("probe", "probe from the cache and write the results tables"),
    ]:
        add_profile_arguments(commands.add_parser(name, help=text))


def launch_command(args: argparse.Namespace) -> int:
    """`python -m kit launch ...`."""
    try:
        if args.launch_command in ("extract", "probe") or getattr(args, "profile", None):
            return _profile_command(args)
        missing = [f"--{key}" for key in ("config", "runs", "seeds") if not getattr(args, key)]
        if missing:
            raise ParameterError(
                f"the command line: give {', '.join(missing)} (or, for plan, --profile)"
            )
        pairs = (
            args.launch
            if any(p.startswith("backend=") for p in args.launch)
            else ["backend=slurm", *args.launch]
        )
        settings = parse_settings(pairs)
        trainings = planned_configs(
            args.config,
            args.overrides,
            args.runs,
            args.seeds,
            args.total,
            args.iterations,
            args.root,
        )
    except ParameterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.launch_command == "plan":
        script = export_plan(trainings, settings, args.out)
        print(f"{len(trainings)} runs; submit with: sbatch {shlex.quote(_here(script))}")
        return 0
    pending = [training for training in trainings if not is_finished(training)]
    print(f"{len(trainings) - len(pending)} of {len(trainings)} runs already finished")
    result = launch(pending, settings, args.out, wait=not args.no_wait)
    return _report(result)


def _here(path: str | Path) -> str:
    """A path as this command prints it: relative to the working directory (the repository
    root, usually) when it lies under it, so it can be typed as printed; else absolute."""
    return shown(path, Path.cwd())


def _report(result: Launched) -> int:
    for name, job_id in result.submitted.items():
        print(f"{name}: job {job_id}")
    for name, log in result.failed.items():
        print(f"{name}: failed, see {_here(log)}", file=sys.stderr)
    return 1 if result.failed else 0


def _profile_command(args: argparse.Namespace) -> int:
    """plan --profile, extract and probe: notebook 03's steps from its parameters."""
    from kit.experiments.timecat import estimates, jobs, planning

    if args.launch_command == "plan" and (args.config or args.runs or args.seeds or args.overrides):
        raise ParameterError(
            "the command line: --profile plans notebook 03's runs; leave out "
            "--config, --runs, --seeds and run overrides (use --set)"
        )
    # a plan is written where the data need not be mounted (a login node, a laptop)
    loaded = jobs.load_settings(
        args.profile, args.files, args.sets, check_inputs=args.launch_command != "plan"
    )
    if args.launch_command == "plan":
        settings = parse_settings(
            args.launch, loaded.launch.model_copy(update={"backend": "slurm"})
        )
        scripts = jobs.export_jobs(loaded, settings, args.out)
        gpu = None if loaded.device == "cpu" else args.gpu
        for line in rates.use_measured(args.rates) if args.rates is not None else []:
            print(f"rates: {line}")
        steps = estimates.estimate(loaded, gpu)
        print(estimates.describe(steps, gpu, estimates.overheads(loaded, gpu)))
        if gpu is not None:
            print(estimates.sources(loaded, gpu))
        print(estimates.designs(loaded, gpu))
        print(
            "wrote "
            + ", ".join(_here(script) for script in scripts)
            + f"; submit all with: bash {shlex.quote(_here(scripts[-1]))}"
        )
        return 0
    settings = parse_settings(args.launch, loaded.launch)
    if args.launch_command == "extract" and jobs.extraction_finished(loaded):
        print(f"features already extracted in {_here(planning.features_dir(loaded))}")
        return 0
    return _report(jobs.launch_step(args.launch_command, loaded, settings, wait=not args.no_wait))


def machine_problems(notebooks: dict[str, dict]) -> list[str]:
    """`kit check` and `kit run`: this machine against notebook 03's plan (disk, CUDA, compiler,
    /dev/shm), and settings its trainings cannot finish with on the launch's ranks, given each
    checked notebook's validated parameters by notebook name (torch is
    imported only when notebook 03 is among them)."""
    from kit.experiments.timecat.settings import NOTEBOOK, TimecatSettings

    if NOTEBOOK not in notebooks:
        return []
    from kit.experiments.timecat import plan_checks

    params = TimecatSettings.model_validate(notebooks[NOTEBOOK])
    return plan_checks.replica_problems(params) + [
        f"this machine: {problem}" for problem in plan_checks.machine_problems(params)
    ]


def machine_lines(notebooks: dict[str, dict]) -> list[str]:
    """`kit check`'s lines of this machine's memory and disk against notebook 03's plan."""
    from kit.experiments.timecat.settings import NOTEBOOK, TimecatSettings

    if NOTEBOOK not in notebooks:
        return []
    from kit.experiments.timecat import plan_checks

    params = TimecatSettings.model_validate(notebooks[NOTEBOOK])
    return [f"this machine: {line}" for line in plan_checks.machine_lines(params)]


def cost_lines(loaded: list[Loaded]) -> list[str]:
    """What the plans of notebooks 03 and 04 cost, said by `kit check` and `kit run` before
    anything starts, so that a large but valid count is seen before it is spent: notebook 03's
    training runs, images and disk at the most replicates its design takes (wall times on GPUs:
    `kit launch plan`); notebook 04's work and its time at the rates measured on 2 cores
    (kit.experiments.timecat.sweep_cost), less notebook 03's share where notebook 03 runs
    first."""
    lines = []
    with_03 = any(isinstance(settings, TimecatSettings) for _, settings, _ in loaded)
    for notebook, settings, _ in loaded:
        if isinstance(settings, TimecatSettings):
            lines.append(f"{notebook.stem}: expected cost at {_plan_cost(settings)}")
        elif isinstance(settings, SweepSettings) and settings.budgets:
            from kit.experiments.timecat import sweep_cost

            found = sweep_cost.cost(cells(settings), beyond_notebook_03=with_03)
            lines.append(
                f"{notebook.stem}: expected cost of the first round"
                + (" after notebook 03 (its runs, features and probes reused)" if with_03 else "")
                + f": {sweep_cost.cost_line(found)}"
            )
    return lines


def _plan_cost(params: TimecatSettings) -> str:
    """Notebook 03's plan at the most replicates its design takes, in one line."""
    from kit.experiments.timecat import estimates, planning
    from kit.runtime.machine import byte_size

    most = params.look(params.design.most)
    experiment = planning.plan(most)
    train, extract, probe = estimates.estimate(most, None)
    checkpoints = {path for rep in experiment.representations for path in rep.checkpoints}
    where = (
        ""
        if params.device == "cpu"
        else f"; wall times on GPUs: python -m kit launch plan --profile {params.profile}"
    )
    return (
        f"{counted(params.design.most, 'replicate')}: {len(experiment.trainings):,} training runs "
        f"({sum(run.iterations for run in experiment.trainings):,} iterations, "
        f"{train.images:,} images), features of {len(checkpoints):,} checkpoints "
        f"({extract.images:,} images), "
        + (
            f"{probe.images:,} images or feature rows probed"
            if probe.images
            else f"the {params.probe_kind} probe's reads not estimated (it gives no passes)"
        )
        + "; about "
        f"{byte_size(train.disk_bytes + extract.disk_bytes)} of checkpoints and features{where}"
    )


def step_command(args: argparse.Namespace) -> int:
    """`python -m kit extract|probe`: one of notebook 03's steps in this process."""
    from kit.experiments.timecat import jobs, planning
    from kit.train.command import exit_code

    def step() -> None:
        loaded = jobs.load_settings(args.profile, args.files, args.sets, check_inputs=True)
        if args.command == "extract":
            count = jobs.extract_step(loaded)
            if int(os.environ.get("RANK", "0")) == 0:
                print(f"{count} cache entries in {_here(planning.features_dir(loaded))}")
        else:
            print(f"wrote {_here(jobs.probe_step(loaded))}")

    return exit_code(step)
