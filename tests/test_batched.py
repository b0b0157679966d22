"""`data.decode: gpu`: JPEGs decoded and cropped on whole batches by the run's device, checked on
CPU tensors through the same code: boxes with RandomResizedCrop's distribution, batched crops
within a grey level of the per-image transform, the streams' order of waits and records, and the
training loader path end to end."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from pydantic import ValidationError
from scipy import stats
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from kit.data import batched, crops
from kit.data import pipeline as data
from kit.data.kinds.images import ImageList
from kit.data.prefetch import DeviceBatches
from kit.data.settings import DataSettings
from kit.data.streams import CudaOrder


def boxes_for(height: int, width: int, count: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    draws = torch.stack([crops.sample_draws(generator) for _ in range(count)])
    return crops.crop_boxes(torch.full((count,), height), torch.full((count,), width), draws)


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


def test_crops_equal_the_per_image_transform() -> None:
    generator = torch.Generator().manual_seed(3)
    images = [
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator)
        for h, w in ((60, 80), (90, 50), (40, 40))
    ]
    draws = torch.stack([crops.sample_draws(generator) for _ in images])
    sizes = torch.tensor([[60, 80], [90, 50], [40, 40]])
    boxes = crops.crop_boxes(sizes[:, 0], sizes[:, 1], draws)
    for resize in (crops.resized_crops, crops.batch_resized_crops):
        out = resize(images, draws, 24)
        assert out.shape == (3, 3, 24, 24) and out.dtype == torch.uint8
        for image, box, row, result in zip(images, boxes.tolist(), draws, out, strict=True):
            expected = TF.resized_crop(image, *box, [24, 24], antialias=True)
            if row[-1] < 0.5:
                expected = TF.horizontal_flip(expected)
            assert (result.int() - expected.int()).abs().max() <= 1  # rounding of the last bit


@pytest.fixture()
def photos(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], list[torch.Tensor]]:
    """Photo-like pictures of ImageNet's typical sizes and some larger, as uint8 [3, H, W]
    (benchmarks/photo_fixtures.py, imported as the benchmarks import it)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))
    return lambda count: _photos(importlib.import_module("photo_fixtures").photo_like, count)


def _photos(photo_like: Callable, count: int) -> list[torch.Tensor]:
    sizes = ((375, 500), (500, 375), (333, 500), (240, 320), (600, 800), (120, 90))
    return [
        torch.from_numpy(photo_like(*sizes[k % len(sizes)], k)).permute(2, 0, 1).contiguous()
        for k in range(count)
    ]


@pytest.mark.parametrize("half", [False, True], ids=["float32", "float16"])
@pytest.mark.parametrize("size", [224, 64])
def test_the_batched_resize_stays_within_a_grey_level_of_the_per_image_one(
    size: int, half: bool, photos: Callable[[int], list[torch.Tensor]]
) -> None:
    # both take their boxes from crop_boxes and the same seeded draws; measured on these 24
    # pictures: at most 1 grey level apart, on 0.002 % (224 px) and 0.004 % (64 px) of the
    # pixels (values within float32 error of a half, rounded the other way); from the CPU
    # pipeline's uint8 resized_crop of the same boxes at most 1, 0.18 and 0.11 on average. In
    # float16 (CUDA's default: operands rounded to 11 bits, float32 accumulation, the result
    # rounded to float16; emulated on the CPU) at most 1 from either, on 4.8 % and 4.6 % of the
    # pixels from the per-image resize, 0.18 and 0.12 on average from the CPU pipeline
    images = photos(24)
    generator = torch.Generator().manual_seed(7)
    draws = torch.stack([crops.sample_draws(generator) for _ in images])
    reference = crops.resized_crops(images, draws, size).int()
    batch = crops.batch_resized_crops(images, draws, size, half=half)
    apart = (batch.int() - reference).abs()
    assert apart.max() <= 1 and apart.float().mean() < (0.06 if half else 1e-4)
    pipeline = torch.stack(
        [
            TF.resized_crop(image, *box, [size, size], antialias=True)
            for image, box in zip(images, crops.image_boxes(images, draws), strict=True)
        ]
    )
    pipeline = torch.where(crops.flips(draws)[:, None, None, None], pipeline.flip(-1), pipeline)
    apart = (batch.int() - pipeline.int()).abs()
    assert apart.max() <= 1 and apart.float().mean() < 0.25
    # several groups (at most four of the 600 x 800 pictures' crops each) give the same pixels
    grouped = crops.batch_resized_crops(images, draws, size, group=4 * 3 * 600 * 800, half=half)
    sizes = [box[2:] for box in crops.image_boxes(images, draws)]
    assert len(crops._groups(sizes, 4 * 3 * 600 * 800)) > 2
    assert torch.equal(grouped, batch)


