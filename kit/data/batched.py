"""JPEG decoding and RandomResizedCrop + flip on whole batches, on the run's device
(`data.decode: gpu`).

Loader workers only read each file's bytes and draw the sample's random numbers from its seeded
generator (so a resumed run sees the batches an uninterrupted one would); the device decodes
the batch with TorchCodec's `decode_jpeg` (nvJPEG on CUDA, libjpeg-turbo on the CPU), turns the
draws into crop boxes for all images at once and crops, resizes (antialiased bilinear, as the
CPU pipeline) and flips the whole batch in a few kernels (kit.data.crops). The same functions
run on CPU tensors, which is how the tests check them.

A worker packs its batch into one flat tensor (`EncodedBatch`), so that the batch crosses to the
main process with a few shared-memory file descriptors whatever its size; only baseline
three-component JPEGs go to the device's decoder, the others are decoded to RGB in the worker
(`gpu_decodable`). On CUDA the decoder runs on a stream of its own and hands its outputs to the
cropping stream by an event (kit.data.streams), without a host wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torchcodec.decoders import decode_jpeg

from kit.data import crops
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
    return frame is not None and frame[0] in SEQUENTIAL and frame[1] == 3


#: start-of-frame markers of Huffman-coded sequential JPEGs: baseline and extended
SEQUENTIAL = (0xC0, 0xC1)
#: markers that carry no length (restart markers, TEM)
_STANDALONE = {0x01, *range(0xD0, 0xD8)}


def jpeg_frame(data: np.ndarray) -> tuple[int, int] | None:
    """A JPEG's (start-of-frame marker, number of components), read from its header; None when
    the bytes are not a JPEG or end before a frame header."""
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
            return (marker, int(data[position + 9])) if position + 10 <= len(data) else None
        if marker in (0xD9, 0xDA):  # end of image, or scan data before any frame
            return None
        position += 2 + (int(data[position + 2]) << 8 | int(data[position + 3]))
    return None


@dataclass
class EncodedBatch:
    """What a loader worker hands over with `data.decode: gpu`: every item's bytes end to end in
    one flat uint8 tensor, so a batch crosses from the worker with a constant number of shared
    memory file descriptors (one per tensor: a tensor per image would hold one per image, and
    thousands across workers x prefetch). An item is a JPEG's file bytes (shape row all zero) or
    an image the worker decoded [3, H, W] (shape row (3, H, W))."""

    data: torch.Tensor
    #: [B + 1] int64: item i is data[offsets[i]:offsets[i + 1]]
    offsets: torch.Tensor
    #: [B, 3] int64: the shape of a decoded item, zeros for file bytes
    shapes: torch.Tensor
    draws: torch.Tensor
    size: int

    @classmethod
    def pack(cls, items: list[torch.Tensor], draws: torch.Tensor, size: int) -> EncodedBatch:
        """Items (1-D file bytes or uint8 images [3, H, W]) packed into one tensor."""
        lengths = torch.tensor([0] + [item.numel() for item in items], dtype=torch.int64)
        shapes = torch.tensor(
            [list(item.shape) if item.dim() == 3 else [0, 0, 0] for item in items],
            dtype=torch.int64,
        ).view(-1, 3)
        data = (
            torch.cat([item.reshape(-1) for item in items])
            if items
            else torch.empty(0, dtype=torch.uint8)
        )
        return cls(data, lengths.cumsum(0), shapes, draws, size)

    def items(self) -> list[torch.Tensor]:
        """The items unpacked: views of `data`, file bytes 1-D, decoded images [3, H, W]."""
        bounds, shapes = self.offsets.tolist(), self.shapes.tolist()
        return [
            self.data[start:end] if shape[0] == 0 else self.data[start:end].view(shape)
            for start, end, shape in zip(bounds[:-1], bounds[1:], shapes, strict=True)
        ]

    def on(self, device: torch.device, order: Order | None = None) -> torch.Tensor:
        """The batch decoded on `device` and augmented there: uint8 [B, 3, size, size], made on
        `order.side` (on CUDA without an order: on the current stream, the decoder on its own)."""
        if order is None and device.type == "cuda":
            order = CudaOrder(device, side=False)
        items = self.items()
        jpegs = [index for index, item in enumerate(items) if item.dim() == 1]
        # decoded by the worker; queued on the stream without a host wait (pageable memory is
        # staged before the call returns)
        images = [item.to(device, non_blocking=True) if item.dim() == 3 else item for item in items]
        if jpegs:
            decoded = decoded_jpegs([items[index] for index in jpegs], device, order)
            for index, image in zip(jpegs, decoded, strict=True):
                images[index] = image
        return crops.batch_resized_crops(images, self.draws, self.size)


def decoded_jpegs(
    encoded: list[torch.Tensor], device: torch.device, order: Order | None = None
) -> list[torch.Tensor]:
    """JPEG file bytes decoded to RGB on `device`. With an order (CUDA), the decoder runs on
    `order.decode` and its outputs are handed over to `order.side` (kit.data.streams says why
    the decoder needs a stream of its own); without one, on the current device inline."""
    if order is None:
        return cast(list[torch.Tensor], decode_jpeg(encoded, mode="RGB", device=device))
    with order.use(order.decode):
        images = cast(list[torch.Tensor], decode_jpeg(encoded, mode="RGB", device=device))
        done = order.mark(order.decode)
    order.hand_over(images, done, order.side)
    return images


def collate(
    samples: list[tuple[torch.Tensor, torch.Tensor, int]], size: int
) -> tuple[EncodedBatch, torch.Tensor]:
    """(item, draws, label) samples as one packed EncodedBatch and a label tensor."""
    items, draws, labels = zip(*samples, strict=True)
    return EncodedBatch.pack(list(items), torch.stack(draws), size), torch.tensor(labels)
