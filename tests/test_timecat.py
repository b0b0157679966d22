"""Notebook 03 and kit.timecat: plans, profiles that resolve to what they promise, variants,
resumption and run identity, the results tables."""

from __future__ import annotations

import base64
import io
import json
import os
import sys
from pathlib import Path

import nbformat
import numpy as np
import polars as pl
import pytest
import torch
from PIL import Image

from kit import models
from kit.cli import runner
from kit.cli.main import main as kit_main
from kit.data import pipeline as data
from kit.data.fixtures import write_paper_data
from kit.data.kinds.imagefolder import image_folder
from kit.experiments.timecat import comparisons, figures, planning
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.experiments.timecat.settings import SCALE_TRAIN_KEYS, TimecatSettings
from kit.files import paths
from kit.launch.runs import is_finished
from kit.params import params
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings

NOTEBOOK = "03_time_concat"
GPU_PROFILES = ("gpu-1x", "paper-8xh100", "paper-checkpoints")


def planned(profile: str, **overrides) -> tuple[TimecatSettings, dict[str, str]]:
    loaded, sources = params.load(NOTEBOOK, profile, overrides=overrides or None)
    assert isinstance(loaded, TimecatSettings)
    return loaded, sources


def planned_params(profile: str, **overrides) -> TimecatSettings:
    return planned(profile, **overrides)[0]


#: the folder of the authors' checkpoint archive once unpacked, and the step folder catN reads
AUTHORS = "resnet50_sfadamw_imagenet1k_supervised"
RELEASED_STEPS = {1: "full", 2: "200", 4: "100", 5: "80"}
#: what each released file records of itself: catN's iterations, and run<i>'s seed
RELEASED_ITERATIONS = {1: 450000, 2: 200000, 4: 100000, 5: 80000}
RELEASED_SEEDS = [2, 550, 23, 477, 8529]


def released_file(root: Path, n: int, run: int, suffix: str = ".pth") -> Path:
    """Model `run` of catN in the authors' archive (their config's .pth, or .pth.tar as their
    README draws it)."""
    return root / AUTHORS / f"checkpoints_step{RELEASED_STEPS[n]}" / f"checkpoint_run{run}{suffix}"


def write_released_files(root: Path) -> None:
    """Tiny checkpoints at every file paper-checkpoints reads, in the authors' layout: both
    suffixes occur (cat4's files are .pth.tar)."""
    for n in RELEASED_STEPS:
        for run in range(n):
            tiny_released(released_file(root, n, run, ".pth.tar" if n == 4 else ".pth"), n, run)


def tiny_released(path: Path, n: int, run: int, state_width: float = 0.125) -> None:
    """A tiny stand-in for catN's run<i> file, recording its iterations and seed."""
    tiny_checkpoint(path, state_width, RELEASED_SEEDS[run], RELEASED_ITERATIONS[n])


@pytest.fixture(scope="module")
def paper_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The datasets the paper and GPU profiles read, tiny (`kit fixtures`): a few thousand
    JPEGs, written once for the module's tests, which only read them."""
    root = tmp_path_factory.mktemp("paper-data")
    write_paper_data(root)
    return root


