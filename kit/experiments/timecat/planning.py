"""The time-concat experiment's plan (paper Section 5.1, Table 3): every run, untrained network
and representation of the variants, and the training of the unfinished runs.

The plan itself imports no torch, so that `kit check` and `kit run` say what it costs
(kit.experiments.timecat.estimates) without torch's seconds of imports: what writes, reads or
opens networks and data imports its torch modules where it is called."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from kit.data import kinds
from kit.data.kinds.base import DataError
from kit.data.settings import DataSettings
from kit.experiments.timecat.entries import ProbeTask, Variant
from kit.experiments.timecat.layouts import checkpoint_file, released_identity
from kit.experiments.timecat.settings import TimecatSettings
from kit.files import files
from kit.files.paths import escapes, resolve, shown
from kit.launch import backends as kit_launch
from kit.launch.runs import is_finished
from kit.params.params import ParameterError
from kit.readout.numbers import counted
from kit.readout.progress import Stage
from kit.report.labels import value_text
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings


@dataclass(frozen=True)
class Representation:
    """One probed representation: a variant's models in one replicate, concatenated."""

    variant: str
    kind: str
    n: int
    width: float
    replicate: int
    iterations_per_model: int | None
    checkpoints: tuple[Path, ...]
    task: str | None = None  # direct training: the only task it is probed on
    #: what each checkpoint must record of itself (kit.train.backbones.identity_problem), in order
    identities: tuple[dict[str, Any], ...] = field(default=(), compare=False)

    def expected(self) -> dict[Path, dict[str, Any]]:
        """Each checkpoint's expected identity, by file."""
        return dict(zip(self.checkpoints, self.identities, strict=False))


def runs_dir(params: TimecatSettings) -> Path:
    """Where runs and logs go: run_root, relative to the output folder."""
    return resolve(params.output_dir) / params.run_root


def features_dir(params: TimecatSettings) -> Path:
    """The feature cache: `feature_cache` relative to the output folder, else
    <run_root>/features. Entries are keyed by checkpoint contents, the identity each checkpoint
    must record (its run's folder, seed and step: `identity`), data and split, so runs sharing a
    cache share the features of identical checkpoints of the same run (untrained networks of the
    same seeds) and nothing else."""
    if params.feature_cache is not None:
        return resolve(params.output_dir) / params.feature_cache
    return runs_dir(params) / "features"


@dataclass(frozen=True)
class Plan:
    """What the experiment trains, initialises and probes."""

    trainings: list[TrainSettings]
    #: untrained networks of random-init variants, written by `initialise`
    initial: list[TrainSettings]
    representations: list[Representation]
    #: by run folder: the variants it serves and at which step ("cat2 at 200000")
    serves: dict[str, list[str]]


#: under `catn_models: snapshots`, the seeded runs' folder in each replicate's
SEEDED = "seeded"


def _seeded_runs(params: TimecatSettings, replicate: int, root: Path) -> dict[int, TrainSettings]:
    """`catn_models: snapshots`: one run per seed of the replicate (by its index), trained to the
    largest step any time-concat variant reads from it, with a snapshot at every such step and
    step_hint the experiment's horizon, in rep<r>/seeded/seed<s>."""
    concatenated = [v for v in params.variants if v.trained and v.spec.concatenated]
    steps: dict[int, set[int]] = {}
    for variant in concatenated:
        for index in range(variant.n):
            steps.setdefault(index, set()).add(params.iterations_for(variant))
    seeds = params.seeds(replicate)
    runs = {}
    for index, needed in sorted(steps.items()):
        folder = root / f"rep{replicate}" / SEEDED / f"seed{seeds[index]}"
        base = params.run_config(concatenated[0], seeds[index], str(folder))
        runs[index] = TrainSettings(
            **base.model_dump()
            | {
                "iterations": max(needed),
                "step_hint": params.horizon(),
                "snapshot_steps": sorted(needed),
            }
        )
    return runs


def _representation(
    variant: Variant,
    replicate: int,
    iterations: int | None,
    checkpoints: tuple[Path, ...],
    task: ProbeTask | None = None,
    identities: tuple[dict[str, Any], ...] = (),
) -> Representation:
    """`variant`'s models in `replicate`, read at `iterations` from `checkpoints`."""
    return Representation(
        variant.name,
        variant.kind,
        variant.n,
        variant.width,
        replicate,
        iterations,
        checkpoints,
        None if task is None else task.name,
        identities,
    )


