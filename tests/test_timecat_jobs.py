"""Notebook 03's feature extraction and probing as jobs: a real `torchrun --nproc-per-node=2`
(gloo) started by kit.launch fills the cache that the notebook's probes then read without
extracting again, with the features of one process; the launched probe step writes the results
table; `python -m kit launch plan --profile` exports the chained Slurm scripts. A small plan of
untrained networks (random-init variants: nothing to train) on the ci profile's synthetic world.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from kit.cli.main import main as kit_main
from kit.data.fixtures import write_image_folder, write_imagenet_shift
from kit.experiments.timecat import jobs, measure, planning
from kit.experiments.timecat.result_files import TIME_CONCAT
from kit.experiments.timecat.settings import TimecatSettings
from kit.experiments.timecat.shifted import shift_table
from kit.params import params


def small_plan(folder: Path, **changes) -> Path:
    """ci's world with three untrained networks (r1, and r2 of two) probed on two tasks."""
    values = {
        "output_dir": str(folder / "out"),
        "replicates": 1,
        "variants": [
            {"name": "r1", "kind": "random-init", "n": 1},
            {"name": "r2", "kind": "random-init", "n": 2},
        ],
        "baseline": "r1",
        "tasks": [
            {"name": "mixture", "role": "in-distribution", "components": [["colour"], ["shape"]]},
            {"name": "position", "role": "unseen", "components": [["position"]]},
        ],
        "launch": {"backend": "torchrun", "nproc_per_node": 2},
    } | changes
    path = folder / "small.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def entries(cache: Path) -> dict[str, tuple[int, int]]:
    """Each cache entry's features and record files, by modification time (rewritten: changed)."""
    return {
        entry.name: (
            (entry / "features.npy").stat().st_mtime_ns,
            (entry / "record.json").stat().st_mtime_ns,
        )
        for entry in cache.iterdir()
        if (entry / "record.json").exists()
    }


def test_extraction_job_under_torchrun_fills_the_cache_the_probes_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    parameters = small_plan(tmp_path)
    loaded = jobs.load_settings("ci", [parameters], [])
    cache = planning.runs_dir(loaded) / "features"
    assert not jobs.extraction_finished(loaded)

    assert jobs.launch_extraction(loaded)  # torchrun, two gloo ranks, each its shard
    log = (planning.runs_dir(loaded) / "logs" / "extract.log").read_text()
    assert "rank 0/2 on cpu" in log and "rank 1/2 on cpu" in log, log[-2000:]
    # 2 networks alone (r1's is r2's first: the same seed, the same file) and r2 concatenated,
    # on two tasks' training and evaluation splits
    made = entries(cache)
    assert len(made) == (2 + 1) * 2 * 2
    assert jobs.extraction_finished(loaded)
    assert not jobs.extraction_finished(
        jobs.load_settings("ci", [parameters], ["feature_dtype=float16"])
    )

    # what probe_all reads: every feature set found in the cache (no image decoded again)
    representations = planning.plan(loaded).representations
    for task in loaded.tasks:
        found = measure.task_features(task, representations, loaded)
        sets = [*found.train, *found.eval, *found.single.values()]
        assert sets and all(entry.cache_hit for entry in sets), task.name
    # probed as a launched job (`kit launch probe`, the profile's torchrun), as a user runs it
    assert kit_main(["launch", "probe", "--profile", "ci", "-f", str(parameters)]) == 0
    assert "wrote " in (planning.runs_dir(loaded) / "logs" / "probe.log").read_text()
    results = pl.read_parquet(Path(loaded.output_dir) / TIME_CONCAT.results)
    assert results.height == len(representations) * len(loaded.tasks) * 2  # two rules
    assert (Path(loaded.output_dir) / TIME_CONCAT.diagnostics).exists()
    assert entries(cache) == made  # nothing extracted or rewritten by the probes

    # one process extracts the same entries (same keys) with the same features
    shutil.move(cache, tmp_path / "sharded")
    assert kit_main(["extract", "--profile", "ci", "-f", str(parameters)]) == 0
    assert set(entries(cache)) == set(made)
    for name in made:
        sharded, single = tmp_path / "sharded" / name, cache / name
        np.testing.assert_allclose(
            np.load(sharded / "features.npy"),
            np.load(single / "features.npy"),
            rtol=1e-5,
            atol=1e-6,
        )
        np.testing.assert_array_equal(
            np.load(sharded / "labels.npy"), np.load(single / "labels.npy")
        )
        recorded = [
            json.loads((folder / "record.json").read_text()) for folder in (sharded, single)
        ]
        assert [r["checkpoints"] for r in recorded][0] == recorded[1]["checkpoints"]


