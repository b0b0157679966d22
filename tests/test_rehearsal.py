"""The dress rehearsal: the shipped paper-8xh100 and paper-checkpoints parameter files run end to
end on a CPU, shrunk by tests/rehearsal/ (sizes only), over `python -m kit fixtures` datasets.

paper-8xh100 is checked, planned as Slurm jobs, then run as a user runs it (`kit run 03`): five
seeded ResNet-50 pretraining runs (its `catn_models: snapshots`) trained in turn by a torchrun of
two gloo ranks, feature extraction from their snapshots as a torchrun job, the fast probe in the
kernel. These are the launched steps `kit run` takes for that profile; the probe step as a job
of its own is what a cluster's chain submits (`kit launch plan` exports it here;
tests/test_timecat_jobs.py runs the step). Its snapshots, saved as the authors' files are
(AlgoPerf's names) and packed as their archive, are then what paper-checkpoints downloads from a
local HTTP server (`kit download checkpoints`, verified and unpacked) and probes with the authors'
probe: the diagnostics' features extracted by a torchrun job, the nine probes of two processes
(ImageNet-1k's concatenations, iNat18's) run in turn by one torchrun of two ranks and the eleven
of one process in the kernel, every setup of `probes.faithful.setups` among them; its verdicts
and tables are read, and the probing step run again in this process reads every probe back.
`kit check`, `kit launch plan` and `kit download` run in the test's own process (they start no
kernel and no job); each `kit run` runs in a process of its own, as a user's does.
Together 230 s of CPU (user + sys of `pytest -m rehearsal -n 0 tests/test_rehearsal.py`; 4.7 min
wall while two other jobs shared the cores, 2026-12-07) on a 2-core KVM (AMD EPYC family 25 model
17, Zen 4); select them with `-m rehearsal`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import torch
import yaml
from download_server import ARCHIVE, UNPACKED, as_released, serve, tar_gz

from kit.cli.main import main as kit_main
from kit.data import pipeline
from kit.data.fixtures import write_paper_data
from kit.data.settings import DataSettings
from kit.experiments.timecat import comparisons, jobs, layouts, measure, paper, planning
from kit.experiments.timecat.released import released_files
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.experiments.timecat.settings import TimecatSettings
from kit.files.paths import REPO_ROOT, importable_environment
from kit.params import params
from kit.probes.selection import RULES
from kit.probes.settings import PAPER_WEIGHT_DECAYS

pytestmark = pytest.mark.rehearsal

REHEARSAL = REPO_ROOT / "tests" / "rehearsal"
SIZES, BUDGETS = REHEARSAL / "sizes.yaml", REHEARSAL / "budgets.yaml"
#: the files shrinking each profile
FILES = {"paper-8xh100": [SIZES, BUDGETS], "paper-checkpoints": [SIZES]}
#: the keys the rehearsal may change: sizes, and what a machine without a GPU forces
SIZE_KEYS = frozenset(
    {
        "width",
        "batch_size",
        "micro_batch",
        "image_size",
        "iterations",
        "bn_recalibration_batches",
        "eval_every",
        "checkpoint_every",
        "log_every",
        "num_workers",
        "workers",
        "feature_workers",
        "feature_batch_size",
        "epochs",
        "processes",
        "bn_batch",
        "nproc_per_node",
    }
)
MACHINE_KEYS = frozenset({"device", "compile"})
VARIANTS = {
    "cat1": [2],
    "cat2": [2, 550],
    "cat4": [2, 550, 23, 477],
    "cat5": [2, 550, 23, 477, 8529],
}
TASKS = ["ImageNet-1k", "iNat18", "CIFAR-100", "CIFAR-10"]


def flat(values: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested parameters by dotted path, list items by index."""
    if isinstance(values, dict):
        items = values.items()
    elif isinstance(values, list):
        items = enumerate(values)
    else:
        return {prefix: values}
    return {
        path: leaf for key, value in items for path, leaf in flat(value, f"{prefix}{key}.").items()
    } or {prefix: values}


