"""Data sources read through the kit's real loaders, built here in each format, and bad data."""

from __future__ import annotations

import importlib
import pickle
import shutil
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from kit.data import kinds, prefetch
from kit.data import pipeline as data
from kit.data.fixtures import write_cifar, write_image_folder, write_imagenet_shift, write_inat18
from kit.data.kinds import imagefolder
from kit.data.kinds.base import DataError
from kit.data.kinds.imagefolder import ImageFolderKind
from kit.data.kinds.imagenet_shifts import ShiftedImageNetKind
from kit.data.kinds.images import open_image
from kit.data.preflight import preflight
from kit.data.settings import DataSettings
from kit.data.synthetic import SyntheticWorld, bayes_ceiling
from kit.data.synthetic_settings import CUES, SyntheticSettings
from kit.files.paths import REPO_ROOT
from kit.params.params import ParameterError
from kit.probes.settings import PAPER_WEIGHT_DECAYS
from kit.runtime import machine

WORLD = SyntheticSettings(
    num_train=64,
    num_eval=32,
    noise=0.05,
    components=[
        {"weight": 3.0, "cues": ["colour"]},
        {"weight": 1.0, "cues": ["shape", "position"]},
    ],
)


def build(config: dict, num_classes: int, **kwargs) -> data.RunData:
    options = (
        dict(
            seed=0,
            batch_size=4,
            rank=0,
            world_size=1,
            num_workers=0,
            recalibration_batches=1,
            pin_memory=False,
        )
        | kwargs
    )
    return data.build(DataSettings(**config), num_classes, **options)


def first_batch(run: data.RunData) -> tuple[torch.Tensor, torch.Tensor]:
    run.order.set_position(0, 0)
    return next(iter(run.train))


@pytest.fixture()
def image_folder(tmp_path: Path) -> Path:
    return write_image_folder(tmp_path, ("ant", "bee", "cat"), {"train": 4, "val": 2})


def test_image_folder_is_read_with_algoperf_pipeline(image_folder: Path) -> None:
    run = build({"kind": "imagefolder", "root": str(image_folder), "image_size": 16}, 3)
    assert (run.num_train, run.num_eval) == (12, 6)
    images, labels = first_batch(run)
    assert images.shape == (4, 3, 16, 16) and set(labels.tolist()) <= {0, 1, 2}
    eval_images, eval_labels = next(iter(run.eval))
    assert eval_labels.tolist() == [0, 0, 1, 1]
    # eval preprocessing is deterministic, training augmentation is seeded per (epoch, index)
    assert torch.equal(eval_images, next(iter(run.eval))[0])
    assert torch.equal(images, first_batch(run)[0])


def test_augmentation_depends_on_epoch_and_index_not_on_workers(image_folder: Path) -> None:
    config = {"kind": "imagefolder", "root": str(image_folder), "image_size": 16}
    alone = build(config, 3)
    with_workers = build(config, 3, num_workers=2)
    assert torch.equal(first_batch(alone)[0], first_batch(with_workers)[0])
    # what the /dev/shm check (kit check) assumes each worker holds
    assert with_workers.train.prefetch_factor == machine.PREFETCH_FACTOR
    samples = alone.train.dataset
    assert not torch.equal(samples[(0, 3)][0], samples[(1, 3)][0])


def test_a_split_is_listed_once_per_process_until_a_class_folder_changes(
    tmp_path: Path, monkeypatch
) -> None:
    """A chain of runs on ImageNet listed its 1.28M files again for every run."""
    root = write_image_folder(tmp_path / "images", ("ant", "bee"), {"train": 2, "val": 1})
    scans = []
    real_scan = imagefolder._scan
    monkeypatch.setattr(imagefolder, "_scan", lambda folder: scans.append(1) or real_scan(folder))
    first = imagefolder.image_folder(root, "train")
    assert imagefolder.image_folder(root, "train").samples == first.samples and len(scans) == 1
    shutil.copy(first.samples[0][0], root / "train" / "bee" / "added.png")
    again = imagefolder.image_folder(root, "train")
    assert len(scans) == 2 and len(again.samples) == len(first.samples) + 1