@pytest.fixture()
def fake_data(paper_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`TIMECAT_DATA` at the module's datasets (`paper_data`), and the released checkpoints'
    file names in this test's own folder (tests rename and delete them); returns that folder."""
    write_released_files(tmp_path / "released")
    monkeypatch.setenv("TIMECAT_DATA", str(paper_data))
    monkeypatch.setenv("TIMECAT_CHECKPOINTS", str(tmp_path / "released"))
    return tmp_path


def test_plan_splits_the_budget_and_names_folders_by_variant_and_seed() -> None:
    loaded = planned_params("ci")
    experiment = planning.plan(loaded)
    for rep in experiment.representations:
        assert len(rep.checkpoints) == rep.n
        assert all(f"rep{rep.replicate}" in str(p) for p in rep.checkpoints)
        if rep.kind == "time-concat":
            assert rep.n * rep.iterations_per_model == loaded.total_iterations
            assert all(p.parent.parent.name == rep.variant for p in rep.checkpoints)
    direct = [r for r in experiment.representations if r.kind == "direct"]
    assert {r.task for r in direct} == {"shape"}
    assert {r.iterations_per_model for r in direct} == {loaded.total_iterations}
    random = [r for r in experiment.representations if r.kind == "random-init"]
    assert len(experiment.initial) == sum(r.n for r in random) > 0
    folders = [t.output_dir for t in experiment.trainings]
    assert len(set(folders)) == len(folders)  # one folder per run
    assert {t.seed for t in experiment.trainings} == {0, 1, 1000, 1001}


def test_the_world_figure_shows_each_component_and_task_class_by_class() -> None:
    """One row per pretraining component (the redundant one named so, the grey one without
    colour) and per probe task other than the mixture, one image per class, each the world's
    own render of an image of that class and component, enlarged without smoothing."""
    loaded = planned_params("cpu")
    samples = figures.world_samples(loaded, classes=4).data
    assert list(dict.fromkeys(samples["source"])) == [
        "pretraining, 60%: colour + shape (redundant)",
        "pretraining, 40%: texture, no colour",
        "task shape (in-mixture)",
        "task texture (in-mixture)",
        "task position (unseen)",
    ]
    assert (
        samples.group_by("source").agg(pl.col("class").sort())["class"].to_list()
        == [[0, 1, 2, 3]] * 5
    )
    size = loaded.train.data.image_size
    scale = figures.SAMPLE_PIXELS // size
    for url in samples["url"]:
        png = base64.b64decode(url.removeprefix("data:image/png;base64,"))
        image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        assert image.shape == (size * scale, size * scale, 3)
        # each of the world's pixels is a block of scale x scale equal pixels
        assert (image == image[::scale, ::scale].repeat(scale, 0).repeat(scale, 1)).all()
        assert image.std() > 10  # an object and noise, not a blank


def test_the_plan_table_names_runs_from_the_repository_root(tmp_path: Path) -> None:
    """Run folders under the repository are listed from its root (short, the same on every
    machine); a folder elsewhere keeps its absolute path."""
    inside = planning.run_table(planning.plan(planned_params("ci")))
    assert inside.height > 0 and inside["run"].str.starts_with("outputs/ci/time_concat/rep0/").any()
    assert not inside["run"].str.starts_with("/").any()
    outside = planning.run_table(planning.plan(planned_params("ci", output_dir=str(tmp_path))))
    assert outside["run"].str.starts_with(f"{tmp_path}/time_concat/rep").all()
    assert outside.drop("run").equals(inside.drop("run"))
    assert paths.shown(paths.REPO_ROOT / "outputs" / ".." / "docs") == "docs"
    assert paths.shown("outputs/ci") == "outputs/ci"  # relative: taken from the root
    assert paths.shown(tmp_path / "x", start=tmp_path) == "x"


def test_paper_budgets_and_seeds(fake_data: Path) -> None:
    experiment = planning.plan(planned_params("paper-8xh100"))
    budgets = {
        r.variant: (r.iterations_per_model, len(r.checkpoints)) for r in experiment.representations
    }
    assert budgets == {
        "cat1": (450_000, 1),
        "cat2": (200_000, 2),
        "cat4": (100_000, 4),
        "cat5": (80_000, 5),
    }
    assert sorted({t.seed for t in experiment.trainings}) == [2, 23, 477, 550, 8529]


@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_gpu_profiles_resolve_to_full_data_and_their_own_scale(
    fake_data: Path, profile: str
) -> None:
    """No value sized for a 2-core CPU reaches a GPU profile: probes read every training row
    (so every class), and every scale-dependent value comes from a GPU profile's own files."""
    loaded, sources = planned(profile)
    assert loaded.probe_train_rows is None
    assert loaded.device == "cuda" and loaded.feature_dtype == "float16"
    scale_keys = [
        "feature_batch_size",
        "feature_workers",
        "feature_dtype",
        "device",
        "probe",
        "launch",
    ]
    if any(v.trained for v in loaded.variants):
        assert loaded.train is not None and loaded.train.device == "cuda"
        scale_keys += [f"train.{key}" for key in SCALE_TRAIN_KEYS]
    for key in scale_keys:
        where = sources.get(key) or next(v for k, v in sources.items() if k.startswith(key))
        assert any(f"/parameters/{gpu}/" in where for gpu in GPU_PROFILES), (key, where)
    experiment = planning.plan(loaded)
    assert experiment.representations


def test_paper_checkpoints_probes_the_released_files(fake_data: Path) -> None:
    experiment = planning.plan(planned_params("paper-checkpoints"))
    assert not experiment.trainings
    *released, control = experiment.representations
    assert [len(r.checkpoints) for r in released] == [1, 2, 4, 5]
    # the random-init control: five untrained networks of the released architecture, seeded
    # with the released runs' seeds, written once
    assert (control.variant, control.kind, control.n) == ("random5", "random-init", 5)
    assert [(s.model, s.num_classes, s.seed) for s in experiment.initial] == [
        ("resnet50", 1000, seed) for seed in RELEASED_SEEDS
    ]
    root = fake_data / "released"
    assert [list(r.checkpoints) for r in released] == [
        [released_file(root, n, run, ".pth.tar" if n == 4 else ".pth") for run in range(n)]
        for n in RELEASED_STEPS
    ]  # read as the archive names them, .pth.tar too
    bad = released_file(root, 5, 4)
    bad.unlink()
    where = f"paper-checkpoints/{NOTEBOOK}.yaml: parameter variants: "
    with pytest.raises(
        params.ParameterError,
        match=where + r"1 checkpoint file not found: .*checkpoints_80k/checkpoint_run4.pth: "
        r"run 4 at 80k \(80,000 iterations\), tried .*/\{resnet50_sfadamw_imagenet1k_supervised,"
        r"ckpt_resnet50_sfadamw_imagenet1k_supervised,resnet50_sfadamw\}/\{checkpoints_80k,"
        r"checkpoints_step80\}/checkpoint_run4.pth\{,.tar\}",
    ):
        checked("paper-checkpoints")
    tiny_released(bad, 5, 4)  # back, then broken
    bad.write_bytes(bad.read_bytes()[:1000])
    with pytest.raises(params.ParameterError, match=f"{where}{bad}: not a readable"):
        checked("paper-checkpoints")
    tiny_released(bad, 5, 4, state_width=0.25)
    with pytest.raises(params.ParameterError, match=f"{where}{bad}: does not fit"):
        checked("paper-checkpoints")
    planned_params("paper-checkpoints")  # validation reads values only: the files are kit check's


def test_a_renamed_released_file_is_refused_naming_both_runs(fake_data: Path) -> None:
    """A released file renamed to another run's name (run1's file as run0's, with its hash
    file) is refused before any compute: it records run1's seed, and the profile's entry reads
    run0 there. The plan carries the same identities to the extraction."""
    root = fake_data / "released"
    run0, run1 = released_file(root, 2, 0), released_file(root, 2, 1)
    run0.write_bytes(run1.read_bytes())
    where = f"paper-checkpoints/{NOTEBOOK}.yaml: parameter variants: "
    with pytest.raises(params.ParameterError) as refused:
        checked("paper-checkpoints")
    assert (
        f"{where}{run0}: this checkpoint records iterations 200000, seed 550, but this run "
        "expects iterations 200000, seed 2 (seed differ)"
    ) in str(refused.value)
    cat2 = planning.plan(planned_params("paper-checkpoints")).representations[1]
    assert cat2.expected() == {
        run0: {"iterations": 200000, "seed": 2},
        run1: {"iterations": 200000, "seed": 550},
    }


def test_trained_checkpoints_are_expected_to_record_their_own_run() -> None:
    """Each trained, snapshot or untrained checkpoint the plan probes is expected to record its
    run's model, width, seed, folder (relative to the runs) and step."""
    loaded = planned_params("ci")
    experiment = planning.plan(loaded)
    by_folder = {Path(run.output_dir): run for run in experiment.trainings + experiment.initial}
    for rep in experiment.representations:
        assert len(rep.identities) == len(rep.checkpoints)
        for path, expected in rep.expected().items():
            run = by_folder[path.parent]
            assert expected == {
                "model": run.model,
                "width": run.width,
                "seed": run.seed,
                "run": planning.UNTRAINED_FOLDER
                if rep.iterations_per_model is None
                else path.parent.relative_to(planning.runs_dir(loaded)).as_posix(),
                "step": rep.iterations_per_model,
            }
    wide1 = next(r for r in experiment.representations if r.variant == "wide1")
    assert wide1.identities[0]["width"] == 2 * loaded.train.width


@pytest.mark.parametrize("command", [["extract"], ["probe"], ["launch", "extract"]])
def test_a_step_run_alone_checks_the_inputs_before_computing(
    fake_data: Path, tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`kit extract`, `kit probe` and `kit launch extract` refuse a missing checkpoint as
    `kit run` does, naming the file and key, before anything is read or written."""
    released_file(fake_data / "released", 5, 4).unlink()
    out = tmp_path / "out"
    arguments = [*command, "--profile", "paper-checkpoints", "--set", f"output_dir={out}"]
    assert kit_main(arguments) == 2
    error = capsys.readouterr().err
    assert (
        f"paper-checkpoints/{NOTEBOOK}.yaml: parameter variants: 1 checkpoint file not found"
        in error
    )
    assert "checkpoints_80k/checkpoint_run4.pth: run 4 at 80k" in error and "Traceback" not in error
    assert not out.exists()


def checked(profile: str) -> None:
    """What `kit check` and `kit run` do before any compute: validate, then check the inputs."""
    runner.plan([NOTEBOOK], profile)


def test_validation_opens_no_file(fake_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Validating a profile that reads checkpoints and data roots checks values only (no file
    opened, no torch imported): what those files hold is `kit check`'s question."""
    values, sources = params.resolve_layers(NOTEBOOK, "paper-checkpoints")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"validation opened {args[:1]}")

    for opener in ("builtins.open", "io.open"):
        monkeypatch.setattr(opener, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.delitem(sys.modules, "kit.train.backbones", raising=False)
    loaded = params.validate(NOTEBOOK, values, sources)
    assert isinstance(loaded, TimecatSettings) and loaded.variants[3].checkpoints  # cat5
    assert "kit.train.backbones" not in sys.modules  # the module that opens checkpoints with torch


def tiny_checkpoint(
    path: Path, state_width: float = 0.125, seed: int = 0, iterations: int = 1
) -> None:
    """A kit checkpoint of a tiny network (its config says width 0.125)."""
    cfg = TrainSettings(
        model="resnet10",
        width=0.125,
        num_classes=3,
        seed=seed,
        batch_size=8,
        iterations=iterations,
        output_dir="-",
        data={
            "kind": "synthetic",
            "image_size": 16,
            "synthetic": {
                "num_train": 8,
                "num_eval": 8,
                "components": [{"weight": 1.0, "cues": ["colour"]}],
            },
        },
    )
    model = models.build(cfg.model, cfg.num_classes, state_width, image_size=16)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "config": cfg.model_dump()}, path)


