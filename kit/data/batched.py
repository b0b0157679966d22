"""JPEG decoding and RandomResizedCrop + flip on whole batches, on the run's device
(`data.decode: gpu`).

Loader workers only read each file's bytes, its size from its header, and draw the sample's
random numbers from its seeded generator (so a resumed run sees the batches an uninterrupted one
would). The device turns the draws into crop boxes for all images at once, decodes the batch
(each file's crop region alone on a GPU's hardware JPEG engines, kit.data.hardware; else whole
with the CUDA decoder, TorchCodec's `decode_jpeg`, and cropped), and resizes (antialiased
bilinear, as the CPU pipeline) and flips the whole batch in a few kernels (kit.data.crops). The
same functions run on CPU tensors, which is how the tests check them.

A worker packs its batch into one flat tensor (`EncodedBatch`), so that the batch crosses to the
main process with a few shared-memory file descriptors whatever its size; only baseline
three-component JPEGs go to the device's decoder, the others are decoded to RGB in the worker
(`gpu_decodable`). On CUDA the decoder runs on a stream of its own and hands its outputs to the
cropping stream by an event (kit.data.streams), without a host wait. A file no device decoder
reads falls back to the CUDA decoder, then the CPU's (kit.data.hardware counts them).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from kit.data import crops, hardware
from kit.data.codecs import decode_jpeg
from kit.data.kinds.base import DataError
from kit.data.streams import CudaOrder, Order

JPEG_MAGIC = b"\xff\xd8"


def file_bytes(path: str) -> torch.Tensor:
    """A file's bytes as uint8 [n], in memory of their own (a loader worker shares tensors with
    the main process by file descriptor: a tensor over a private mapping of the file, as
    torchvision's deprecated `read_file` returns, keeps none and cannot be sent)."""
    return torch.from_numpy(np.fromfile(path, dtype=np.uint8))


def gpu_decodable(data: torch.Tensor) -> bool:
    """Whether the device's decoder takes these file bytes: a baseline or extended sequential
    (Huffman) JPEG of three components. The CUDA decoders (nvJPEG, in torchvision and
    TorchCodec) are checked on such files upstream; its hardware decoder on A100/H100 takes
    baseline files only and other kinds fall back to a slower hybrid path, and it has no CMYK
    conversion. Greyscale (one component), CMYK or YCCK (four), progressive, lossless and
    arithmetic-coded JPEGs are decoded to RGB by the loader worker instead (libjpeg-turbo), as is
    anything that is not a JPEG."""
    frame = jpeg_frame(data.numpy())
    return frame is not None and frame[0] in SEQUENTIAL and frame[1] == 3 and min(frame[2:]) > 0


#: start-of-frame markers of Huffman-coded sequential JPEGs: baseline and extended
SEQUENTIAL = (0xC0, 0xC1)
#: markers that carry no length (restart markers, TEM)
_STANDALONE = {0x01, *range(0xD0, 0xD8)}


def jpeg_frame(data: np.ndarray) -> tuple[int, int, int, int] | None:
    """A JPEG's (start-of-frame marker, number of components, height, width), read from its
    header; None when the bytes are not a JPEG or end before a frame header."""
    if len(data) < 4 or bytes(data[:2]) != JPEG_MAGIC:
        return None
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return None
        marker = int(data[position + 1])
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _STANDALONE:
            position += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if position + 10 > len(data):
                return None
            height = int(data[position + 5]) << 8 | int(data[position + 6])
            width = int(data[position + 7]) << 8 | int(data[position + 8])
            return marker, int(data[position + 9]), height, width
        if marker in (0xD9, 0xDA):  # end of image, or scan data before any frame
            return None
        position += 2 + (int(data[position + 2]) << 8 | int(data[position + 3]))
    return None


