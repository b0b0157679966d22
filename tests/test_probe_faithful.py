"""The authors' probe as a runnable step: fixture checkpoints, a tiny dataset, one and two
processes, resume."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
from pathlib import Path

import polars as pl
import pytest
import torch
import yaml
from pydantic import ValidationError
from test_features import tiny_checkpoint

from kit.data import workers
from kit.data.fixtures import write_image_folder
from kit.probes import faithful, faithful_launch
from kit.probes.base import ImageProbeJob
from kit.probes.faithful_training import ProbeHeads
from kit.probes.rows import ProbeError
from kit.probes.selection import RULES, ProbeResult
from kit.probes.settings import PAPER_WEIGHT_DECAYS, FaithfulProbeSettings

DATA = {
    "kind": "synthetic",
    "image_size": 16,
    "augment": "crop_flip",
    "synthetic": {
        "num_train": 64,
        "num_eval": 24,
        "components": [{"weight": 1.0, "cues": ["colour"]}],
    },
}
SHORT = dict(
    epochs=2,
    milestones=[1],
    lr=0.05,
    batch_size=16,
    bn_batch=8,
    heldout_fraction=0.25,
    workers=0,
    precision="fp32",
)
GRID = PAPER_WEIGHT_DECAYS["imagenet"]


@pytest.fixture()
def step(tmp_path: Path) -> tuple[list[Path], Path]:
    """Two tiny backbones and a dataset description."""
    checkpoints = [tiny_checkpoint(tmp_path, "a", 1), tiny_checkpoint(tmp_path, "b", 2, 0.25)]
    description = tmp_path / "data.yaml"
    description.write_text(yaml.safe_dump(DATA))
    return checkpoints, description


@pytest.mark.parametrize("bn_batch", [None, 8, 12])
def test_heads_normalise_as_one_batchnorm1d_per_group(bn_batch: int | None) -> None:
    """Global statistics are one BatchNorm1d over the batch; groups of bn_batch rows (a last,
    shorter one included) are each a BatchNorm1d of their own, the first one's statistics kept
    in the running buffers."""
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(32, 6, generator=generator) * 3 + 1
    heads = ProbeHeads(6, 4, 2, bn_batch=bn_batch)
    reference = [
        torch.nn.Sequential(torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 4)) for _ in range(2)
    ]
    for h, module in enumerate(reference):
        module[0].load_state_dict(heads.norms[h].state_dict())
        module[1].load_state_dict(heads.linears[h].state_dict())
    groups = features.split(bn_batch or len(features))
    for mode in ("train", "train", "eval"):
        heads.train(mode == "train")
        expected = []
        for module in reference:
            module.train(mode == "train")
            first = module(groups[0])  # updates the running statistics, as rank 0 did
            rest = [
                module[1](
                    torch.nn.functional.batch_norm(
                        group,
                        None,
                        None,
                        module[0].weight,
                        module[0].bias,
                        True,
                        0.0,
                        module[0].eps,
                    )
                )
                if mode == "train"
                else module(group)
                for group in groups[1:]
            ]
            expected.append(torch.cat([first, *rest]))
        torch.testing.assert_close(heads(features), torch.stack(expected, 1), rtol=1e-5, atol=1e-5)
    for h, module in enumerate(reference):
        torch.testing.assert_close(heads.norms[h].running_var, module[0].running_var)
        torch.testing.assert_close(heads.norms[h].running_mean, module[0].running_mean)


def run(checkpoints: list[Path], description: Path, output: Path, **settings) -> ProbeResult:
    config = FaithfulProbeSettings(**{**SHORT, "processes": 1, **settings})
    return faithful.run_faithful(
        checkpoints, faithful.load_data_config(description), 3, output, config, GRID, progress=False
    )


def test_faithful_step_writes_both_rules_and_resumes_exactly(tmp_path: Path, step) -> None:
    checkpoints, description = step
    whole = run(checkpoints, description, tmp_path / "whole")
    assert set(whole.selected["rule"]) == set(RULES)
    assert whole.history.height == 2 * len(GRID)
    written = pl.read_csv(tmp_path / "whole" / "selected.csv")
    assert written["top1"].to_list() == whole.selected["top1"].to_list()
    # an interrupted probe (one epoch saved) resumes to the same numbers as one run through;
    # a mark left in the saved epoch shows that it was read back, not recomputed
    run(checkpoints, description, tmp_path / "resumed", epochs=1)
    state_file = tmp_path / "resumed" / "probe_state.pt"
    state = torch.load(state_file, weights_only=True)
    state["rows"][0]["heldout_top1"] = -1.0
    torch.save(state, state_file)
    resumed = run(checkpoints, description, tmp_path / "resumed")
    assert resumed.history["heldout_top1"][0] == -1.0
    assert resumed.history.slice(1).equals(whole.history.slice(1))
    with pytest.raises(ProbeError, match="different settings.*lr"):
        run(checkpoints, description, tmp_path / "resumed", lr=0.1)


def test_bf16_backbones_give_about_the_fp32_result(tmp_path: Path, step) -> None:
    checkpoints, description = step
    exact = run(checkpoints, description, tmp_path / "fp32", epochs=1)
    approximate = run(checkpoints, description, tmp_path / "bf16", epochs=1, precision="bf16")
    assert (approximate.history["eval_top1"] - exact.history["eval_top1"]).abs().max() <= 0.1


def command(checkpoints: list[Path], description: Path, output: Path) -> list[str]:
    return [
        "-m",
        "kit.probes.faithful",
        "--checkpoints",
        *map(str, checkpoints),
        "--data",
        str(description),
        "--num-classes",
        "3",
        "--output",
        str(output),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--bn-batch",
        "8",
        "--lr",
        "0.05",
        "--heldout-fraction",
        "0.25",
        "--device",
        "cpu",
    ]


def jobs(
    checkpoints: list[Path], description: Path, outputs: list[Path], processes: int
) -> list[ImageProbeJob]:
    """A probe of both backbones, then one of the first alone, into `outputs` (as many
    probes as outputs)."""
    config = FaithfulProbeSettings(**SHORT, processes=processes)
    data_config = faithful.load_data_config(description)
    return [
        ImageProbeJob(chosen, data_config, 3, output, config, GRID)
        for chosen, output in zip((checkpoints, checkpoints[:1]), outputs, strict=False)
    ]


def test_two_gloo_processes_match_one(tmp_path: Path, step, monkeypatch) -> None:
    """The notebook's driver, given probes of one process and of two at once (the authors ran
    each kind of target on its own number of GPUs): those of one in this process, those of two
    under one torchrun of the step running them in turn (one log; each probe's identity its
    own); the same heads and accuracies either way, results in the jobs' order, and a finished
    probe is read back."""
    checkpoints, description = step
    one, two = (
        [tmp_path / "one" / "both", tmp_path / "one" / "first"],
        [tmp_path / "two" / "both", tmp_path / "two" / "first"],
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mixed = faithful_launch.launch_faithful_all(
        jobs(checkpoints, description, two, 2) + jobs(checkpoints, description, one, 1),
        tmp_path / "two",
        progress=False,
    )
    results = [mixed[2:], mixed[:2]]
    log = (tmp_path / "two" / "probe-2.log").read_text()
    assert f"probe 1/2: {two[0]}\n" in log and f"probe 2/2: {two[1]}\n" in log
    assert str(one[0]) not in log and not (tmp_path / "two" / "probe-1.log").exists()
    for single_output, double_output in zip(one, two, strict=True):
        single, double = (
            torch.load(o / "probe_state.pt", weights_only=True)
            for o in (single_output, double_output)
        )
        for name, value in single["heads"].items():
            torch.testing.assert_close(double["heads"][name], value, rtol=1e-4, atol=1e-5)
    for single_result, double_result in zip(*results, strict=True):
        for column in ("train_top1", "heldout_top1", "eval_top1"):
            assert (
                single_result.history[column] - double_result.history[column]
            ).abs().max() <= 1e-6
    assert (
        results[1][0].history["eval_top1"].to_list() != results[1][1].history["eval_top1"].to_list()
    )
    # finished: read back without starting anything (a mark left in the result comes back)
    pl.read_csv(two[0] / "selected.csv").with_columns(pl.lit(0.5).alias("top1")).write_csv(
        two[0] / "selected.csv"
    )
    (tmp_path / "two" / "probe-2.log").unlink()
    again = faithful_launch.launch_faithful_all(
        jobs(checkpoints, description, two, 2), two[0].parent
    )
    assert again[0].selected["top1"].to_list() == [0.5, 0.5]
    assert not (tmp_path / "two" / "probe-2.log").exists()
    # a step that fails names its log
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    broken = jobs([junk], description, [tmp_path / "broken" / "junk"], 2)
    with pytest.raises(ProbeError, match=r"see .*probe-2\.log:\nerror: .*junk\.pt: not a readable"):
        faithful_launch.launch_faithful_all(broken, tmp_path / "broken")


def test_a_list_of_probes_is_checked_before_any_runs(tmp_path: Path, step, capsys) -> None:
    checkpoints, description = step
    listing = tmp_path / "probes.json"
    good = command(checkpoints, description, tmp_path / "good")[2:]
    bad = command(checkpoints, tmp_path / "missing.yaml", tmp_path / "bad")[2:]
    listing.write_text(json.dumps([good, bad]))
    assert faithful.main(["--jobs", str(listing)]) == 2
    assert "missing.yaml: dataset description not found" in capsys.readouterr().err
    assert not (tmp_path / "good").exists()
    listing.write_text("[]")
    assert faithful.main(["--jobs", str(listing)]) == 2
    assert "non-empty list of argument lists" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c, d: ([c[0], c[0].with_name("missing.pt")], d), "missing.pt"),
        (
            lambda c, d: (c, d.write_text("kind: synthetic\nimage_size: 4\n") and d),
            "data.yaml.*image_size",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_file(
    tmp_path: Path, step, change, message, capsys
) -> None:
    checkpoints, description = change(*step)
    assert faithful.main(command(checkpoints, description, tmp_path / "o")[2:]) == 2
    error = capsys.readouterr().err
    assert re.search(message, error, re.S), error
    assert not (tmp_path / "o" / "probe_state.pt").exists()


def test_the_probes_process_group_waits_as_long_as_the_settings_say(
    tmp_path: Path, step, monkeypatch
) -> None:
    """A launched list of probes joins its process group with the settings' timeout (opening
    ImageNet's files on one rank can outlast torch's default), written on its command line."""
    checkpoints, description = step
    job = jobs(checkpoints, description, [tmp_path / "o"], 1)[0]
    arguments = faithful_launch._job_arguments(job)
    assert arguments[arguments.index("--group-timeout-s") + 1] == "1800"
    config = job.settings.model_copy(update={"group_timeout_s": 4321})
    arguments = faithful_launch._job_arguments(dataclasses.replace(job, settings=config))
    joined = []

    def start(device: str, timeout_s: int) -> None:
        joined.append(timeout_s)
        raise ProbeError("stopped once the group is joined")

    monkeypatch.setattr(faithful, "start_process", start)
    assert faithful.main(arguments) == 2
    assert joined == [4321]


#: transcribed by hand from facebookresearch/richreps-timecat: the srun tasks (#SBATCH
#: --ntasks-per-node, one GPU each), --batch_size, --sync_bn and --wd loops of
#: scripts/supervised_transfer/imagenet/to_{imagenet1k,inat18,cifar}/linear_probing/
#: {run,cat}_*_sf.sh, and supervised.py's defaults for what they leave out (--epochs 28, --lr
#: 0.01, --decay_epochs 8 16 24)
TRANSCRIBED = {
    "imagenet-cat1": (
        "to_imagenet1k/linear_probing/run_imagenet_sf.sh",
        5,
        32,
        False,
        {1e-4, 5e-4},
    ),
    "imagenet-catN": (
        "to_imagenet1k/linear_probing/cat_imagenet_sf.sh",
        6,
        32,
        False,
        {5e-4, 1e-4},
    ),
    "inat18-cat1": ("to_inat18/linear_probing/run_inat_sf.sh", 8, 32, True, {1e-6, 1e-5, 1e-4}),
    "inat18-catN": ("to_inat18/linear_probing/cat_inat_sf.sh", 8, 32, True, {1e-6, 1e-5, 1e-4}),
    "cifar-cat1": (
        "to_cifar/linear_probing/run_cifar_sf.sh",
        1,
        256,
        False,
        {1e-2, 5e-2, 1e-4, 5e-4, 1e-3, 5e-3},
    ),
    "cifar-catN": (
        "to_cifar/linear_probing/cat_cifar_sf.sh",
        1,
        256,
        False,
        {1e-2, 5e-2, 1e-4, 5e-4, 1e-3, 5e-3},
    ),
}


def test_the_authors_setups_are_their_scripts() -> None:
    from kit.probes.settings import AUTHORS_PROBE_SETUPS, PAPER_WEIGHT_DECAYS

    assert set(AUTHORS_PROBE_SETUPS) == set(TRANSCRIBED)
    for name, (script, processes, batch, sync_bn, decays) in TRANSCRIBED.items():
        setup = AUTHORS_PROBE_SETUPS[name]
        assert setup.script == f"scripts/supervised_transfer/imagenet/{script}"
        assert (setup.processes, setup.per_process_batch, setup.sync_bn) == (
            processes,
            batch,
            sync_bn,
        ), name
        assert (setup.epochs, setup.lr, setup.milestones) == (28, 0.01, (8, 16, 24)), name
        assert set(setup.weight_decays) == decays == set(PAPER_WEIGHT_DECAYS[name.split("-")[0]])
    recipe = FaithfulProbeSettings(processes=1, workers=0, precision="fp32")
    assert (recipe.epochs, recipe.lr, tuple(recipe.milestones)) == (28, 0.01, (8, 16, 24))


@pytest.mark.parametrize("profile", ["paper-8xh100", "paper-checkpoints"])
def test_the_paper_profiles_probe_each_target_as_the_authors_did(profile: str) -> None:
    from kit.experiments.timecat import jobs as timecat_jobs
    from kit.params import params
    from kit.probes.settings import AUTHORS_PROBE_SETUPS

    merged, _ = params.resolve_layers(timecat_jobs.NOTEBOOK, profile)
    settings = FaithfulProbeSettings(**merged["probes"]["faithful"])
    for name, authors in AUTHORS_PROBE_SETUPS.items():
        grid, representation = name.split("-")
        own = settings.for_probe(grid, representation == "catN")
        assert (own.processes, own.batch_size, own.bn_batch) == (
            authors.processes,
            authors.processes * authors.per_process_batch,
            None if authors.sync_bn else authors.per_process_batch,
        ), name


def test_a_setup_asking_for_more_processes_than_given_is_refused() -> None:
    with pytest.raises(
        ValidationError, match="setups: inat18-cat1 asks for 8 processes, more than processes 5"
    ):
        FaithfulProbeSettings(
            processes=5,
            workers=0,
            precision="fp32",
            setups={"inat18-cat1": {"processes": 8, "batch_size": 32, "sync_bn": True}},
        )
    with pytest.raises(ValidationError, match="setups: inat is none of"):
        FaithfulProbeSettings(
            processes=5,
            workers=0,
            precision="fp32",
            setups={"inat": {"processes": 1, "batch_size": 32}},
        )


def test_a_stuck_probe_worker_becomes_an_error_naming_the_probe(tmp_path: Path, step) -> None:
    """A loader worker of the authors' probe that never hands over a batch (one blocked opening
    a FIFO planted among the images) left the probe waiting forever: it now fails after
    faithful.loader_timeout_s naming the probe's folder and checkpoints, with no worker left."""
    checkpoints, description = step
    folder = write_image_folder(tmp_path / "images", ("ant", "bee", "cat"), {"train": 8, "val": 2})
    os.mkfifo(folder / "train" / "ant" / "stuck.png")
    data = {"kind": "imagefolder", "root": str(folder), "image_size": 16, "verify_images": False}
    description.write_text(yaml.safe_dump(data))
    warm = torch.utils.data.DataLoader(
        [0], num_workers=1, multiprocessing_context=workers.context()
    )
    next(iter(warm))  # the fork server started: the timeout below is the stuck worker's
    output = tmp_path / "probe"
    with pytest.raises(workers.LoaderError) as error:
        run(checkpoints, description, output, workers=1, loader_timeout_s=10)
    assert str(error.value).startswith(f"{output}: the faithful probe of {checkpoints[0]}, ")
    assert "DataLoader timed out after 10 seconds" in str(error.value)
    assert "(faithful.loader_timeout_s: 10)" in str(error.value)
    assert not multiprocessing.active_children()