@pytest.mark.parametrize("profile", ["gpu-1x", "paper-8xh100"])
def test_missing_data_is_refused_naming_the_file_and_path(
    tmp_path: Path, monkeypatch, profile: str
) -> None:
    monkeypatch.setenv("TIMECAT_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(params.ParameterError) as error:
        checked(profile)
    message = str(error.value)
    assert f"{profile}/{NOTEBOOK}.yaml" in message and "nowhere" in message


def test_a_profile_must_set_its_scale_keys(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("")
    (tmp_path / "mine").mkdir()
    cpu = (Path(runner.PARAMETERS_DIR) / "cpu" / f"{NOTEBOOK}.yaml").read_text()
    (tmp_path / "mine" / f"{NOTEBOOK}.yaml").write_text(
        cpu.replace("  num_workers: 0\n", "").replace("  checkpoint_every: 120\n", "")
    )
    with pytest.raises(params.ParameterError, match="train: set num_workers, checkpoint_every"):
        params.load(NOTEBOOK, "mine", parameters_dir=tmp_path)


def test_balanced_subset_covers_every_class_of_a_class_ordered_folder(tmp_path: Path) -> None:
    for c in range(5):
        folder = tmp_path / "train" / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(6 + 3 * c):  # unequal class sizes, stored class by class
            Image.new("RGB", (4, 4), (c, i, 0)).save(folder / f"{i}.png")
    listed = image_folder(tmp_path, "train")
    labels = data.labels_of(listed)
    assert list(labels) == sorted(labels)  # the first N rows would be the first classes
    chosen = data.balanced_subset(labels, 20, seed=0)
    counts = np.bincount(labels[chosen], minlength=5)
    assert counts.tolist() == [4, 4, 4, 4, 4] and len(set(chosen)) == 20
    assert (data.balanced_subset(labels, 20, seed=0) == chosen).all()
    assert not (data.balanced_subset(labels, 20, seed=1) == chosen).all()
    scarce = data.balanced_subset(labels, 40, seed=0)  # class 0 has 6 images: all of them
    assert np.bincount(labels[scarce]).tolist()[0] == 6 and len(scarce) == 40


#: ImageNet-R as an extra evaluation set, and ci's tasks with ImageNet-1k's beside them
IMAGENET_R = {"name": "ImageNet-R", "data": {"kind": "imagenet-r", "root": "r", "image_size": 16}}
IMAGENET = {"kind": "imagefolder", "root": "imagenet", "image_size": 16}


def with_imagenet(*extra: dict, **task: object) -> list[dict]:
    """ci's shape task (its direct variant trains on it) and an ImageNet-1k task naming
    `extra` as its extra evaluation sets."""
    imagenet = {"name": "ImageNet-1k", "role": "in-distribution", "num_classes": 1000}
    return [
        {"name": "shape", "role": "in-mixture", "components": [["shape"]]},
        imagenet | {"data": IMAGENET, "extra_evals": list(extra)} | task,
    ]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"total_iterations": 41}, "total_iterations: 41 does not split into 2 equal runs"),
        (
            {"tasks": with_imagenet(IMAGENET_R, num_classes=100)},
            "tasks: ImageNet-1k: extra_evals are labelled with ImageNet-1k's 1000 classes, but "
            "the task reads imagefolder with 100 classes",
        ),
        (
            {
                "tasks": with_imagenet(
                    IMAGENET_R | {"data": IMAGENET_R["data"] | {"kind": "cifar10"}}
                )
            },
            r"parameter 'tasks.1.extra_evals.0.data': kind cifar10 is not one of ImageNet's "
            r"shifted evaluation sets \(imagenet-v2, imagenet-r, imagenet-sketch, imagenet-a\)",
        ),
        (
            {"tasks": with_imagenet(IMAGENET_R, IMAGENET_R)},
            "tasks: ImageNet-1k: extra_evals: names must be unique",
        ),
        (
            {
                "tasks": with_imagenet(IMAGENET_R),
                "probe_kind": "faithful",
                "probes": {"faithful": {"processes": 1, "workers": 0, "precision": "fp32"}},
                "lbfgs_check": False,
            },
            "tasks: ImageNet-1k: extra_evals are scored by the probes of cached features",
        ),
        ({"replicats": 3}, "unknown parameter 'replicats'"),
        ({"baseline": "cat9"}, "baseline: 'cat9' is not a variant"),
        ({"variants": [{"name": "w", "kind": "wide", "n": 2}]}, "one model"),
        (
            {"variants": [{"name": "d", "kind": "direct", "tasks": ["nope"]}], "baseline": "d"},
            "trains on nope, not among the tasks",
        ),
        (
            {"tasks": [{"name": "x", "role": "unseen"}]},
            "exactly one of data, components or pretraining",
        ),
        ({"train": {"model": "resnet11"}}, "train.model"),
        (
            {"probe_rule": "bounded"},
            "probe_rule: bounded is not reported by the fast probe .*probes.fast.max_gap",
        ),
        ({"probe_kind": "lbfgs"}, "lbfgs_check: the lbfgs probe has no L-BFGS fit"),
        ({"probe_kind": "faithful"}, "needs a probes.faithful section .*processes, workers"),
        ({"probes": {"fastt": {}}}, "unknown probe 'fastt'; did you mean 'fast'"),
        (
            {"probes": {"fast": {"lrss": [0.1]}}},
            "unknown parameter 'probes.fast.lrss'.*'probes.fast.lrs'",
        ),
        ({"probes": {"fast": {"kind": "lbfgs"}}}, "probes.fast: the key names the probe"),
    ],
)
def test_bad_profiles_are_refused_before_anything_trains(overrides, message: str) -> None:
    with pytest.raises(params.ParameterError, match=message):
        planned_params("ci", **overrides)


