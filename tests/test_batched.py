"""`data.decode: gpu`: JPEGs decoded and cropped on whole batches by the run's device, checked on
CPU tensors through the same code: boxes with RandomResizedCrop's distribution, crops equal to
the per-image transform, and the training loader path end to end."""

from __future__ import annotations

import contextlib
import os
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError
from scipy import stats
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from kit.data import batched
from kit.data import pipeline as data
from kit.data.kinds.images import ImageList
from kit.data.prefetch import DeviceBatches
from kit.data.settings import DataSettings


def boxes_for(height: int, width: int, count: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    draws = torch.stack([batched.sample_draws(generator) for _ in range(count)])
    return batched.crop_boxes(torch.full((count,), height), torch.full((count,), width), draws)


def test_boxes_lie_inside_the_image_with_allowed_areas_and_ratios() -> None:
    boxes = boxes_for(375, 500, 4000, 0)
    top, left, h, w = boxes.T
    assert (top >= 0).all() and (left >= 0).all()
    assert (top + h <= 375).all() and (left + w <= 500).all()
    share, ratio = (h * w).double() / (375 * 500), w.double() / h
    assert share.min() >= 0.07 and share.max() <= 1.0
    assert ratio.min() >= 0.74 and ratio.max() <= 1.35


def test_boxes_follow_torchvisions_random_resized_crop_distribution() -> None:
    ours = boxes_for(375, 500, 4000, 1).double()
    torch.manual_seed(1)
    image = torch.zeros(3, 375, 500, dtype=torch.uint8)
    theirs = torch.tensor(
        [v2.RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(4000)]
    ).double()
    for a, b in zip(_features(ours), _features(theirs), strict=True):
        assert stats.ks_2samp(a.numpy(), b.numpy()).pvalue > 1e-3


def _features(boxes: torch.Tensor) -> list[torch.Tensor]:
    """Area, aspect ratio, and the crop centre across and down."""
    top, left, h, w = boxes.T
    return [h * w, w / h, left + w / 2, top + h / 2]


def test_an_image_no_try_fits_gets_the_central_crop_of_the_nearest_ratio() -> None:
    # 10 x 1000: a crop of at least 8% of the area with ratio <= 4/3 never fits in 10 rows
    assert boxes_for(10, 1000, 5, 2).tolist() == [[0, 493, 10, 13]] * 5


def test_batched_crops_equal_the_per_image_transform() -> None:
    generator = torch.Generator().manual_seed(3)
    images = [
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator)
        for h, w in ((60, 80), (90, 50), (40, 40))
    ]
    draws = torch.stack([batched.sample_draws(generator) for _ in images])
    out = batched.resized_crops(images, draws, 24)
    assert out.shape == (3, 3, 24, 24) and out.dtype == torch.uint8
    sizes = torch.tensor([[60, 80], [90, 50], [40, 40]])
    boxes = batched.crop_boxes(sizes[:, 0], sizes[:, 1], draws)
    for image, box, row, result in zip(images, boxes.tolist(), draws, out, strict=True):
        expected = TF.resized_crop(image, *box, [24, 24], antialias=True)
        if row[-1] < 0.5:
            expected = TF.horizontal_flip(expected)
        assert (result.int() - expected.int()).abs().max() <= 1  # rounding of the last bit


def test_about_half_the_batch_is_flipped() -> None:
    generator = torch.Generator().manual_seed(4)
    draws = torch.stack([batched.sample_draws(generator) for _ in range(2000)])
    assert stats.binomtest(int((draws[:, -1] < 0.5).sum()), 2000).pvalue > 1e-3


@pytest.fixture()
def jpeg_folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for split, count in (("train", 4), ("val", 2)):
        for label in ("ant", "bee", "cat"):
            for i in range(count):
                pixels = rng.integers(0, 256, (70 + 7 * i, 90, 3), dtype=np.uint8)
                folder = tmp_path / split / label
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray(pixels).save(folder / f"{label}{i}.JPEG", format="JPEG")
    # a PNG under a .JPEG name, as ImageNet holds a few: decoded by the worker instead
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
        tmp_path / "train" / "ant" / "ant0.JPEG", format="PNG"
    )
    return tmp_path


