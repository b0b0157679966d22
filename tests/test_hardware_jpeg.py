"""`data.decode: gpu` on a GPU's hardware JPEG engines (kit.data.hardware), checked on the CPU with
nvImageCodec's CPU backend standing in for the engines in the same code: each file's crop region
decoded alone, the same pixels as the CUDA decoder's path, every file the engines do not decode
falling back per file and counted, a device without engines said once, and a file no decoder
reads named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from kit.data import batched, hardware
from kit.data import pipeline as data
from kit.data.kinds.base import DataError
from kit.data.prefetch import DeviceBatches
from kit.data.settings import DataSettings

#: one class, one batch of BATCH files: baseline JPEGs but for a progressive and a CMYK one
BATCH = 6
KINDS = {2: ("RGB", {"progressive": True}), 4: ("CMYK", {})}


@pytest.fixture()
def mixed_folder(tmp_path: Path) -> Path:
    """root/{train,val}/pic/<i>.JPEG: baseline JPEGs of different sizes, and among the training
    files a progressive and a CMYK JPEG (decoded by the loader worker, as the engines take
    baseline files only)."""
    rng = np.random.default_rng(1)
    for split, count in (("train", BATCH), ("val", 1)):
        folder = tmp_path / split / "pic"
        folder.mkdir(parents=True)
        for i in range(count):
            h, w = 80 + 6 * i, 110 - 4 * i
            y, x = np.mgrid[0:h, 0:w]
            pixels = np.stack([x * 255 / w, y * 255 / h, np.full((h, w), 90.0)], -1)
            pixels += rng.normal(0, 10, (h, w, 3))
            mode, options = KINDS.get(i, ("RGB", {})) if split == "train" else ("RGB", {})
            image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).convert(mode)
            image.save(folder / f"{i}.JPEG", format="JPEG", quality=90, **options)
    return tmp_path


def _batches(root: Path, hardware_jpeg: bool) -> list[torch.Tensor]:
    settings = DataSettings(
        kind="imagefolder", root=str(root), image_size=64, decode="gpu", hardware_jpeg=hardware_jpeg
    )
    run = data.build(settings, 1, 0, BATCH, 0, 1, 0, 1, pin_memory=False)
    run.order.set_position(0, 0)
    return [images for images, _ in DeviceBatches(run.train, torch.device("cpu"))]


def _logged(engines: hardware.EngineDecoder, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The engines' decode calls, each (files, boxes) it was given."""
    calls: list[tuple] = []
    decode = engines.decode

    def logged(files: list[torch.Tensor], boxes: list | None, stream: object) -> list:
        calls.append((len(files), boxes))
        return decode(files, boxes, stream)

    monkeypatch.setattr(engines, "decode", logged)
    return calls