def fake_results(variants: dict[str, list[float]]) -> pl.DataFrame:
    """Results of several variants over replicates on one task (top-1 per replicate)."""
    return pl.DataFrame(
        [
            {
                "variant": name,
                "kind": "time-concat",
                "n": 1 if name != "cat4" else 4,
                "width": 1.0,
                "replicate": r,
                "iterations_per_model": 100,
                "task": "t",
                "role": "unseen",
                "rule": "heldout",
                "top1": top1,
                "top5": None,
            }
            for name, values in variants.items()
            for r, top1 in enumerate(values)
        ]
    )


def test_a_control_with_n_1_does_not_change_the_baseline_or_its_gains() -> None:
    plain = fake_results({"cat1": [0.5, 0.6], "cat4": [0.6, 0.7]})
    controlled = fake_results({"cat1": [0.5, 0.6], "wide1": [0.9, 0.9], "cat4": [0.6, 0.7]})
    gain = comparisons.gains(plain, "heldout", "cat1")
    gain_with_control = comparisons.gains(controlled, "heldout", "cat1")
    # the gain itself is the same, and so is its family (Holm over the tasks of one comparison)
    paired = [
        "variant",
        "task",
        "gain_mean",
        "gain_std",
        "replicates",
        "baseline",
        "p_value",
        "p_adjusted",
        "low",
        "high",
    ]
    assert gain.select(paired).row(0) == gain_with_control.filter(
        pl.col("variant") == "cat4"
    ).select(paired).row(0)
    assert gain_with_control["comparisons"].to_list() == [1, 1]
    assert gain["gain_mean"][0] == pytest.approx(10.0)
    table = comparisons.table3(controlled, "heldout")
    assert table["variant"].to_list() == ["cat1", "wide1", "cat4"]
    assert table.filter(pl.col("variant") == "cat1")["replicates"][0] == 2