def test_extraction_refuses_unfinished_training_before_extracting(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert kit_main(["extract", "--profile", "ci", "--set", f"output_dir={out}"]) == 2
    error = capsys.readouterr().err
    assert (
        re.search(r"not finished: [\d,]+ training runs?, so", error) and "rep0/cat1/seed0" in error
    )
    assert "Traceback" not in error
    assert not (out / "time_concat" / "features").exists()


def test_the_plan_prints_paths_as_typed_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        kit_main(
            [
                "launch",
                "plan",
                "--profile",
                "ci",
                "--set",
                f"output_dir={tmp_path}",
                "--out",
                str(tmp_path / "export"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "wrote export/train.sbatch, export/extract.sbatch, export/probe.sbatch, "
        "export/submit.sh; submit all with: bash export/submit.sh"
    ) in printed
    assert str(tmp_path) not in printed


def test_plan_with_a_profile_exports_training_extraction_and_probing_chained(
    tmp_path: Path,
) -> None:
    out, export = tmp_path / "out", tmp_path / "export"
    code = kit_main(
        [
            "launch",
            "plan",
            "--profile",
            "ci",
            "--set",
            f"output_dir={out}",
            "--out",
            str(export),
            "--launch",
            "gpus_per_node=8",
            "--launch",
            "nproc_per_node=8",
            "--launch",
            "partition=gpu",
        ]
    )
    assert code == 0
    loaded = jobs.load_settings("ci", [], [f"output_dir={out}"])
    trainings = planning.plan(loaded).trainings
    parameters = export / f"{jobs.NOTEBOOK}.parameters.yaml"
    replayed, _ = params.load(jobs.NOTEBOOK, "ci", [parameters])
    assert isinstance(replayed, TimecatSettings) and replayed == loaded

    train = (export / "train.sbatch").read_text()
    assert f"#SBATCH --array=0-{len(trainings) - 1}" in train
    listed = (export / "runs.txt").read_text().split()
    assert {yaml.safe_load(Path(p).read_text())["output_dir"] for p in listed} == {
        t.output_dir for t in trainings
    }
    extract, probe = ((export / f"{step}.sbatch").read_text() for step in ("extract", "probe"))
    for line in (
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --requeue",
        f"-m kit extract --profile ci -f {parameters}",
    ):
        assert line in extract
    for line in (
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=1",
        f"-m kit probe --profile ci -f {parameters}",
    ):
        assert line in probe
    submit = (export / "submit.sh").read_text()
    order = re.findall(r"--dependency=afterok:\$job\} ([^\s)]+)", submit)
    assert order == [str(export / f"{step}.sbatch") for step in ("train", "extract", "probe")]
    for script in ("train.sbatch", "extract.sbatch", "probe.sbatch", "submit.sh"):
        assert subprocess.run(["bash", "-n", str(export / script)]).returncode == 0, script

    assert kit_main(["launch", "plan", "--profile", "ci", "--runs", "2", "--out", str(export)]) == 2
    assert kit_main(["launch", "plan", "--out", str(export)]) == 2


def test_the_sweeps_probes_side_by_side_without_diagnostics_give_notebook_03s_results(
    tmp_path: Path,
) -> None:
    """What notebook 04 asks of probe_all (two probes at a time, no label-free diagnostics)
    gives the results of notebook 03's way (one at a time, diagnosed), and no diagnostics."""
    loaded = jobs.load_settings(
        "ci",
        [
            small_plan(
                tmp_path,
                launch={"backend": "local", "workers": 1},
                tasks=[{"name": "position", "role": "unseen", "components": [["position"]]}],
            )
        ],
        [],
    )
    found = planning.plan(loaded)
    planning.initialise(found.initial)
    one = measure.probe_all(found.representations, loaded.model_copy(update={"side_by_side": 1}))
    two = measure.probe_all(
        found.representations, loaded.model_copy(update={"side_by_side": 2}), diagnose=False
    )
    assert one.diagnostics.height == len(found.representations) * len(loaded.tasks)
    assert two.diagnostics.is_empty()
    assert one.results.equals(two.results)


def test_an_imagenet_task_scores_its_probes_on_an_extra_evaluation_set(tmp_path: Path) -> None:
    """ImageNet-1k (one tiny image per class and split) with ImageNet-R (three of its classes)
    as an extra evaluation set: the probes' chosen heads are scored there too, and the shift
    table puts both side by side."""
    wnids = [f"n{i:08d}" for i in range(1000)]
    write_image_folder(tmp_path / "imagenet", wnids, {"train": 1, "val": 1}, size=8)
    write_imagenet_shift(tmp_path / "shifts", "imagenet-r", wnids[3:6], count=2)
    imagenet = {
        "name": "ImageNet-1k",
        "role": "in-distribution",
        "num_classes": 1000,
        "data": {"kind": "imagefolder", "root": str(tmp_path / "imagenet"), "image_size": 16},
        "extra_evals": [
            {
                "name": "ImageNet-R",
                "data": {"kind": "imagenet-r", "root": str(tmp_path / "shifts"), "image_size": 16},
            }
        ],
    }
    loaded = jobs.load_settings(
        "ci", [small_plan(tmp_path, tasks=[imagenet])], ["lbfgs_check=false"]
    )
    assert not loaded.input_problems()
    representations = planning.plan(loaded).representations
    planning.initialise(planning.plan(loaded).initial)
    results = measure.probe_all(representations, loaded, diagnose=False).results
    shifted = results["extra_ImageNet-R_top1"]
    assert shifted.is_not_null().all() and shifted.is_between(0, 1).all()
    assert results.height == len(representations) * 2  # two rules
    table = shift_table(results, loaded.probe_rule)
    assert table is not None and table["variant"].to_list() == ["r1", "r2"]
    assert table.columns[1:] == [
        "ImageNet-1k mean",
        "ImageNet-1k std",
        "ImageNet-R mean",
        "ImageNet-R std",
    ]
    assert shift_table(results.drop("extra_ImageNet-R_top1"), loaded.probe_rule) is None