@dataclass
class EncodedBatch:
    """What a loader worker hands over with `data.decode: gpu`: every item's bytes end to end in
    one flat uint8 tensor, so a batch crosses from the worker with a constant number of shared
    memory file descriptors (one per tensor: a tensor per image would hold one per image, and
    thousands across workers x prefetch). An item is a JPEG's file bytes (shape row (0, H, W),
    its size from its header) or an image the worker decoded [3, H, W] (shape row (3, H, W))."""

    data: torch.Tensor
    #: [B + 1] int64: item i is data[offsets[i]:offsets[i + 1]]
    offsets: torch.Tensor
    #: [B, 3] int64: the shape of a decoded item; (0, height, width) for file bytes
    shapes: torch.Tensor
    draws: torch.Tensor
    size: int
    #: decode on the GPU's hardware JPEG engines where it has them (`data.hardware_jpeg`)
    hardware: bool = True
    #: each item's file, named when no decoder reads it
    names: list[str] = field(default_factory=list)

    @classmethod
    def pack(
        cls,
        items: list[torch.Tensor],
        draws: torch.Tensor,
        size: int,
        hardware: bool = True,
        names: list[str] | None = None,
    ) -> EncodedBatch:
        """Items (1-D file bytes or uint8 images [3, H, W]) packed into one tensor."""
        lengths = torch.tensor([0] + [item.numel() for item in items], dtype=torch.int64)
        shapes = torch.tensor([_shape(item) for item in items], dtype=torch.int64).view(-1, 3)
        data = (
            torch.cat([item.reshape(-1) for item in items])
            if items
            else torch.empty(0, dtype=torch.uint8)
        )
        return cls(data, lengths.cumsum(0), shapes, draws, size, hardware, names or [])

    def items(self) -> list[torch.Tensor]:
        """The items unpacked: views of `data`, file bytes 1-D, decoded images [3, H, W]."""
        bounds, shapes = self.offsets.tolist(), self.shapes.tolist()
        return [
            self.data[start:end] if shape[0] == 0 else self.data[start:end].view(shape)
            for start, end, shape in zip(bounds[:-1], bounds[1:], shapes, strict=True)
        ]

    def on(self, device: torch.device, order: Order | None = None) -> torch.Tensor:
        """The batch decoded on `device` and augmented there: uint8 [B, 3, size, size], made on
        `order.side` (on CUDA without an order: on the current stream, the decoder on its own).
        The crop boxes come from each item's size (a file's from its header), so the engines
        can decode a file's box alone."""
        if order is None and device.type == "cuda":
            order = CudaOrder(device, side=False)
        items = self.items()
        boxes = crops.crop_boxes(self.shapes[:, 1], self.shapes[:, 2], self.draws.cpu()).tolist()
        jpegs = [index for index, item in enumerate(items) if item.dim() == 1]
        # decoded by the worker; queued on the stream without a host wait (pageable memory is
        # staged before the call returns)
        regions = [
            item.to(device, non_blocking=True) if item.dim() == 3 else item for item in items
        ]
        regions = [
            _crop(image, box) if image.dim() == 3 else image
            for image, box in zip(regions, boxes, strict=True)
        ]
        engines = hardware.engine_decoder(device) if self.hardware and jpegs else None
        held: list[torch.Tensor] = []
        fallbacks = len(items) - len(jpegs)
        if jpegs:
            files = [items[index] for index in jpegs]
            names = [self.names[index] if self.names else f"item {index}" for index in jpegs]
            decoded = Decoded(files, [boxes[index] for index in jpegs], device, order, names)
            held, fallbacks = decoded.by(engines), fallbacks + decoded.fallbacks
            for index, region in zip(jpegs, decoded.regions, strict=True):
                regions[index] = region
        hardware.FALLBACKS.add(fallbacks)
        out = crops.resized_regions(regions, crops.flips(self.draws.cpu()), self.size)
        if engines is not None and held and order is not None and device.type == "cuda":
            engines.hold(held, order.mark(order.side))
        return out


def _shape(item: torch.Tensor) -> list[int]:
    """An item's shape row: a decoded image's shape, or (0, height, width) of a JPEG's bytes
    from its header (zeros when it has none)."""
    if item.dim() == 3:
        return list(item.shape)
    frame = jpeg_frame(item.numpy())
    return [0, *frame[2:]] if frame is not None else [0, 0, 0]