def changed_keys(profile: str, files: list[Path]) -> list[str]:
    """The dotted paths whose values `files` change over the profile as shipped (the output
    folder left out: the rehearsal sets it on the command line)."""
    shipped, _ = params.resolve_layers(jobs.NOTEBOOK, profile)
    shrunk, _ = params.resolve_layers(jobs.NOTEBOOK, profile, files)
    before, after = flat(shipped), flat(shrunk)
    return sorted(
        key.rstrip(".")
        for key in before.keys() | after.keys()
        if before.get(key, KeyError) != after.get(key, KeyError)
    )


def not_sizes(keys: list[str]) -> list[str]:
    """The keys whose last name (list indices aside) is neither a size nor a machine setting."""
    names = {key: [part for part in key.split(".") if not part.isdigit()][-1] for key in keys}
    return [key for key, name in names.items() if name not in SIZE_KEYS | MACHINE_KEYS]


def augmentations(values: dict[str, Any]) -> list[str]:
    """The augmentation each data section of merged parameters resolves to (pretraining, tasks)."""
    sections = [values["train"]["data"], *(task["data"] for task in values["tasks"])]
    return [pipeline.resolved_augment(DataSettings(**data)) for data in sections]


@pytest.mark.parametrize("profile", FILES)
def test_the_rehearsal_changes_only_sizes(profile: str) -> None:
    changed = changed_keys(profile, FILES[profile])
    assert changed and not not_sizes(changed), not_sizes(changed)
    assert "launch.nproc_per_node" in changed and "train.compile" in changed
    # a size that switches a code path: below 64 px images would be augmented another way
    shipped, _ = params.resolve_layers(jobs.NOTEBOOK, profile)
    shrunk, _ = params.resolve_layers(jobs.NOTEBOOK, profile, FILES[profile])
    assert augmentations(shrunk) == augmentations(shipped) == ["algoperf"] * 5


def test_a_rehearsal_changing_more_than_sizes_is_caught(tmp_path: Path) -> None:
    drifted = tmp_path / "drifted.yaml"
    drifted.write_text(
        yaml.safe_dump(
            yaml.safe_load(SIZES.read_text())
            | {"probe_kind": "lbfgs", "launch": {"backend": "local", "nproc_per_node": 2}}
        )
    )
    assert not_sizes(changed_keys("paper-8xh100", [drifted])) == ["launch.backend", "probe_kind"]
    dropped = tmp_path / "dropped.yaml"
    dropped.write_text(
        yaml.safe_dump({"variants": yaml.safe_load(BUDGETS.read_text())["variants"][:3]})
    )
    assert "variants.3.name" in not_sizes(changed_keys("paper-8xh100", [dropped]))


def test_kit_fixtures_lets_the_paper_profiles_be_checked_and_planned_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    data, out = tmp_path / "data", ["--set", f"output_dir={tmp_path / 'out'}"]
    monkeypatch.setenv("TIMECAT_DATA", str(data))
    assert kit_main(["check", "03", "--profile", "paper-8xh100", *out]) == 2
    assert f"{data / 'imagenet'}" in capsys.readouterr().err
    assert kit_main(["fixtures", str(data)]) == 0
    assert sorted(p.name for p in data.iterdir()) == [
        "checkpoints",
        "cifar10",
        "cifar100",
        "imagenet",
        "imagenet-shifts",
        "inat18",
    ]
    assert len(list((data / "imagenet" / "val").iterdir())) == 1000
    capsys.readouterr()
    # parameters, data and checkpoints now pass; what is left is this machine (no GPU, too
    # little disk)
    monkeypatch.setenv("TIMECAT_CHECKPOINTS", str(data / "checkpoints"))
    for profile in FILES:
        assert kit_main(["check", "03", "--profile", profile, *out]) == 2
        problems = [line.removeprefix("error: ") for line in capsys.readouterr().err.splitlines()]
        assert problems and all(line.startswith("this machine: ") for line in problems), problems
    # a stand-in, with its hash, at every file the profile lists (their config's layout)
    written = [p for p in (data / "checkpoints").rglob("checkpoint_run*") if p.suffix != ".sha256"]
    assert sorted(p.relative_to(data / "checkpoints") for p in written) == sorted(
        Path(relative) for relative in released_files()
    )
    assert len(written) == sum(len(seeds) for seeds in VARIANTS.values())
    assert all(Path(f"{path}.sha256").exists() for path in written)
    assert (
        kit_main(
            ["launch", "plan", "--profile", "paper-8xh100", *out, "--out", str(tmp_path / "export")]
        )
        == 0
    )
    assert "#SBATCH --array=0-4" in (tmp_path / "export" / "train.sbatch").read_text()