def test_the_filter_weighs_pixels_as_pytorchs_antialiased_resize() -> None:
    # a resize of the identity gives the filter's matrix: down by 3.7 and up by 1.6
    for length, size in ((37, 10), (10, 16)):
        expected = F.interpolate(
            torch.eye(length)[None, None], size=(size, length), mode="bilinear", antialias=True
        )[0, 0]
        weights = crops.filter_weights(torch.tensor([length]), size, length + 5)[0]
        assert torch.allclose(weights[:, :length], expected, atol=1e-6)
        assert (weights[:, length:] == 0).all()


def test_about_half_the_batch_is_flipped() -> None:
    generator = torch.Generator().manual_seed(4)
    draws = torch.stack([crops.sample_draws(generator) for _ in range(2000)])
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
    root: Path,
    decode: str,
    classes: int = 3,
    batch_size: int = 6,
    workers: int = 0,
    hardware: bool = True,
) -> data.RunData:
    """One rank's loaders over the image folder `root` at 64 pixels, at the first batch."""
    settings = DataSettings(
        kind="imagefolder", root=str(root), image_size=64, decode=decode, hardware_jpeg=hardware
    )
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
    packed = batched.EncodedBatch.pack(items, torch.zeros(3, crops.DRAWS), 8)
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
    item, _, _, name = data.EncodedSamples(base, seed=0)[(0, 0)]
    assert name == str(path)
    assert item.dim() == (1 if on_device else 3)
    image = batched.EncodedBatch.pack([item], torch.zeros(1, crops.DRAWS), 8).items()[0]
    if on_device:
        image = batched.decoded_jpegs([image], torch.device("cpu"))[0]
    with Image.open(path) as opened:
        expected = torch.from_numpy(np.array(opened.convert("RGB"))).permute(2, 0, 1)
    assert image.shape == expected.shape == (3, 48, 64)
    assert (image.float() - expected.float()).abs().mean() < 3  # decoders round differently


def test_a_file_too_short_for_a_frame_header_is_not_sent_to_the_device() -> None:
    assert batched.jpeg_frame(np.frombuffer(b"\xff\xd8\xff\xe0\x00\x10JFIF", np.uint8)) is None
    assert not batched.gpu_decodable(torch.tensor([0x89, 0x50, 0x4E, 0x47], dtype=torch.uint8))


class RecordedOrder:
    """kit.data.streams.Order on the CPU: named streams, events and the calls made, in order."""

    def __init__(self, device: torch.device) -> None:
        self.decode, self.side, self.compute = "decode", "side", "compute"
        self.current, self.log, self.events = "compute", [], 0

    @contextlib.contextmanager
    def use(self, stream: str) -> Iterator[None]:
        before, self.current = self.current, stream
        yield
        self.current = before

    def mark(self, stream: str) -> str:
        self.events += 1
        self.log.append(f"event {self.events} after {stream}")
        return f"event {self.events}"

    def hand_over(self, tensors: Iterable[torch.Tensor], event: str, stream: str) -> None:
        self.log.append(f"{stream} waits for {event}")
        names = {1: "labels", 3: "an image", 4: "the batch"}
        self.log += [f"{names[tensor.dim()]} recorded on {stream}" for tensor in tensors]