@pytest.mark.parametrize(
    "kind, classes, train_size, test_size, bytes_keys",
    [
        ("cifar10", 10, 5 * 6, 6, False),
        ("cifar100", 100, 6, 6, False),
        ("cifar10", 10, 5 * 6, 6, True),
        ("cifar100", 100, 6, 6, True),
    ],
)
def test_cifar_in_torchvision_format(
    tmp_path: Path, kind: str, classes: int, train_size: int, test_size: int, bytes_keys: bool
) -> None:
    write_cifar(tmp_path, kind, 6, bytes_keys)
    assert not preflight(DataSettings(kind=kind, root=str(tmp_path), image_size=32))
    run = build({"kind": kind, "root": str(tmp_path), "image_size": 32}, classes)
    assert (run.num_train, run.num_eval) == (train_size, test_size)
    images, labels = first_batch(run)
    assert images.shape == (4, 3, 32, 32) and int(labels.max()) < classes
    test_file = next(p for p in tmp_path.rglob("*") if p.name in ("test_batch", "test"))
    raw = pickle.loads(test_file.read_bytes())
    raw = {key.decode() if isinstance(key, bytes) else key: value for key, value in raw.items()}
    eval_images, eval_labels = next(iter(run.eval))
    label_key = "labels" if kind == "cifar10" else "fine_labels"
    assert eval_labels.tolist() == raw[label_key][:4]
    # eval keeps the pixels at 32 px; normalisation happens on the device
    assert eval_images.dtype == torch.uint8
    assert torch.equal(eval_images[0], torch.tensor(raw["data"][0]).reshape(3, 32, 32))
    first = torch.tensor(raw["data"][0]).reshape(3, 32, 32).float() / 255
    mean = torch.tensor(prefetch.IMAGENET_MEAN)[:, None, None]
    std = torch.tensor(prefetch.IMAGENET_STD)[:, None, None]
    assert torch.allclose(prefetch.normalise(eval_images)[0], (first - mean) / std, atol=1e-5)


def test_cifar_workers_get_a_handle_to_its_arrays_not_a_copy(tmp_path: Path) -> None:
    """A fork server's worker receives its dataset pickled: CIFAR's arrays travel as handles to
    shared memory (a few hundred bytes, whatever the dataset's size), and the workers read the
    same batches as the loading process."""
    write_cifar(tmp_path, "cifar10", 200)
    config = {"kind": "cifar10", "root": str(tmp_path), "image_size": 32}
    alone, with_workers = build(config, 10), build(config, 10, num_workers=2)
    split = with_workers.train.dataset.base
    assert not split.images.is_shared()  # no shared memory for a loader without workers
    assert with_workers.train.multiprocessing_context.get_start_method() == "forkserver"
    for left, right in zip(first_batch(alone), first_batch(with_workers), strict=True):
        assert torch.equal(left, right)
    assert split.images.is_shared() and split.labels.is_shared()  # moved for the first worker
    sent = len(ForkingPickler.dumps(split))  # what the fork server passes to each worker
    assert sent < 4096 < split.images.numel(), sent
    assert not alone.train.dataset.base.images.is_shared()
    for left, right in zip(next(iter(alone.eval)), next(iter(with_workers.eval)), strict=True):
        assert torch.equal(left, right)


def test_cifar_with_a_missing_file_is_refused(tmp_path: Path) -> None:
    write_cifar(tmp_path, "cifar10", 2)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match="cifar-10-batches-py.*data_batch_3"):
        build({"kind": "cifar10", "root": str(tmp_path), "image_size": 32}, 10)