def test_verdict_needs_an_interval_that_excludes_zero() -> None:
    steady = fake_results({"cat1": [0.50, 0.60, 0.55], "cat4": [0.52, 0.62, 0.57]})
    noisy = fake_results({"cat1": [0.50, 0.60, 0.55], "cat4": [0.60, 0.55, 0.56]})
    single = fake_results({"cat1": [0.5], "cat4": [0.9]})
    assert comparisons.gains(steady, "heldout", "cat1")["verdict"][0] == "better"
    assert comparisons.gains(noisy, "heldout", "cat1")["verdict"][0] == "no clear difference"
    assert comparisons.gains(single, "heldout", "cat1")["verdict"][0].startswith("untested")


def test_two_means_within_one_evaluation_row_or_both_at_100_are_tied() -> None:
    """A steady difference no larger than one evaluation row, or between two accuracies that
    both read 100.0 %, is `tied`, never better or worse; one row more is judged as before."""
    rows = 300  # one row: 0.33 points
    within = fake_results({"cat1": [0.600, 0.700, 0.650], "cat4": [0.597, 0.697, 0.647]})
    beyond = fake_results({"cat1": [0.600, 0.700, 0.650], "cat4": [0.590, 0.690, 0.640]})
    top = fake_results({"cat1": [1.0, 1.0, 1.0], "cat4": [0.9996, 0.9996, 0.9996]})
    judged = {
        name: comparisons.gains(frame.with_columns(eval_rows=pl.lit(rows)), "heldout", "cat1")
        for name, frame in {"within": within, "beyond": beyond}.items()
    }
    assert judged["within"]["verdict"][0] == "tied"
    assert judged["beyond"]["verdict"][0] == "worse"
    ceiling = comparisons.gains(top.with_columns(eval_rows=pl.lit(10_000)), "heldout", "cat1")
    assert ceiling["verdict"][0] == "tied"  # 0.04 points apart, beyond one row of 10,000