def test_the_engines_decode_each_crop_region_and_a_progressive_and_a_cmyk_jpeg_fall_back(
    mixed_folder: Path, engines: hardware.EngineDecoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The four baseline files go to the engines, each with its crop box (region decoding); the
    progressive and the CMYK file are decoded by the worker and counted as fallbacks; the batch
    is the one the CUDA decoder's path (whole files, cropped) makes, pixel for pixel."""
    calls = _logged(engines, monkeypatch)
    hardware.FALLBACKS.take()
    (engine_batch,) = _batches(mixed_folder, hardware_jpeg=True)
    assert hardware.FALLBACKS.take() == 2
    assert [count for count, _ in calls] == [BATCH - 2]
    boxes = calls[0][1]
    assert boxes is not None and len(boxes) == BATCH - 2
    assert all(h * w < (80 + 6 * 5) * 110 for _, _, h, w in boxes)  # regions, not whole files
    (cuda_batch,) = _batches(mixed_folder, hardware_jpeg=False)
    assert hardware.FALLBACKS.take() == 2  # the same two, decoded by the worker
    assert torch.equal(engine_batch, cuda_batch)


def test_a_file_the_engines_refuse_falls_back_to_the_cuda_decoder_alone(
    mixed_folder: Path, engines: hardware.EngineDecoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for engines that return nothing for one baseline file of the batch (as
    nvImageCodec does for a file its backend refuses): that file alone is decoded whole by the
    CUDA decoder (the CPU's on this CPU run) and cropped, the batch's pixels unchanged, and the
    count grows by one."""
    decode = engines.decode

    def refusing(files: list[torch.Tensor], boxes: list | None, stream: object) -> list:
        found = decode(files, boxes, stream)
        return [None if index == 1 else image for index, image in enumerate(found)]

    (expected,) = _batches(mixed_folder, hardware_jpeg=True)
    hardware.FALLBACKS.take()
    monkeypatch.setattr(engines, "decode", refusing)
    (refused,) = _batches(mixed_folder, hardware_jpeg=True)
    assert hardware.FALLBACKS.take() == 3
    assert torch.equal(refused, expected)


def _jpeg(path: Path, cut: int | None = None) -> torch.Tensor:
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(path, quality=90)
    content = path.read_bytes()
    if cut is not None:
        path.write_bytes(content[:cut])
    return batched.file_bytes(str(path))


def test_a_file_no_decoder_reads_is_named(tmp_path: Path, engines: hardware.EngineDecoder) -> None:
    """A baseline JPEG cut short: its header reaches the device, the engines return nothing, the
    CUDA and the CPU decoders refuse it: the run stops naming the file."""
    good, cut = _jpeg(tmp_path / "good.JPEG"), _jpeg(tmp_path / "cut.JPEG", cut=400)
    assert batched.gpu_decodable(cut)
    draws = torch.full((2, 41), 0.5)
    names = [str(tmp_path / "good.JPEG"), str(tmp_path / "cut.JPEG")]
    batch = batched.EncodedBatch.pack([good, cut], draws, 32, True, names)
    with pytest.raises(DataError, match=rf"^{tmp_path / 'cut.JPEG'}: no JPEG decoder reads it"):
        batch.on(torch.device("cpu"))


def test_the_header_gives_each_files_size_for_its_box(tmp_path: Path) -> None:
    data_ = _jpeg(tmp_path / "a.JPEG")
    frame = batched.jpeg_frame(data_.numpy())
    assert frame is not None and frame[1:] == (3, 48, 64)
    packed = batched.EncodedBatch.pack([data_], torch.zeros(1, 41), 32)
    assert packed.shapes.tolist() == [[0, 48, 64]] and packed.items()[0].dim() == 1


@pytest.fixture()
def fresh(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """engine_decoder and say_once without what earlier tests cached; returns what was said."""
    said: list[str] = []
    hardware.engine_decoder.cache_clear()
    hardware.say_once.cache_clear()
    monkeypatch.setattr(hardware, "say_once", said.append)
    yield lambda: said
    hardware.engine_decoder.cache_clear()


def test_a_device_without_engines_keeps_the_cuda_decoder_said_once(
    fresh: Callable[[], list[str]], engines: hardware.EngineDecoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nvidia import nvimgcodec

    def no_engines(**options: object) -> None:
        raise RuntimeError("CUDA Runtime failure: '#801'")

    fresh()
    hardware.engine_decoder.cache_clear()
    monkeypatch.setattr(nvimgcodec, "Decoder", no_engines)
    cpu = torch.device("cpu")
    assert hardware.engine_decoder(cpu) is None and hardware.engine_decoder(cpu) is None
    assert len(fresh()) == 1
    assert "has no hardware JPEG decoder nvImageCodec can use (CUDA Runtime failure" in fresh()[0]


def test_engines_that_do_not_decode_regions_decode_whole_files_said_once(
    fresh: Callable[[], list[str]],
    engines: hardware.EngineDecoder,
    monkeypatch: pytest.MonkeyPatch,
    mixed_folder: Path,
) -> None:
    decode = hardware.EngineDecoder.decode

    def whole_only(self: hardware.EngineDecoder, files: list, boxes: list | None, stream: object):
        if boxes is not None:
            return [None] * len(files)
        return decode(self, files, boxes, stream)

    (expected,) = _batches(mixed_folder, hardware_jpeg=True)
    hardware.engine_decoder.cache_clear()
    monkeypatch.setattr(hardware.EngineDecoder, "decode", whole_only)
    decoder = hardware.engine_decoder(torch.device("cpu"))
    assert decoder is not None and not decoder.regions
    assert fresh() == [
        "data.decode: gpu: the hardware JPEG decoder of the CPU does not decode regions; each "
        "file is decoded whole and cropped"
    ]
    hardware.FALLBACKS.take()
    (whole,) = _batches(mixed_folder, hardware_jpeg=True)
    assert hardware.FALLBACKS.take() == 2 and torch.equal(whole, expected)