def test_inat18_json_layout(tmp_path: Path) -> None:
    write_inat18(tmp_path, range(3), {"train": 6, "val": 3})
    run = build({"kind": "inat18", "root": str(tmp_path), "image_size": 16}, 3)
    assert (run.num_train, run.num_eval) == (6, 3)
    assert next(iter(run.eval))[1].tolist() == [0, 1, 2]
    assert first_batch(run)[0].shape == (4, 3, 16, 16)
    with pytest.raises(DataError, match="3 classes but .*num_classes: 8142"):
        build({"kind": "inat18", "root": str(tmp_path), "image_size": 16}, 8142)


def test_missing_and_empty_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=f"{tmp_path / 'nowhere'}: data folder does not exist"):
        build({"kind": "imagefolder", "root": str(tmp_path / "nowhere"), "image_size": 16}, 3)
    (tmp_path / "empty" / "train").mkdir(parents=True)
    (tmp_path / "empty" / "val").mkdir()
    with pytest.raises(DataError, match="empty/train: no class folders with images"):
        build({"kind": "imagefolder", "root": str(tmp_path / "empty"), "image_size": 16}, 3)


def test_an_empty_class_folder_is_named(image_folder: Path) -> None:
    for image in (image_folder / "val" / "bee").iterdir():
        image.unlink()
    config = {"kind": "imagefolder", "root": str(image_folder), "image_size": 16}
    expected = f"{image_folder / 'val' / 'bee'}: class folder without images"
    assert preflight(DataSettings(**config)) == [expected]
    with pytest.raises(DataError, match=f"^{expected}$"):
        build(config, 3)


def test_every_data_fault_is_reported_at_once(image_folder: Path) -> None:
    (image_folder / "train" / "bee" / "bee1.JPEG").write_bytes(b"\xff\xd8 torn")
    (image_folder / "val" / "cat" / "cat0.JPEG").write_bytes(b"\xff\xd8 torn")
    with pytest.raises(DataError, match="(?s)2 unreadable image.*bee1.JPEG.*cat0.JPEG"):
        build({"kind": "imagefolder", "root": str(image_folder), "image_size": 16}, 3)
    (image_folder / "val" / "dog").mkdir()
    with pytest.raises(DataError) as error:
        build({"kind": "imagefolder", "root": str(image_folder), "image_size": 16}, 3)
    assert "val/dog: class folder without images" in str(error.value)
    assert "bee1.JPEG" in str(error.value)  # the training split's fault as well


def test_corrupt_image_is_named_before_training(image_folder: Path) -> None:
    broken = image_folder / "train" / "bee" / "bee1.JPEG"
    broken.write_bytes(b"\xff\xd8\xff\xe0 definitely not a whole jpeg")
    config = {"kind": "imagefolder", "root": str(image_folder), "image_size": 16}
    with pytest.raises(DataError, match="(?s)1 unreadable image.*bee1.JPEG"):
        build(config, 3)
    # without the up-front check, reading it still names the file
    samples = build(config | {"verify_images": False}, 3).train.dataset
    with pytest.raises(DataError, match="bee1.JPEG: cannot read image.*replace or remove"):
        for index in range(len(samples)):
            samples[(0, index)]


def test_class_count_mismatch_is_refused(image_folder: Path) -> None:
    with pytest.raises(DataError, match="train split has 3 classes but .*num_classes: 5"):
        build({"kind": "imagefolder", "root": str(image_folder), "image_size": 16}, 5)


def test_an_unknown_kind_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(
        ValidationError,
        match=r"(?s)kind.*unknown dataset kind 'cifar10x'; did "
        r"you mean 'cifar10'\? \(known: .*cifar10.*inat18",
    ):
        DataSettings(kind="cifar10x", root="/data", image_size=32)
    with pytest.raises(ParameterError, match="unknown dataset kind 'inat'.*did you mean 'inat18'"):
        kinds.get("inat")


def test_every_kind_names_a_probe_grid_and_cifar_its_class_count(tmp_path: Path) -> None:
    assert {kinds.get(name).probe_grid for name in kinds.KINDS} <= set(PAPER_WEIGHT_DECAYS)
    write_cifar(tmp_path, "cifar100", 2)
    cifar100 = kinds.get("cifar100")
    data = DataSettings(kind="cifar100", root=str(tmp_path), image_size=32)
    assert len(cifar100.open_split(data, "eval", 100).classes) == cifar100.num_classes == 100