def test_notebook_03_table_rerun_skips_and_changed_settings_are_refused(notebook_outputs) -> None:
    folder = notebook_outputs(NOTEBOOK, TIME_CONCAT.summary)
    loaded = planned_params("ci", output_dir=str(folder))
    table = pl.read_parquet(folder / TIME_CONCAT.table3)
    tasks = [task.name for task in loaded.tasks]
    assert table["variant"].to_list() == [v.name for v in loaded.variants]
    assert table.columns[:8] == [
        "variant",
        "kind",
        "n",
        "width",
        "iterations_per_model",
        "total_iterations",
        "compute",
        "replicates",
    ]
    assert table.columns[8:] == [f"{task} {kind}" for task in tasks for kind in ("mean", "std")]
    trained = table.filter(pl.col("kind") != "random-init")  # its cost in cat1's iterations
    cost = trained["n"] * trained["width"] ** 2 * trained["iterations_per_model"]
    assert trained["compute"].to_list() == cost.to_list()
    assert table["mixture mean"].dtype == pl.Float64
    assert (table["replicates"] == loaded.replicates).all()
    results = pl.read_parquet(folder / TIME_CONCAT.results)
    assert results["top1"].is_between(0, 1).all()
    assert set(results["rule"]) == {"paper", "heldout"}
    spread = results.group_by("variant", "task", "rule").agg(pl.col("top1").std())
    assert spread["top1"].null_count() == 0  # more than one replicate everywhere
    diagnosed = pl.read_parquet(folder / TIME_CONCAT.diagnostics)
    assert diagnosed.height == results.height // 2  # one row per representation and task
    assert (diagnosed["rankme"] >= 1).all() and (diagnosed["rankme"] <= diagnosed["features"]).all()
    several = diagnosed.filter(pl.col("n") > 1)
    assert several["seed_cka"].is_between(0, 1.0 + 1e-9).all() and several.height
    assert (
        diagnosed.filter(pl.col("n") == 1)["seed_cka"].null_count()
        == diagnosed.filter(pl.col("n") == 1).height
    )
    summary = json.loads((folder / TIME_CONCAT.summary).read_text())
    assert summary["rule"] == loaded.probe_rule and summary["baseline"] == loaded.baseline
    assert summary["lines"]

    experiment = planning.plan(loaded)
    assert all(is_finished(t) for t in experiment.trainings)
    assert set(planning.run_table(experiment)["status"]) == {"finished"}
    # the notebook shows the plan's table again after training, its status read then
    executed = nbformat.read(folder / "03_time_concat.ipynb", as_version=4)
    (training,) = [c for c in executed.cells if "in_rounds.run(" in c.source]
    shown = "".join(o.get("data", {}).get("text/html", "") for o in training.outputs)
    # each row's status, or said once above the table when every row shares it
    every_row = "status: finished." in shown
    assert shown.count(">finished<") == len(experiment.trainings) or every_row
    assert "to train" not in shown
    stamps = {
        t.output_dir: os.stat(RunFolder.of(t).checkpoint).st_mtime_ns for t in experiment.trainings
    }
    skipped = planning.launch(experiment.trainings, loaded)
    assert len(skipped) == len(experiment.trainings)
    assert stamps == {
        t.output_dir: os.stat(RunFolder.of(t).checkpoint).st_mtime_ns for t in experiment.trainings
    }
    for changed, key in (({"total_iterations": 80}, "iterations"), ({"train": {"lr": 0.01}}, "lr")):
        other = planned_params("ci", output_dir=str(folder), **changed)
        with pytest.raises(
            params.ParameterError,
            match=rf"runs with other settings than these parameters in .*"
            rf"seed0 \({key}\)",
        ):
            planning.launch(planning.plan(other).trainings, other)