@pytest.mark.parametrize("hardware", [False, True], ids=["cuda-decoder", "engines"])
def test_the_next_batch_is_decoded_and_cropped_beside_the_step_with_events(
    monkeypatch: pytest.MonkeyPatch,
    jpeg_folder: Path,
    hardware: bool,
    request: pytest.FixtureRequest,
) -> None:
    # the decoder runs on a stream that carries nothing else and hands its outputs to the side
    # stream, which crops them; the compute stream waits for an event after the side stream's
    # work: no host synchronisation (there is none on the stand-in to call), and every tensor
    # crossing streams recorded on the stream that reads it, so the caching allocator keeps it
    # (the engines' outputs are nvImageCodec's own memory, kept alive by the decoder instead:
    # kit.data.hardware; on the CPU, its CPU backend stands in for the engines)
    orders: list[RecordedOrder] = []
    if hardware:
        engines = request.getfixturevalue("engines")
        decode = engines.decode

        def decode_logged(files: list[torch.Tensor], *args: object) -> list:
            orders[0].log.append(f"decode {len(files)} on {orders[0].current}")
            return decode(files, *args)  # type: ignore[arg-type]

    else:
        decode_jpeg = batched.decode_jpeg

        def decode_logged(encoded: list[torch.Tensor], **options: object) -> list[torch.Tensor]:
            orders[0].log.append(f"decode {len(encoded)} on {orders[0].current}")
            return decode_jpeg(encoded, **options)

    def order(device: torch.device) -> RecordedOrder:
        orders.append(RecordedOrder(device))
        return orders[-1]

    run = _run(jpeg_folder, "gpu", hardware=hardware)
    inline = list(DeviceBatches(run.train, torch.device("cpu")))
    if hardware:
        monkeypatch.setattr(engines, "decode", decode_logged)
    else:
        monkeypatch.setattr(batched, "decode_jpeg", decode_logged)
    ordered = list(DeviceBatches(run.train, torch.device("cpu"), order=order))
    assert all(
        torch.equal(a, b)
        for x, y in zip(ordered, inline, strict=True)
        for a, b in zip(x, y, strict=True)
    )
    log = orders[0].log
    # batch 2 is decoded and cropped before batch 1 goes to the step (which runs beside it)
    jpegs = [log[0], log[len(log) // 2]]  # one batch holds the PNG, which the worker decoded
    assert sorted(jpegs) == ["decode 5 on decode", "decode 6 on decode"]
    recorded = [0 if hardware else int(jpeg[7]) for jpeg in jpegs]
    assert log == [
        jpegs[0],
        "event 1 after decode",
        "side waits for event 1",
        *["an image recorded on side"] * recorded[0],
        "event 2 after side",
        "compute waits for event 2",
        "the batch recorded on compute",
        "labels recorded on compute",
        jpegs[1],
        "event 3 after decode",
        "side waits for event 3",
        *["an image recorded on side"] * recorded[1],
        "event 4 after side",
        "compute waits for event 4",
        "the batch recorded on compute",
        "labels recorded on compute",
    ]


def test_cudas_order_waits_on_events_and_records_the_tensors_it_hands_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the stand-ins have no synchronize: a host wait would fail here
    log: list[str] = []

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_event(self, event: Event) -> None:
            log.append(f"{self.name} waits for the event on {event.stream.name}")

    class Event:
        def record(self, stream: Stream) -> None:
            self.stream = stream
            log.append(f"event recorded on {stream.name}")

    class Tensor:
        def record_stream(self, stream: Stream) -> None:
            log.append(f"tensor recorded on {stream.name}")

    made = iter(["side", "decode", "decode"])
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: Stream(next(made)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream("compute"))
    monkeypatch.setattr(torch.cuda, "Event", Event)
    order = CudaOrder(torch.device("cuda", 0))
    assert (order.decode.name, order.side.name, order.compute.name) == ("decode", "side", "compute")
    order.hand_over([Tensor(), Tensor()], order.mark(order.side), order.compute)
    assert log == [
        "event recorded on side",
        "compute waits for the event on side",
        "tensor recorded on compute",
        "tensor recorded on compute",
    ]
    assert CudaOrder(torch.device("cuda", 0), side=False).side.name == "compute"
