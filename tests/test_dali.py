"""`data.decode: dali`: NVIDIA DALI's CPU pipeline on ImageNet-layout JPEGs, against the kit's
own augmentation (the same crops pixel for pixel, and the CPU path's statistics), its order and
resumption, and the refusal at `kit check` where DALI is not installed. The `mixed` (GPU)
decoder needs a GPU node: these tests run the same graph with the CPU decoder, which needs none.
The dev extra installs DALI wherever NVIDIA publishes its wheels (Linux x86-64 and aarch64), so
there a missing DALI fails these tests rather than skipping them."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from kit.cli import main
from kit.data import pipeline as data
from kit.data.settings import DataSettings
from kit.runtime import provenance
from kit.train import trainer as train
from kit.train.run_files import RunFolder
from kit.train.settings import TrainSettings

#: where NVIDIA publishes DALI wheels, so where pyproject.toml's dev extra installs it
DALI_PLATFORM = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")


def needs_dali() -> None:
    """Skip where DALI has no wheels; elsewhere fail, saying how to install it, where it is
    missing: the dev extra installs it there, so it is missing only from a stale environment."""
    if not DALI_PLATFORM:
        pytest.skip("NVIDIA publishes DALI wheels for Linux x86-64 and aarch64 only")
    try:
        import nvidia.dali  # noqa: F401
    except ImportError as error:
        pytest.fail(
            f"NVIDIA DALI is in the dev extra but cannot be imported ({error}); install it with "
            "`uv sync --locked --inexact --extra dev`"
        )


CLASSES = ("n01", "n02", "n03")
#: training images per class, and the batch: three batches an epoch
PER_CLASS, BATCH = 8, 8


def write_pictures(root: Path) -> Path:
    """ImageNet's layout (root/<split>/<class>/<class><i>.JPEG) of photo-like pictures whose
    channels differ: red rises across (0 to 255), green down (0 to 160), blue is the class's tint
    (140 to 220), plus noise, so that a wrong crop, flip or channel order shows in the pixels, and
    a wrong channel order in the channel means. Sizes vary; a greyscale, a CMYK and a progressive
    JPEG and a PNG under a .JPEG name are among them, as in ImageNet's training files."""
    rng = np.random.default_rng(0)
    for split, count in (("train", PER_CLASS), ("val", 1)):
        for tint, label in enumerate(CLASSES):
            for i in range(count):
                h, w = 90 + 9 * i, 130 - 5 * i
                y, x = np.mgrid[0:h, 0:w]
                pixels = np.stack(
                    [x * 255 / w, y * 160 / h, np.full((h, w), 140.0 + 40 * tint)], -1
                )
                pixels += rng.normal(0, 12, (h, w, 3))
                image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
                folder = root / split / label
                folder.mkdir(parents=True, exist_ok=True)
                kind = {(1, 3): "progressive", (2, 5): "L", (0, 2): "CMYK", (1, 6): "PNG"}
                options = {"progressive": True} if kind.get((tint, i)) == "progressive" else {}
                if kind.get((tint, i)) in ("L", "CMYK"):
                    image = image.convert(kind[(tint, i)])
                image.save(
                    folder / f"{label}{i}.JPEG",
                    format="PNG" if kind.get((tint, i)) == "PNG" else "JPEG",
                    quality=90,
                    **options,
                )
    return root


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pictures(tmp_path_factory.mktemp("pictures"))


def run_data(
    root: Path, decode: str, seed: int = 0, workers: int = 0, **changes: float
) -> data.RunData:
    settings = DataSettings(
        kind="imagefolder", root=str(root), image_size=64, decode=decode, **changes
    )
    return data.build(
        settings,
        len(CLASSES),
        seed=seed,
        batch_size=BATCH,
        rank=0,
        world_size=1,
        num_workers=workers,
        recalibration_batches=1,
        pin_memory=False,
    )