def identity(settings: TrainSettings, root: Path, step: int | None) -> dict[str, Any]:
    """What the checkpoint of the run `settings` describes must record of itself at `step`
    (None: untrained): model, width, seed, its run folder relative to `root`, and the step."""
    folder = Path(settings.output_dir)
    run = folder.relative_to(root) if folder.is_relative_to(root) else Path(folder.name)
    return {
        "model": settings.model,
        "width": settings.width,
        "seed": settings.seed,
        "run": run.as_posix(),
        "step": step,
    }


def plan(params: TimecatSettings, start: int = 0) -> Plan:
    """Every run, untrained network and representation of the experiment's replicates from
    `start` (a round of replicates: kit.stats.rounds) to `replicates`. Folders are
    rep<r>/<variant>/seed<s> (direct: rep<r>/<variant>-<task>/seed<s>); under `catn_models:
    snapshots` the time-concat variants read rep<r>/seeded/seed<s>/snapshot-<step>.pt."""
    root = runs_dir(params)
    runs: dict[Path, TrainSettings] = {}
    serves: dict[str, list[str]] = {}
    initial: list[TrainSettings] = []
    representations = []
    for replicate in range(start, params.replicates):
        seeds = params.seeds(replicate)
        seeded = _seeded_runs(params, replicate, root) if params.catn_models == "snapshots" else {}
        for variant in params.variants:
            if variant.trained and variant.spec.concatenated and seeded:
                step = params.iterations_for(variant)
                members = [seeded[index] for index in range(variant.n)]
                for run in members:
                    runs[Path(run.output_dir)] = run
                    serves.setdefault(run.output_dir, []).append(f"{variant.name} at {step}")
                representations.append(
                    _representation(
                        variant,
                        replicate,
                        step,
                        tuple(RunFolder(Path(run.output_dir)).snapshot(step) for run in members),
                        identities=tuple(identity(run, root, step) for run in members),
                    )
                )
                continue
            if variant.checkpoints is not None:
                representations.append(
                    _representation(
                        variant,
                        replicate,
                        variant.iterations,
                        tuple(checkpoint_file(f) for f in variant.checkpoints[replicate]),
                        identities=tuple(
                            released_identity(variant.iterations, seeds, f)
                            for f in variant.checkpoints[replicate]
                        ),
                    )
                )
                continue
            tasks = (
                [params.tasks[[t.name for t in params.tasks].index(name)] for name in variant.tasks]
                if variant.tasks
                else [None]
            )
            for task in tasks:
                label = variant.name if task is None else f"{variant.name}-{task.name}"
                folders = [
                    root / f"rep{replicate}" / label / f"seed{seed}" for seed in seeds[: variant.n]
                ]
                if any(escapes(root, folder) for folder in folders):
                    raise ParameterError(f"variants: {label} would write outside {root}")
                trainings = [
                    params.run_config(variant, seed, str(folder), task)
                    for seed, folder in zip(seeds[: variant.n], folders, strict=True)
                ]
                if variant.initialised:
                    initial += trainings
                    checkpoints = tuple(RunFolder(folder).initial for folder in folders)
                    iterations = None
                    expected = tuple(
                        identity(settings, root, None) | {"run": UNTRAINED_FOLDER}
                        for settings in trainings
                    )
                else:
                    runs.update(zip(folders, trainings, strict=True))
                    checkpoints = tuple(RunFolder(folder).checkpoint for folder in folders)
                    iterations = trainings[0].iterations
                    for settings in trainings:
                        shown = value_text("variant", label)  # 'direct (shape)'
                        serves[settings.output_dir] = [f"{shown} at {iterations}"]
                    expected = tuple(identity(settings, root, iterations) for settings in trainings)
                representations.append(
                    _representation(variant, replicate, iterations, checkpoints, task, expected)
                )
    return Plan(list(runs.values()), initial, representations, serves)