def _crop(image: torch.Tensor, box: list[int]) -> torch.Tensor:
    top, left, h, w = box
    return image[:, top : top + h, left : left + w]


class Decoded:
    """A batch's JPEG files decoded on the device to their crop regions (`regions`, uint8
    [3, h, w] each): by the engines where given (`by`), what they return nothing for by the CUDA
    decoder, then the CPU's; `fallbacks` counts the files the first choice did not decode."""

    def __init__(
        self,
        files: list[torch.Tensor],
        boxes: list[list[int]],
        device: torch.device,
        order: Order | None,
        names: list[str],
    ) -> None:
        self.files, self.boxes, self.device, self.order, self.names = (
            files,
            boxes,
            device,
            order,
            names,
        )
        self.regions: list[torch.Tensor] = []
        self.fallbacks = 0

    def by(self, engines: hardware.EngineDecoder | None) -> list[torch.Tensor]:
        """Decode with `engines` (None: the CUDA decoder first); returns the engines' outputs,
        which the caller keeps alive until the crops have read them."""
        found: list[torch.Tensor | None] = [None] * len(self.files)
        cropped = False
        if engines is not None:
            order, cuda = self.order, self.device.type == "cuda"
            with order.use(order.decode) if order is not None else nullcontext():
                boxes = self.boxes if engines.regions else None
                stream = order.decode if order is not None and cuda else None
                found = list(engines.decode(self.files, boxes, stream))
                if order is not None:
                    order.hand_over([], order.mark(order.decode), order.side)
            cropped = engines.regions
        held = [image for image in found if image is not None]
        missing = [index for index, image in enumerate(found) if image is None]
        if engines is not None:
            self.fallbacks = len(missing)
        for index, image in zip(missing, self._fallback(missing), strict=True):
            found[index] = image
        self.regions = [
            image if cropped and index not in missing else _crop(image, box)
            for index, (image, box) in enumerate(
                zip(cast(list[torch.Tensor], found), self.boxes, strict=True)
            )
        ]
        return held

    def _fallback(self, indices: list[int]) -> list[torch.Tensor]:
        """The files at `indices` decoded whole by the CUDA decoder (the device's decoder: the
        CPU's on a CPU run), a file it fails on by the CPU decoder; DataError naming a file no
        decoder reads."""
        if not indices:
            return []
        try:
            return decoded_jpegs([self.files[i] for i in indices], self.device, self.order)
        except RuntimeError:
            pass  # one file of them is refused: each alone
        images = []
        for index in indices:
            try:
                images += decoded_jpegs([self.files[index]], self.device, self.order)
                continue
            except RuntimeError:
                pass
            try:
                images.append(
                    decoded_jpegs([self.files[index]], torch.device("cpu"))[0].to(self.device)
                )
            except RuntimeError as error:
                raise DataError(
                    f"{self.names[index]}: no JPEG decoder reads it ({error}); replace or remove "
                    "the file, then re-run to resume"
                ) from None
        return images


def decoded_jpegs(
    encoded: list[torch.Tensor], device: torch.device, order: Order | None = None
) -> list[torch.Tensor]:
    """JPEG file bytes decoded to RGB on `device`. With an order (CUDA), the decoder runs on
    `order.decode` and its outputs are handed over to `order.side` (kit.data.streams says why
    the decoder needs a stream of its own); without one, on the current device inline."""
    if order is None:
        return cast(list[torch.Tensor], decode_jpeg(encoded, device=device))
    with order.use(order.decode):
        images = cast(list[torch.Tensor], decode_jpeg(encoded, device=device))
        done = order.mark(order.decode)
    order.hand_over(images, done, order.side)
    return images


def collate(
    samples: list[tuple[torch.Tensor, torch.Tensor, int, str]], size: int, hardware: bool = True
) -> tuple[EncodedBatch, torch.Tensor]:
    """(item, draws, label, file) samples as one packed EncodedBatch and a label tensor."""
    items, draws, labels, names = zip(*samples, strict=True)
    batch = EncodedBatch.pack(list(items), torch.stack(draws), size, hardware, list(names))
    return batch, torch.tensor(labels)