def test_catn_is_compared_with_the_wide_control_and_random_init_of_the_same_n() -> None:
    kinds = {
        "cat1": ("time-concat", 1),
        "cat4": ("time-concat", 4),
        "wide1": ("wide", 1),
        "random4": ("random-init", 4),
        "random2": ("random-init", 2),
    }
    top1 = {
        "cat1": [0.5, 0.6, 0.55],
        "cat4": [0.6, 0.7, 0.65],
        "wide1": [0.7, 0.8, 0.75],
        "random4": [0.2, 0.3, 0.25],
        "random2": [0.1, 0.2, 0.15],
    }
    results = pl.DataFrame(
        [
            {
                "variant": name,
                "kind": kinds[name][0],
                "n": kinds[name][1],
                "width": 1.0,
                "replicate": r,
                "iterations_per_model": 100,
                "task": "t",
                "role": "unseen",
                "rule": "heldout",
                "top1": value,
                "top5": None,
            }
            for name, values in top1.items()
            for r, value in enumerate(values)
        ]
    )
    controls = comparisons.control_gains(results, "heldout")
    assert sorted(
        zip(controls["variant"], controls["baseline"], controls["verdict"], strict=True)
    ) == [
        ("cat4", "random4", "better"),
        ("cat4", "wide1", "worse"),
    ]
    assert controls.filter(pl.col("baseline") == "wide1")["gain_mean"][0] == pytest.approx(-10)
    summary = comparisons.summarize(results, "heldout", "cat1")
    assert (
        "secondary (exploratory): cat4 vs wide1 on t (unseen): −10.0 points over 3 "
        "replicates" in "\n".join(summary["lines"])
    )
    # better than cat1 on the transfer endpoint, but 10 points below a wide control that
    # trained with less compute: the gain is not beyond the controls
    assert summary["claim"]["status"] == "contradicted"
    rows = {row["condition"]: row for row in summary["verdicts"]}
    assert rows["cat4 vs cat1"]["judgement"] == "holds"
    assert rows["cat4 vs wide1"]["judgement"] == "contradicted"
    assert rows["cat4 vs random4"]["judgement"] == "holds" and "cat4 vs random2" not in rows
    assert summary["lines"][0].startswith(
        "Claim: time-concat transfers better than cat1 at the "
        "same budget, beyond the controls (paper Section 5.1, "
        "Table 3): CONTRADICTED"
    )


def planted_results(gains: dict[str, dict[str, float]], replicates: int = 5) -> pl.DataFrame:
    """Results of a run where each variant's top-1 % is a task's level plus a planted gain and
    noise of std 1 point (seeded); the wide model (width 2) spends cat4's compute."""
    kinds = {
        "cat1": ("time-concat", 1, 1.0, 400),
        "cat2": ("time-concat", 2, 1.0, 200),
        "cat4": ("time-concat", 4, 1.0, 100),
        "wide1": ("wide", 1, 2.0, 100),
        "random4": ("random-init", 4, 1.0, None),
    }
    roles = {"mixture": "in-distribution", "shape": "in-mixture", "position": "unseen"}
    rng = np.random.default_rng(0)
    return pl.DataFrame(
        [
            {
                "variant": name,
                "kind": kind,
                "n": n,
                "width": width,
                "replicate": r,
                "iterations_per_model": iterations,
                "task": task,
                "role": role,
                "rule": "heldout",
                "top1": (40 + gains.get(name, {}).get(task, 0.0) + rng.normal()) / 100,
                "top5": None,
            }
            for r in range(replicates)
            for task, role in roles.items()
            for name, (kind, n, width, iterations) in kinds.items()
        ]
    )


@pytest.mark.parametrize(
    "cat4, wide1, replicates, status",
    [
        ({"shape": 5, "position": 5, "mixture": -5}, {"shape": 1, "position": 0}, 5, "reproduced"),
        ({"shape": 5, "position": 5}, {"shape": 12, "position": 12}, 5, "contradicted"),
        ({}, {}, 5, "contradicted"),  # no gain: a gain of 2.9 points is excluded
        ({"shape": -5, "mixture": 10}, {}, 5, "contradicted"),  # in-distribution gains do not count
        ({"shape": 2, "position": 2}, {}, 3, "inconclusive"),  # a small gain, three replicates
    ],
)
def test_the_claim_is_about_the_largest_n_on_the_mean_transfer_endpoint(
    cat4, wide1, replicates: int, status: str
) -> None:
    results = planted_results(
        {
            "cat2": {"shape": 9, "position": 9},
            "cat4": cat4,
            "wide1": wide1,
            "random4": {"shape": -20, "position": -20},
        },
        replicates,
    )
    summary = comparisons.summarize(results, "heldout", "cat1", smallest=2.9)
    assert summary["claim"]["variant"] == "cat4" and summary["claim"]["status"] == status
    assert summary["lines"][0].startswith("Claim: time-concat") and summary["lines"][0].split(
        " (smallest"
    )[0].endswith(status.upper())
    primary = summary["verdicts"][0]
    assert primary["condition"] == "cat4 vs cat1" and primary["tasks"] == ["shape", "position"]
    assert len(primary["values"]) == replicates and json.dumps(summary)
    if status == "inconclusive":
        assert primary["replicates_needed"] > replicates and "would detect" in summary["lines"][0]


def test_the_bottleneck_claim_reads_direct_against_cat1_on_the_tasks_it_trains_on() -> None:
    results = planted_results({"cat4": {"shape": 5, "position": 5}})
    direct = results.filter(
        (pl.col("variant") == "cat1") & (pl.col("task") == "shape")
    ).with_columns(
        pl.lit("direct").alias("variant"), pl.lit("direct").alias("kind"), pl.col("top1") + 0.08
    )
    summary = comparisons.summarize(pl.concat([results, direct]), "heldout", "cat1")
    bottleneck = next(c for c in summary["claims"] if c["claim"] == "bottleneck")
    assert (
        bottleneck["status"] == "reproduced"
        and "direct minus cat1, mean over shape" in bottleneck["line"]
    )
    assert [c["claim"] for c in comparisons.summarize(results, "heldout", "cat1")["claims"]] == [
        "time-concat"
    ]