def epoch(
    run: data.RunData, number: int = 0, batches_done: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch's uint8 batches [B, 3, 64, 64] on the CPU and their labels, as the loader's
    items arrive (file bytes to decode, or images the workers augmented)."""
    run.order.set_position(number, batches_done)
    return [
        (images.on(torch.device("cpu")) if hasattr(images, "on") else images, labels)
        for images, labels in run.train
    ]


def test_dali_crops_are_the_kits_crops_of_the_same_draws(pictures: Path) -> None:
    needs_dali()
    dali, kit = epoch(run_data(pictures, "dali")), epoch(run_data(pictures, "gpu"))
    assert len(dali) == len(kit) == len(CLASSES) * PER_CLASS // BATCH
    for (ours, our_labels), (theirs, their_labels) in zip(dali, kit, strict=True):
        assert ours.shape == theirs.shape == (BATCH, 3, 64, 64) and ours.dtype == torch.uint8
        assert torch.equal(our_labels, their_labels)
        difference = (ours.float() - theirs.float()).abs()
        # the same boxes and flips, decoded by libjpeg-turbo both (fancy upsampling) and resized
        # by two antialiased linear kernels: they differ by rounding, measured 0.02 grey levels
        # on average and 2 at most; a crop, flip or channel order gone wrong costs tens of
        # levels on these gradients
        assert float(difference.mean()) < 0.25 and float(difference.max()) <= 4


def test_dali_batches_have_the_statistics_of_the_cpu_path(pictures: Path) -> None:
    needs_dali()
    # the CPU path draws its crops with torch's RandomResizedCrop, not the same numbers: its
    # per-image channel means come from the same distribution, so the two samples' means may
    # differ by chance only, within four standard errors of their difference
    dali, cpu = (
        torch.cat([images for n in range(3) for images, _ in epoch(run, n)]).double()
        for run in (run_data(pictures, "dali"), run_data(pictures, "cpu"))
    )
    assert dali.shape == cpu.shape and dali.shape[1:] == (3, 64, 64)
    ours, theirs = dali.mean((2, 3)), cpu.mean((2, 3))  # [images, channel]
    error = (ours.var(0) / len(ours) + theirs.var(0) / len(theirs)).sqrt()
    assert ((ours.mean(0) - theirs.mean(0)).abs() < 4 * error).all()
    # value ranges: both reach the gradients' ends, and the channels keep their order
    for a, b in ((dali, cpu), (cpu, dali)):
        assert (a.amin((0, 2, 3)) - b.amin((0, 2, 3))).abs().max() <= 16
        assert (a.amax((0, 2, 3)) - b.amax((0, 2, 3))).abs().max() <= 16


def test_dali_order_is_the_samplers_and_resumes_exactly(pictures: Path) -> None:
    needs_dali()
    run = run_data(pictures, "dali")
    first, second = epoch(run, 0), epoch(run, 1)
    cpu = epoch(run_data(pictures, "cpu"), 0)
    assert [labels.tolist() for _, labels in first] == [labels.tolist() for _, labels in cpu]
    assert not torch.equal(first[0][0], second[0][0])  # each epoch crops afresh
    # a run resumed after one batch of epoch 1 (a new process: a new loader, with workers)
    resumed = epoch(run_data(pictures, "dali", workers=2), 1, batches_done=1)
    assert len(resumed) == len(second) - 1
    for (a, la), (b, lb) in zip(resumed, second[1:], strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)
    other_seed = epoch(run_data(pictures, "dali", seed=1), 0)
    assert not torch.equal(other_seed[0][0], first[0][0])


def test_the_hardware_decoders_share_reaches_dalis_decoder(
    pictures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_dali()
    from nvidia.dali import fn

    given: list[float] = []
    decoder = fn.decoders.image_slice

    def recorded(*inputs, **arguments):
        given.append(arguments["hw_decoder_load"])
        return decoder(*inputs, **arguments)

    monkeypatch.setattr(fn.decoders, "image_slice", recorded)
    # a share no other test uses, so that the pipeline is built anew (one per process and key)
    run = run_data(pictures, "dali", dali_hw_decoder_load=0.375)
    images, _ = next(iter(run.train))
    assert images.hw_decoder_load == 0.375
    assert images.on(torch.device("cpu")).shape == (BATCH, 3, 64, 64)
    assert given == [0.375]
    assert (
        DataSettings(kind="imagefolder", root="/data", image_size=64).dali_hw_decoder_load == 0.65
    )


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_the_hardware_decoders_share_is_a_fraction(share: float) -> None:
    with pytest.raises(ValidationError, match="dali_hw_decoder_load"):
        DataSettings(kind="imagefolder", root="/data", image_size=64, dali_hw_decoder_load=share)
    for edge in (0.0, 1.0):  # all to the CUDA decoder, all to the hardware one
        DataSettings(kind="imagefolder", root="/data", image_size=64, dali_hw_decoder_load=edge)


def test_dali_without_the_package_is_refused_at_kit_check_saying_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # what an environment without it finds
    with pytest.raises(ValidationError, match=r"decode: dali needs NVIDIA DALI"):
        DataSettings(kind="imagefolder", root="/data", image_size=224, decode="dali")
    monkeypatch.setenv("TIMECAT_DATA", str(tmp_path))
    command = ["check", "03", "--profile", "paper-8xh100", "--set", "train.data.decode=dali"]
    assert main.main(command) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines  # the header, and one line for the one problem
    assert "parameter train.data.decode: dali needs NVIDIA DALI" in lines[1]
    assert "pip install -e '.[dali]'" in lines[1] and "uv sync --extra dali" in lines[1]


def test_dali_is_refused_where_its_crop_does_not_apply() -> None:
    with pytest.raises(ValidationError, match="decode: dali decodes JPEG files"):
        DataSettings(kind="imagefolder", root="/data", image_size=32, decode="dali")
    with pytest.raises(ValidationError, match="decode: dali decodes JPEG files"):
        DataSettings(
            kind="imagefolder", root="/data", image_size=224, augment="crop_flip", decode="dali"
        )


def test_a_training_run_reads_its_batches_through_dali_and_resumes_exactly(
    pictures: Path, tmp_path: Path
) -> None:
    needs_dali()

    def run(name: str, iterations: int) -> dict:
        values = {
            "model": "resnet10",
            "width": 0.125,
            "num_classes": len(CLASSES),
            "seed": 0,
            "data": {
                "kind": "imagefolder",
                "root": str(pictures),
                "image_size": 64,
                "decode": "dali",
            },
            "batch_size": BATCH,
            "iterations": iterations,
            # the schedule of a run of 4 steps (into the second epoch), whether it stops earlier
            "step_hint": 4,
            "eval_every": 4,
            "checkpoint_every": 4,
            "log_every": 2,
            "bn_recalibration_batches": 1,
            "num_workers": 1,
            "output_dir": str(tmp_path / name),
        }
        out = train.train(TrainSettings(**values))
        return torch.load(RunFolder(out).checkpoint, weights_only=True)

    uninterrupted = run("straight", 4)
    # stopped after two of the first epoch's three batches, then resumed in a new loader: its
    # next batches are the uninterrupted run's, or the weights would differ
    assert run("stopped", 2)["step"] == 2
    resumed = run("stopped", 4)
    # it went on from its checkpoint (a second record), not from the start
    assert len(provenance.read(tmp_path / "stopped" / RunFolder.PROVENANCE)) == 2
    assert uninterrupted["step"] == resumed["step"] == 4
    for name, tensor in uninterrupted["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