def test_a_new_kind_is_one_class_and_one_registration(
    image_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Places(ImageFolderKind):
        name = "places_test"

    monkeypatch.setattr(kinds.KINDS, "_entries", dict(kinds.KINDS._entries))
    kinds.KINDS.register(Places.name, Places())
    run = build({"kind": "places_test", "root": str(image_folder), "image_size": 16}, 3)
    assert (run.num_train, run.num_eval) == (12, 6)
    assert not preflight(DataSettings(kind="places_test", root=str(image_folder), image_size=16))
    with pytest.raises(ValueError, match="registered twice"):
        kinds.KINDS.register(Places.name, Places())


def test_synthetic_world_is_deterministic_and_its_cues_carry_the_label() -> None:
    train = SyntheticWorld(WORLD, 6, 16, "train")
    again = SyntheticWorld(WORLD, 6, 16, "train")
    assert all(torch.equal(train[i][0], again[i][0]) for i in range(5))
    assert not torch.equal(train[0][0], SyntheticWorld(WORLD, 6, 16, "eval")[0][0])
    other_seed = SyntheticWorld(WORLD.model_copy(update={"seed": 1}), 6, 16, "train")
    assert not torch.equal(train[0][0], other_seed[0][0])
    draws = [train.draw(i) for i in range(len(train))]
    for d in draws:
        carrying = WORLD.components[d.component].cues
        assert all(d.cue_values[cue] == d.label for cue in carrying)
    component_share = np.mean([d.component == 0 for d in draws])
    assert 0.6 <= component_share <= 0.9  # weight 3 of 4


def test_cue_strength_zero_makes_a_cue_uninformative() -> None:
    weak = WORLD.model_copy(update={"num_train": 400, "strength": {"colour": 0.0}})
    world = SyntheticWorld(weak, 4, 16, "train")
    colour = [d for d in (world.draw(i) for i in range(400)) if d.component == 0]
    agreement = np.mean([d.cue_values["colour"] == d.label for d in colour])
    assert agreement == pytest.approx(0.25, abs=0.08)


def test_synthetic_images_show_their_colour() -> None:
    world = SyntheticWorld(WORLD.model_copy(update={"noise": 0.0}), 3, 32, "train")
    for index in range(6):
        image, _ = world[index]
        pixels = image.reshape(3, -1) * 0.25 + 0.5
        objects = pixels[:, (pixels - 0.5).abs().sum(0) > 0.05]
        hue = world.draw(index).cue_values["colour"]
        assert int(objects.mean(1).argmax()) == [0, 1, 2][hue]  # red, green, blue for 3 classes


def test_absent_cues_are_not_shown() -> None:
    world = SyntheticSettings(
        num_train=200,
        num_eval=8,
        noise=0.0,
        components=[
            {"weight": 1.0, "cues": ["texture"], "absent": ["colour", "shape", "position"]}
        ],
    )
    rendered = SyntheticWorld(world, 10, 24, "train")
    draws = [rendered.draw(i) for i in range(200)]
    assert all(
        d.cue_values["colour"] is None
        and d.cue_values["position"] is None
        and d.cue_values["shape"] is None
        and d.cue_values["texture"] == d.label
        for d in draws
    )
    pixels = torch.stack([rendered[i][0] for i in range(20)]) * 0.25 + 0.5
    assert (pixels[:, 0] - pixels[:, 1]).abs().max() < 1e-6  # grey: red = green everywhere
    middle = pixels[:, :, 12, 12]  # a centred disc covers the middle pixel
    assert ((middle - 0.5).abs() > 0.1).all()


def test_every_shape_class_renders_a_different_figure() -> None:
    world = SyntheticSettings(
        num_train=400,
        num_eval=8,
        noise=0.0,
        strength={"shape": 1.0},
        components=[
            {"weight": 1.0, "cues": ["shape"], "absent": ["colour", "texture", "position"]}
        ],
    )
    rendered = SyntheticWorld(world, 10, 24, "train")
    masks: dict[int, torch.Tensor] = {}
    for index in range(400):
        image, label = rendered[index]
        masks.setdefault(label, ((image[0] * 0.25 + 0.5) > 0.6).float())
    assert sorted(masks) == list(range(10))
    for a in range(10):
        for b in range(a + 1, 10):  # each pair differs in at least 10 pixels of 576
            assert (masks[a] != masks[b]).sum() >= 10, (a, b)


@pytest.mark.parametrize(
    "components, strength, ceiling",
    [
        ([{"weight": 1.0, "cues": ["colour"]}], 1.0, 1.0),
        ([{"weight": 1.0, "cues": ["colour"]}], 0.9, 0.91),  # 0.9 + 0.1 x a lucky random class
        # one cue each, the others random: the classifier cannot tell which cue to read
        ([{"weight": 1.0, "cues": ["colour"]}, {"weight": 1.0, "cues": ["shape"]}], 1.0, 0.55),
        # absent colour marks the second component: both can be read
        (
            [
                {"weight": 0.6, "cues": ["colour", "shape"]},
                {"weight": 0.4, "cues": ["texture"], "absent": ["colour"]},
            ],
            1.0,
            1.0,
        ),
    ],
)
def test_bayes_ceiling(components: list[dict], strength: float, ceiling: float) -> None:
    world = SyntheticSettings(
        num_train=1,
        num_eval=1,
        components=components,
        strength=dict.fromkeys(["colour", "shape", "texture"], strength),
    )
    assert bayes_ceiling(world, 10) == pytest.approx(ceiling, abs=1e-3)


def test_bayes_ceiling_matches_the_best_lookup_table_learned_from_samples() -> None:
    world = SyntheticSettings(
        num_train=40000,
        num_eval=1,
        components=[
            {"weight": 0.5, "cues": ["colour"]},
            {"weight": 0.3, "cues": ["shape"]},
            {"weight": 0.2, "cues": ["texture"]},
        ],
        strength=dict.fromkeys(CUES, 0.9),
    )
    drawn = SyntheticWorld(world, 4, 8, "train")
    draws = [drawn.draw(i) for i in range(40000)]
    seen = [(tuple(d.cue_values[c] for c in CUES), d.label) for d in draws]
    counts: dict[tuple, np.ndarray] = {}
    for values, label in seen[:20000]:  # learn the most frequent label of each combination
        counts.setdefault(values, np.zeros(4))[label] += 1
    right = [counts[values].argmax() == label for values, label in seen[20000:] if values in counts]
    assert bayes_ceiling(world, 4) == pytest.approx(np.mean(right), abs=0.015)


@pytest.fixture()
def benchmark_modules(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """benchmarks/input_pipeline.py (the former PIL + float32 worker pipeline it measures
    against) and benchmarks/photo_fixtures.py (photo-like images), imported as the benchmark
    imports them."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    return SimpleNamespace(
        pipeline=importlib.import_module("input_pipeline"),
        photos=importlib.import_module("photo_fixtures"),
    )


@pytest.mark.parametrize("train", [False, True])
def test_uint8_tensor_pipeline_matches_the_former_pil_float_pipeline(
    tmp_path: Path, train: bool, benchmark_modules: SimpleNamespace
) -> None:
    """Same decode, same crops from the same seed; tensor resizing rounds differently from PIL
    by at most one grey level on a few pixels."""
    one_level = 1 / 255 / min(prefetch.IMAGENET_STD)
    for seed in range(3):
        path = tmp_path / f"photo{seed}.jpg"
        Image.fromarray(benchmark_modules.photos.photo_like(375, 500, seed)).save(path, quality=90)
        torch.manual_seed(seed)
        former = benchmark_modules.pipeline.pil_float_transform(64, train)(
            Image.open(path).convert("RGB")
        )
        torch.manual_seed(seed)
        pixels = data.augmentation("algoperf", 64, train, True)(open_image(str(path)))
        assert pixels.dtype == torch.uint8 and pixels.shape == (3, 64, 64)
        difference = (prefetch.normalise(pixels[None])[0] - former).abs()
        assert difference.max() <= 1.01 * one_level
        assert difference.mean() <= 0.02 * one_level


def test_device_batches_normalise_uint8_on_the_device_and_keep_floats() -> None:
    pixels = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)
    labels = torch.arange(4)
    ((images, same_labels),) = prefetch.DeviceBatches(
        [(pixels, labels)], torch.device("cpu"), torch.channels_last
    )
    assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)
    mean = torch.tensor(prefetch.IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(prefetch.IMAGENET_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(images, (pixels / 255 - mean) / std)
    assert torch.equal(same_labels, labels)
    standardised = torch.randn(2, 3, 8, 8)  # e.g. synthetic renders: taken as they are
    assert torch.equal(prefetch.normalise(standardised), standardised)


#: ImageNet-1k's classes as the fixture's probe was fitted on them (wnids, in label order)
WNIDS = [f"n{i:08d}" for i in range(12)]


@pytest.mark.parametrize(
    ("kind", "classes", "indices"),
    [
        # V2's folders are class indices, sorted as numbers (as text, 10 would come before 2)
        ("imagenet-v2", ["0", "2", "10"], [0, 2, 10]),
        # R and A hold 200 of the 1,000 classes: their predictions are taken among those
        ("imagenet-r", [WNIDS[1], WNIDS[7]], [1, 7]),
        ("imagenet-a", [WNIDS[3], WNIDS[11]], [3, 11]),
        ("imagenet-sketch", WNIDS, list(range(12))),
    ],
)
def test_imagenet_shifts_are_read_in_their_own_layout_with_imagenets_labels(
    kind: str, classes: list[str], indices: list[int], tmp_path: Path
) -> None:
    write_imagenet_shift(tmp_path, kind, classes[::-1], count=2)
    shift = kinds.get(kind)
    assert isinstance(shift, ShiftedImageNetKind) and shift.probe_grid == "imagenet"
    settings = DataSettings(kind=kind, root=str(tmp_path), image_size=16)
    assert not preflight(settings)
    split = shift.open_split(settings, "eval", 1000)
    assert split.classes == classes and len(split) == 2 * len(classes)
    path, label = split.samples[-1]
    assert Path(path).parent.name == classes[label] and path.endswith(shift.suffix)
    assert shift.imagenet_indices(split.classes, WNIDS) == indices
    image, _ = split[0]
    assert image.dtype == torch.uint8 and image.shape[0] == 3
    with pytest.raises(DataError, match=f"kind {kind} is an evaluation set only"):
        shift.open_split(settings, "train", 1000)


def test_imagenet_shifts_name_their_source_and_refuse_foreign_classes(tmp_path: Path) -> None:
    missing = preflight(DataSettings(kind="imagenet-r", root=str(tmp_path / "r"), image_size=16))
    assert "github.com/hendrycks/imagenet-r" in missing[0] and "/imagenet-r/<wnid>/" in missing[0]
    write_imagenet_shift(tmp_path, "imagenet-a", ["n99999999"], count=1)
    shift = kinds.get("imagenet-a")
    split = shift.open_split(
        DataSettings(kind="imagenet-a", root=str(tmp_path), image_size=16), "eval", 1000
    )
    with pytest.raises(DataError, match="n99999999 are not among the 12 classes"):
        shift.imagenet_indices(split.classes, WNIDS)
    empty = tmp_path / "v2"
    (empty / "imagenetv2-matched-frequency-format-val").mkdir(parents=True)
    assert "expected a non-empty folder for kind imagenet-v2" in " ".join(
        preflight(DataSettings(kind="imagenet-v2", root=str(empty), image_size=16))
    )