def merge_runs(trainings: list[TrainSettings]) -> list[TrainSettings]:
    """Runs of several experiments that share a folder (notebook 04's cells of one world under
    `catn_models: snapshots`) as one run per folder: trained to the longest of their iterations,
    with the union of their snapshot steps and a snapshot at each shorter one's last step. With
    step_hint fixed a run's steps do not depend on where it stops, so that snapshot is the model
    the shorter run would end with. Raises ParameterError naming the folder and the settings
    when runs sharing a folder differ otherwise (step_hint unset: their iterations)."""
    by_folder: dict[str, list[TrainSettings]] = {}
    for run in trainings:
        by_folder.setdefault(run.output_dir, []).append(run)
    merged = []
    for folder, runs in by_folder.items():
        longest = max(runs, key=lambda run: run.iterations)
        differing = sorted(
            {key for run in runs for key in longest.differing_settings(run.model_dump())}
        )
        if differing:
            raise ParameterError(
                f"{shown(folder)}: runs planned into this folder differ in "
                f"{', '.join(differing)}; give them one train.step_hint (and the same settings)"
            )
        steps = {step for run in runs for step in run.snapshot_steps} | {
            run.iterations for run in runs if run.iterations < longest.iterations
        }
        merged.append(TrainSettings(**longest.model_dump() | {"snapshot_steps": sorted(steps)}))
    return merged


def read_from(rep: Representation, runs: list[TrainSettings]) -> Representation:
    """`rep` as read from `runs` (merged by `merge_runs`): a model whose run folder now trains
    past its last step is read from that run's snapshot at the step, not its final checkpoint."""
    length = {Path(run.output_dir): run.iterations for run in runs}
    steps = rep.iterations_per_model
    files = tuple(
        RunFolder(path.parent).snapshot(steps)
        if path.name == RunFolder.CHECKPOINT
        and steps is not None
        and length.get(path.parent, 0) > steps
        else path
        for path in rep.checkpoints
    )
    return replace(rep, checkpoints=files)


def run_table(experiment: Plan) -> pl.DataFrame:
    """The plan's runs as notebook 03 lists them: each run's folder (from the repository root
    where it lies under it), seed, iterations, warmup horizon (step_hint; empty: its own
    iterations), width, which variant each serves at which step, and its status read from its
    folder when the table is made ('finished' or 'to train'): notebook 03 shows the table once,
    after training, so a status is never the one from before it."""
    return pl.DataFrame(
        [
            {
                "run": shown(settings.output_dir),
                "seed": settings.seed,
                "iterations": settings.iterations,
                "step_hint": settings.step_hint,
                "channel_width": settings.width,
                "serves": ", ".join(experiment.serves.get(settings.output_dir, [])),
                "status": "finished" if is_finished(settings) else "to train",
            }
            for settings in experiment.trainings
        ],
        schema={
            "run": pl.String,
            "seed": pl.Int64,
            "iterations": pl.Int64,
            "step_hint": pl.Int64,
            "channel_width": pl.Float64,
            "serves": pl.String,
            "status": pl.String,
        },
    )


#: the run folder an untrained network's file records (its own folder would differ per copy)
UNTRAINED_FOLDER = "untrained"


def initialise(trainings: list[TrainSettings]) -> int:
    """Write the untrained networks of random-init variants as kit.train would start them (same
    seed, same architecture), in the kit's checkpoint format with their hash recorded; returns
    how many were written. A file is kept only while it verifies and was made with the same
    settings: a stale or corrupt one (another width, say) is written again, never probed."""
    from kit.train.network import write_untrained  # imports torch: where used (docstring)

    written = 0
    for settings in trainings:
        path = RunFolder.of(settings).initial
        if _initial_is_current(path, settings):
            continue
        # the same bytes wherever it is written (no run folder inside), so that the feature
        # cache, keyed by contents, shares the features of every copy of one untrained network
        recorded = settings.model_copy(update={"output_dir": UNTRAINED_FOLDER}).model_dump()
        write_untrained(path, settings, recorded)
        written += 1
    return written


def _initial_is_current(path: Path, settings: TrainSettings) -> bool:
    """Whether an untrained network's file exists, matches its recorded hash and was made with
    `settings` (those that shape the network)."""
    if not path.exists() or not files.sidecar(path).exists():
        return False
    from kit import models  # imports torch: where used (docstring)

    try:
        saved = models.read_checkpoint(path)
    except models.CheckpointError:
        return False
    return not settings.differing_settings(saved.get("config", {}))