def _run(
    root: Path, decode: str, classes: int = 3, batch_size: int = 6, workers: int = 0
) -> data.RunData:
    """One rank's loaders over the image folder `root` at 64 pixels, at the first batch."""
    settings = DataSettings(kind="imagefolder", root=str(root), image_size=64, decode=decode)
    run = data.build(
        settings,
        classes,
        seed=0,
        batch_size=batch_size,
        rank=0,
        world_size=1,
        num_workers=workers,
        recalibration_batches=1,
        pin_memory=False,
    )
    run.order.set_position(0, 0)
    return run


def _batches(root: Path, decode: str) -> list[torch.Tensor]:
    run = _run(root, decode)
    return [images for images, _ in DeviceBatches(run.train, torch.device("cpu"))]


def test_the_loader_decodes_on_the_device_reproducibly(jpeg_folder: Path) -> None:
    on_device, again = _batches(jpeg_folder, "gpu"), _batches(jpeg_folder, "gpu")
    in_workers = _batches(jpeg_folder, "cpu")
    assert [b.shape for b in on_device] == [b.shape for b in in_workers] == [(6, 3, 64, 64)] * 2
    assert all(b.dtype == torch.float32 and torch.isfinite(b).all() for b in on_device)
    assert all(torch.equal(a, b) for a, b in zip(on_device, again, strict=True))
    # standardised pixels of random pictures: about zero mean, unit-order spread
    assert abs(float(torch.cat(on_device).mean())) < 0.5


def test_a_loader_worker_can_hand_over_the_file_bytes(jpeg_folder: Path) -> None:
    # a worker sends its batch through a queue that shares each tensor's memory by file
    # descriptor; torchvision's read_file maps the file privately and keeps no descriptor, so its
    # tensor cannot be sent (EBADF in the queue's feeder thread, and the run waits forever)
    run = _run(jpeg_folder, "gpu", workers=1)
    samples = [run.train.dataset[(0, index)] for index in range(6)]
    ForkingPickler.dumps(run.train.collate_fn(samples))


def test_gpu_decode_is_refused_where_it_cannot_apply() -> None:
    with pytest.raises(ValidationError, match="decode: gpu"):
        DataSettings(kind="imagefolder", root="/data", image_size=32, decode="gpu")
    with pytest.raises(ValidationError, match="decode: gpu"):
        DataSettings(
            kind="imagefolder", root="/data", image_size=224, augment="crop_flip", decode="gpu"
        )


@pytest.fixture()
def many_jpegs(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    for split, count in (("train", 48), ("val", 1)):
        for label in ("ant", "bee"):
            folder = tmp_path / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(
                    folder / f"{label}{i}.JPEG", format="JPEG"
                )
    return tmp_path


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts /proc/self/fd")
@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 12 workers on fewer cores
def test_a_batch_crosses_from_a_worker_with_a_constant_number_of_descriptors(
    many_jpegs: Path,
) -> None:
    # each tensor a worker sends is shared by a file descriptor that stays open in this process
    # while the tensor lives; one tensor per JPEG held thousands open (workers x prefetch x
    # batch) and ended in "Too many open files". Twelve workers, as the paper profile's loaders
    # use, each with its prefetch of 4
    run = _run(many_jpegs, "gpu", classes=2, batch_size=16, workers=12)
    batches = iter(run.train)
    held = [next(batches)]  # the workers have started
    before = _open_descriptors()
    held += [next(batches) for _ in range(5)]
    grown = _open_descriptors() - before
    assert grown <= 5 * 6, f"{grown} descriptors for 5 batches of 16 images"
    first = held[0][0]
    assert len(first.items()) == 16 and all(item.dim() == 1 for item in first.items())
    del batches


def test_a_packed_batch_unpacks_to_its_items() -> None:
    items = [
        torch.arange(5, dtype=torch.uint8),
        torch.arange(3 * 2 * 4, dtype=torch.uint8).view(3, 2, 4),
        torch.tensor([7], dtype=torch.uint8),
    ]
    packed = batched.EncodedBatch.pack(items, torch.zeros(3, batched.DRAWS), 8)
    assert packed.data.dim() == 1 and packed.offsets.tolist() == [0, 5, 29, 30]
    assert all(torch.equal(a, b) for a, b in zip(packed.items(), items, strict=True))


def _save(path: Path, mode: str, **options: object) -> Path:
    rng = np.random.default_rng(6)
    pixels = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).convert(mode).save(path, format="JPEG", quality=95, **options)
    return path