#: a run where cat4's gain holds against cat1 and every control
PLANTED = {
    "cat4": {"shape": 8, "position": 8},
    "wide1": {"shape": 1, "position": 1},
    "random4": {"shape": -20, "position": -20},
}


def _overrated(results: pl.DataFrame, optimism: dict[tuple[str, str], float]) -> pl.DataFrame:
    """`results` with the chosen heads' held-out top-1: their evaluation top-1 plus
    `optimism[(variant, task)]` points (0 elsewhere) and noise of std 1 point (seeded), and a
    train/eval gap of 30 points on every cell."""
    rng = np.random.default_rng(1)
    planted = [optimism.get((v, t), 0.0) for v, t in results.select("variant", "task").rows()]
    return results.with_columns(
        heldout_top1=pl.col("top1")
        + (pl.Series(planted) + pl.Series(rng.normal(size=results.height))) / 100,
        train_top1=pl.col("top1") + 0.3,
        eval_rows=pl.lit(512),
    )


def test_a_cell_whose_held_out_rows_overrated_its_head_keeps_only_what_its_bias_cannot_make() -> (
    None
):
    """One rule (kit.experiments.timecat.cells): a train/eval gap alone flags nothing; a cell
    whose chosen heads scored well above the evaluation split on the held-out rows that chose
    them is flagged; a claim's condition that reads it on the treatment's side keeps a gain that
    holds (the flag can only have lowered it) and says why; the endpoint stays the design's, and
    the gains table every output shows is the summary's."""
    results = planted_results(PLANTED)
    honest = comparisons.summarize(_overrated(results, {}), "heldout", "cat1", 2.9)
    assert honest["claim"]["status"] == "reproduced"
    assert not honest["claim"]["flagged_cells"]  # a gap of 30 points flags nothing
    overrated = _overrated(results, {("cat4", "shape"): 10.0})
    summary = comparisons.summarize(overrated, "heldout", "cat1", 2.9)
    primary = summary["verdicts"][0]
    assert primary["tasks"] == ["shape", "position"]  # never chosen by the data
    assert primary["missing"] is None
    assert primary["flag"] == (
        "reads flagged probe cells: cat4 on shape; a noisy held-out choice can only lower "
        "cat4's score, so holds stands"
    )
    assert primary["judgement"] == "holds"
    assert {(c["variant"], c["task"]) for c in summary["claim"]["flagged_cells"]} == {
        ("cat4", "shape")
    }
    gains, _ = comparisons.judged_gains(overrated, "heldout", "cat1", 2.9)
    assert gains.to_dicts() == summary["gains"]
    secondary = gains.filter((pl.col("variant") == "cat4") & (pl.col("task") == "shape"))
    assert secondary["verdict"].to_list() == ["flagged (probe selection)"]
    tally = next(row for row in summary["tally"] if row["variant"] == "cat4")
    assert (tally["tasks"], tally["flagged"]) == (2, 1)  # a flagged comparison counts nowhere
    assert "1 more flagged, not judged" in next(
        line for line in summary["lines"] if line.startswith("secondary (exploratory): cat4:")
    )


def test_the_rule_flips_a_reproduced_claim_to_inconclusive() -> None:
    results = planted_results(PLANTED)
    clean = comparisons.summarize(_overrated(results, {}), "heldout", "cat1", 2.9)
    assert clean["claim"]["status"] == "reproduced"
    flagged = comparisons.summarize(
        _overrated(results, {("cat1", "position"): 12.0}), "heldout", "cat1", 2.9
    )
    assert flagged["claim"]["status"] == "inconclusive"
    # the same run without the rule (max_probe_optimism: null) is judged as before
    unruled = comparisons.summarize(
        _overrated(results, {("cat1", "position"): 12.0}), "heldout", "cat1", None
    )
    assert unruled["claim"]["status"] == "reproduced"
    assert [v["values"] for v in unruled["verdicts"]] == [v["values"] for v in flagged["verdicts"]]


def test_the_in_distribution_task_is_the_pretraining_data_and_ceilings_are_shown() -> None:
    loaded = planned_params("cpu")
    mixture = next(task for task in loaded.tasks if task.role == "in-distribution")
    assert loaded.task_data(mixture)[0] == loaded.train.data
    table = comparisons.task_table(loaded)
    assert ((table["Bayes ceiling %"] - 100).abs() < 1e-6).all()
    assert (table["chance %"] == 10.0).all()
    assert comparisons.pretraining_passes(loaded) <= 1.0  # no image seen twice