def changed_runs(trainings: list[TrainSettings]) -> list[str]:
    """Run folders that already hold a run with other settings, and the settings that differ
    (a run extended to more iterations with the same step_hint is the same run), or that have
    trained past snapshot steps now asked for without writing them."""
    from kit.train.checkpoint import missing_snapshots  # imports torch: where used (docstring)

    changed = []
    for settings in trainings:
        folder = RunFolder.of(settings)
        recorded = folder.read_config()
        if recorded is not None:
            differing = settings.differing_settings(recorded)
            missing = missing_snapshots(
                settings, folder.path, min(recorded.get("iterations", 0), settings.iterations)
            )
            if differing:
                changed.append(f"{folder.path} ({', '.join(differing)})")
            elif missing and folder.finished_through(1):  # finished, at any step
                steps = ", ".join(map(str, missing))
                changed.append(f"{folder.path} (snapshot_steps: {steps} passed without them)")
    return changed


def refuse_changed_runs(trainings: list[TrainSettings]) -> None:
    changed = changed_runs(trainings)
    if changed:
        raise ParameterError(
            f"runs with other settings than these parameters in "
            f"{counted(len(changed), 'run folder')}: "
            + "; ".join(changed[:5])
            + ("; ..." if len(changed) > 5 else "")
            + ". Keep them by choosing another run_root (e.g. --set run_root=time_concat_v2), "
            "or delete those folders to retrain them."
        )


def launch(trainings: list[TrainSettings], params: TimecatSettings, wait: bool = True) -> list[str]:
    """Train every unfinished run (finished ones are skipped) with kit.launch; returns what was
    skipped. A folder holding a run with other settings is refused before anything starts, never
    reused; runs that failed are named with their logs."""
    return launch_for(trainings, [params], runs_dir(params), wait)


def launch_for(
    trainings: list[TrainSettings],
    experiments: list[TimecatSettings],
    folder: Path,
    wait: bool = True,
    scope: str = "",
) -> list[str]:
    """`launch` for the runs of several experiments (notebook 04's cells, `scope` naming them
    in the stage line) in one launch of the first one's launch settings, logs in `folder`: each
    experiment's task data is checked before anything trains."""
    refuse_changed_runs(trainings)
    finished = [is_finished(settings) for settings in trainings]  # each DONE marker read once
    skipped = [
        str(settings.output_dir) for settings, done in zip(trainings, finished, strict=True) if done
    ]
    pending = [settings for settings, done in zip(trainings, finished, strict=True) if not done]
    stage = Stage(
        "training",
        len(pending),
        "run",
        f"{scope}reused {counted(len(skipped), 'finished run')}, training {len(pending)}",
    )
    if pending:
        for params in experiments:
            check_task_data(params)
        kit_launch.launch(pending, experiments[0].launch, folder, wait).check()
    stage.finish(f"{scope}reused {len(skipped)}, trained {len(pending)}")
    return skipped


def check_task_data(params: TimecatSettings) -> None:
    """Open every probe task's data that is read from files as a run opens its training data
    (kit.data.pipeline.datasets_for: both splits, their class counts and, with
    data.verify_images, every image decoded), so that a corrupt image is found before anything
    trains, not by feature extraction afterwards. Data a run trains on as its pretraining data
    is left to the trainer, which checks it itself. Raises one DataError listing every problem,
    each naming its path."""
    trained = None if params.train is None else (params.train.data, params.train.num_classes)
    from kit.data import pipeline  # imports torch: where used (docstring)

    checked: list[tuple[DataSettings, int]] = []
    problems = []
    for task in params.tasks:
        task_data = params.task_data(task)
        if (
            not kinds.get(task_data[0].kind).reads_disk
            or task_data == trained
            or task_data in checked
        ):
            continue
        checked.append(task_data)
        try:
            pipeline.datasets_for(*task_data)
        except DataError as error:
            problems.append(f"tasks: {task.name}: {error}")
    if problems:
        raise DataError("\n".join(problems))