@pytest.mark.parametrize(
    ("mode", "options", "on_device"),
    [
        ("RGB", {}, True),
        ("L", {}, False),
        ("CMYK", {}, False),
        ("RGB", {"progressive": True}, False),
    ],
    ids=["baseline", "greyscale", "cmyk", "progressive"],
)
def test_jpegs_the_device_does_not_take_are_decoded_to_rgb_by_the_worker(
    tmp_path: Path, mode: str, options: dict, on_device: bool
) -> None:
    path = _save(tmp_path / "x.JPEG", mode, **options)
    bytes_ = torch.from_numpy(np.fromfile(path, dtype=np.uint8))
    assert batched.gpu_decodable(bytes_) is on_device
    base = ImageList([(str(path), 0)], ["x"])
    item, _, _ = data.EncodedSamples(base, seed=0)[(0, 0)]
    assert item.dim() == (1 if on_device else 3)
    image = batched.EncodedBatch.pack([item], torch.zeros(1, batched.DRAWS), 8).items()[0]
    if on_device:
        image = decode_jpeg(image, mode=ImageReadMode.RGB)
    with Image.open(path) as opened:
        expected = torch.from_numpy(np.array(opened.convert("RGB"))).permute(2, 0, 1)
    assert image.shape == expected.shape == (3, 48, 64)
    assert (image.float() - expected.float()).abs().mean() < 3  # decoders round differently


def test_a_file_too_short_for_a_frame_header_is_not_sent_to_the_device() -> None:
    assert batched.jpeg_frame(np.frombuffer(b"\xff\xd8\xff\xe0\x00\x10JFIF", np.uint8)) is None
    assert not batched.gpu_decodable(torch.tensor([0x89, 0x50, 0x4E, 0x47], dtype=torch.uint8))


def test_the_device_decoder_starts_after_the_current_stream_drains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torchvision's CUDA decoder writes, from a stream of its own, blocks the caching allocator
    # hands out while kernels queued on the current stream may still read them
    calls: list[str] = []

    class Stream:
        def synchronize(self) -> None:
            calls.append("synchronize")

    def decode(
        encoded: list[torch.Tensor], mode: ImageReadMode, device: torch.device
    ) -> list[torch.Tensor]:
        calls.append(f"decode on {device}")
        return [torch.zeros(3, 2, 2, dtype=torch.uint8) for _ in encoded]

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(batched, "decode_jpeg", decode)
    batched.decoded_jpegs([torch.zeros(4, dtype=torch.uint8)], torch.device("cuda", 0))
    assert calls == ["synchronize", "decode on cuda:0"]
    calls.clear()
    batched.decoded_jpegs([torch.zeros(4, dtype=torch.uint8)], torch.device("cpu"))
    assert calls == ["decode on cpu"]


def test_prepared_batches_are_held_for_the_compute_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    # made on the side stream, used on the compute stream: the compute stream waits for the
    # side one, and each tensor is recorded on it so its memory is not reused too early
    log: list[str] = []

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_stream(self, other: Stream) -> None:
            log.append(f"{self.name} waits for {other.name}")

    class Tensor:
        def __init__(self, name: str) -> None:
            self.name = name

        def record_stream(self, stream: Stream) -> None:
            log.append(f"{self.name} recorded on {stream.name}")

    compute = Stream("compute")
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: Stream("side"))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: compute)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    batches = DeviceBatches([(Tensor("images"), Tensor("labels"))], torch.device("cuda", 0))
    monkeypatch.setattr(batches, "_prepare", lambda batch: batch)
    assert len(list(batches)) == 1
    assert log == [
        "compute waits for side",
        "images recorded on compute",
        "labels recorded on compute",
    ]