def test_the_command_line_starts_without_importing_torch() -> None:
    """`python -m kit` imports neither torch nor torchvision to start (the kernel and the jobs
    `kit run` launches import them): importing them costs 5-10 s of CPU."""
    code = "import sys, kit.__main__; print(sorted({'torch', 'torchvision'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=importable_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """TIMECAT_DATA holding `kit fixtures` datasets, one thread per process (2 ranks, 2 cores)."""
    data = write_paper_data(tmp_path_factory.mktemp("data"))
    return importable_environment() | {
        "TIMECAT_DATA": str(data["imagenet"].parent),
        "OMP_NUM_THREADS": "1",
    }


def kit(environment: dict[str, str], *arguments: str) -> str:
    """Run `python -m kit ARGUMENTS` as a user would; what it said, after asserting it passed."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kit", *map(str, arguments)],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, (arguments, done.stdout[-3000:], done.stderr[-3000:])
    elapsed = time.perf_counter() - start
    print(f"kit {' '.join(map(str, arguments[:2]))}: {elapsed:.0f} s")
    return done.stdout + done.stderr


def kit_here(environment: dict[str, str], *arguments: str) -> None:
    """`python -m kit ARGUMENTS` in this process under `environment`, asserting it passed: for
    `kit check` and `kit launch plan`, which start no kernel or job, so that the rehearsal does
    not pay a second interpreter's imports of torch and the notebook tools for each (`kit run`,
    which does start them, runs in a process of its own)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        assert kit_main(list(map(str, arguments))) == 0, arguments


def profile_arguments(profile: str, out: Path) -> list[str]:
    return [
        "--profile",
        profile,
        *[f"-f{file}" for file in FILES[profile]],
        "--set",
        f"output_dir={out}",
    ]


def check_results(out: Path, variants: list[str] | None = None) -> pl.DataFrame:
    """The results table: every variant (of VARIANTS by default) on every task under every rule,
    accuracies in [0, 1]."""
    variants = variants or list(VARIANTS)
    results = pl.read_parquet(out / TIME_CONCAT.results)
    assert results.height == len(variants) * len(TASKS) * len(RULES)
    assert set(results["variant"]) == set(variants) and set(results["task"]) == set(TASKS)
    assert results["top1"].is_between(0, 1).all()
    return results


@pytest.fixture(scope="module")
def paper_8xh100(environment: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """paper-8xh100 checked, planned and run as a user does; its output folder."""
    out = tmp_path_factory.mktemp("paper-8xh100")
    arguments = profile_arguments("paper-8xh100", out)
    kit_here(environment, "check", "03", *arguments)
    kit_here(environment, "launch", "plan", *arguments, "--out", out / "export")
    kit(environment, "run", "03", *arguments)
    return out


#: the rehearsal's step of each variant's snapshots (tests/rehearsal/budgets.yaml)
STEPS = {"cat1": 9, "cat2": 4, "cat4": 2, "cat5": 2}
#: the variant reading each released step (paper Table 3: cat1 at 450k, catN at 400k in all)
READ_AT = {"full": "cat1", "200k": "cat2", "100k": "cat4", "80k": "cat5"}


def test_paper_8xh100_trains_extracts_and_probes_with_two_ranks(paper_8xh100: Path) -> None:
    runs = paper_8xh100 / "time_concat"
    for seed, (iterations, steps) in {
        2: (9, [2, 4, 9]),
        550: (4, [2, 4]),
        23: (2, [2]),
        477: (2, [2]),
        8529: (2, [2]),
    }.items():
        run = runs / "rep0" / "seeded" / f"seed{seed}"
        assert yaml.safe_load((run / "DONE").read_text()) == {"step": iterations, "ranks": 2}
        assert sorted(p.name for p in run.glob("snapshot-*.pt")) == sorted(
            f"snapshot-{step}.pt" for step in steps
        )
    assert sorted(p.name for p in (runs / "rep0").iterdir()) == ["seeded"]
    extraction = (runs / "logs" / "extract.log").read_text()
    assert "rank 0/2 on cpu" in extraction and "rank 1/2 on cpu" in extraction
    check_results(paper_8xh100)
    assert (paper_8xh100 / TIME_CONCAT.summary).exists()
    for script in ("train.sbatch", "extract.sbatch", "probe.sbatch", "submit.sh"):
        assert (paper_8xh100 / "export" / script).exists(), script


def released_state(paper_8xh100: Path, step: str, run: int) -> dict[str, torch.Tensor]:
    """The weights standing for run `run` of the released `step`: the rehearsal's seed of that
    run at its step of the variant reading the file (its last snapshot, for the files no variant
    reads: the full step's runs 1-4)."""
    trained = paper_8xh100 / "time_concat" / "rep0" / "seeded" / f"seed{VARIANTS['cat5'][run]}"
    saved = [int(path.stem.removeprefix("snapshot-")) for path in trained.glob("snapshot-*.pt")]
    at = max(saved_step for saved_step in saved if saved_step <= STEPS[READ_AT[step]])
    return torch.load(trained / f"snapshot-{at}.pt", weights_only=True)["model"]


@pytest.fixture(scope="module")
def paper_checkpoints(
    paper_8xh100: Path, environment: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """paper-checkpoints as a user runs it on the release: `kit download checkpoints` of the
    authors' archive served by a local HTTP server (every file of it in their format, made of
    the rehearsal's trained snapshots), checked, then run; its output folder and what it said."""
    root = tmp_path_factory.mktemp("paper-checkpoints")
    archive = tar_gz(
        {
            UNPACKED.names(*key)[0]: as_released(released_state(paper_8xh100, *key))
            for key in layouts.every_key()
        }
    )
    for base, served in serve():
        served.files[ARCHIVE] = archive
        kit_here({}, "download", "checkpoints", "--to", root / "release", "--url", base + ARCHIVE)
    environment = environment | {"TIMECAT_CHECKPOINTS": str(root / "release")}
    out = root / "out"
    kit_here(environment, "check", "03", *profile_arguments("paper-checkpoints", out))
    return out, kit(environment, "run", "03", *profile_arguments("paper-checkpoints", out))


def test_paper_checkpoints_probes_a_downloaded_release_with_the_authors_probe(
    paper_checkpoints: tuple[Path, str],
) -> None:
    out, said = paper_checkpoints
    assert "unverified" not in said  # the download recorded every file's hash
    # the released variants and the random-init control, untrained networks the run wrote
    variants = [*VARIANTS, "random5"]
    results = check_results(out, variants)
    assert (results.group_by("variant", "task", "rule").len()["len"] == 1).all()
    assert results["train_top1"].is_between(0, 1).all()
    assert results.filter(pl.col("task") == "CIFAR-100")["top5"].is_not_null().all()
    assert results.filter(pl.col("task") == "CIFAR-10")["top5"].is_null().all()
    probes = out / "time_concat" / "faithful"
    logs = [json.loads(path.read_text()) for path in probes.rglob("finished.json")]
    assert len(logs) == len(variants) * len(TASKS)
    # each task probed with the authors' grid of its dataset
    for task, grid in (("ImageNet-1k", "imagenet"), ("iNat18", "inat18"), ("CIFAR-100", "cifar")):
        history = pl.read_csv(probes / task / "rep0" / "cat2" / "history.csv")
        assert history["weight_decay"].to_list() == list(PAPER_WEIGHT_DECAYS[grid])
    # grouped by process count: probes of one process ran in the kernel, the others under one
    # torchrun of two ranks, its rank 0 naming each probe as it starts
    log = (probes / "probe-2.log").read_text()
    shared = [
        path.parent
        for path in probes.rglob("finished.json")
        if not (path.parent.parts[-3] == "ImageNet-1k" and path.parent.name == "cat1")
        and path.parent.parts[-3] not in ("CIFAR-100", "CIFAR-10")
    ]
    assert all(f"/{len(shared)}: {path}\n" in log for path in shared)
    assert [path.parent for path in probes.rglob("probe-*.log")] == [probes]
    diagnostics = pl.read_parquet(out / TIME_CONCAT.diagnostics)
    assert diagnostics.height == len(variants) * len(TASKS)
    width = {v: diagnostics.filter(pl.col("variant") == v)["features"].unique() for v in VARIANTS}
    assert width["cat5"].to_list() == [5 * width["cat1"].item()]


@pytest.fixture()
def settings(
    paper_checkpoints: tuple[Path, str],
    environment: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> TimecatSettings:
    """The rehearsal's paper-checkpoints settings, loaded in this process."""
    out, _ = paper_checkpoints
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TIMECAT_CHECKPOINTS", str(out.parent / "release"))
    arguments = [f"output_dir={out}"]
    return jobs.load_settings("paper-checkpoints", FILES["paper-checkpoints"], arguments)


def test_paper_checkpoints_states_verdicts_and_sets_table_3_beside_its_numbers(
    paper_checkpoints: tuple[Path, str], settings: TimecatSettings
) -> None:
    out, _ = paper_checkpoints
    results = pl.read_parquet(out / TIME_CONCAT.results)
    for rule in RULES:
        table = comparisons.table3(results, rule)
        assert table["variant"].to_list() == [*VARIANTS, "random5"]
        for task in TASKS:
            assert table[f"{task} mean"].is_between(0, 100).all()
        assert comparisons.gains(results, rule, settings.baseline).height == 4 * len(TASKS)
        side = paper.paper_vs_kit(results, rule, settings.paper_columns)
        per_dataset = side.filter(
            pl.col("kit's task (stands for it)").is_in(TASKS)
            & ~pl.col("measure").is_in([paper.IN_DISTRIBUTION, paper.TRANSFER, paper.GAIN])
        )
        assert per_dataset["kit mean"].is_not_null().sum() == len(VARIANTS) * len(TASKS)
        # a task not run leaves the paper's number without the kit's beside it
        one = paper.paper_vs_kit(
            results.filter(pl.col("task") == "CIFAR-10"), rule, settings.paper_columns
        )
        assert one.filter(pl.col("measure") == "iNat18, top-1 %")["kit mean"].is_null().all()
    verdicts = pl.read_parquet(out / TIME_CONCAT.verdicts)
    control = verdicts.filter(pl.col("condition") == "cat5 vs random5").row(0, named=True)
    # one replicate: no spread is known, so nothing is decided
    assert control["against"] == "random5" and control["judgement"] == "inconclusive"
    assert "detectable" in verdicts.columns
    vs_paper = pl.read_parquet(out / TIME_CONCAT.vs_paper)
    cifar = vs_paper.filter(pl.col("measure") == "CIFAR-10, top-1 %")
    assert cifar["kit mean"].is_not_null().all() and cifar["kit − paper"].is_not_null().all()
    assert set(vs_paper["variant"]) == set(VARIANTS)


def test_a_finished_probe_is_read_back_not_run_again(
    paper_checkpoints: tuple[Path, str], settings: TimecatSettings
) -> None:
    out, _ = paper_checkpoints
    results = pl.read_parquet(out / TIME_CONCAT.results)
    experiment = planning.plan(settings)
    assert not experiment.trainings
    marked = out / "time_concat" / "faithful" / "CIFAR-10" / "rep0" / "cat4" / "selected.csv"
    kept = marked.read_bytes()
    pl.read_csv(marked).with_columns(pl.lit(0.123456).alias("top1")).write_csv(marked)
    try:
        start = time.perf_counter()
        again = measure.probe_all(experiment.representations, settings, diagnose=False).results
        print(f"re-run with every probe finished: {time.perf_counter() - start:.1f} s")
    finally:
        marked.write_bytes(kept)
    mark = again.filter((pl.col("variant") == "cat4") & (pl.col("task") == "CIFAR-10"))
    assert mark["top1"].to_list() == [0.123456] * len(RULES)
    rest = pl.col("variant") != "cat4"
    assert again.filter(rest).equals(results.filter(rest))
