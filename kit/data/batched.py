"""JPEG decoding and RandomResizedCrop + flip on whole batches, on the run's device
(`data.decode: gpu`).

Loader workers only read each file's bytes and draw the sample's random numbers from its seeded
generator (so a resumed run sees the batches an uninterrupted one would); the device decodes
the batch with torchvision's `decode_jpeg`, turns the draws into crop boxes for all images at
once, crops and resizes each image (antialiased bilinear, as the CPU pipeline) and flips the
batch. The same functions run on CPU tensors, which is how the tests check them. The crop
follows torchvision's RandomResizedCrop: up to ten tries of an area share in [0.08, 1] and a
log-uniform aspect ratio in [3/4, 4/3] that fit the image, else the central crop of the nearest
allowed ratio.

A worker packs its batch into one flat tensor (`EncodedBatch`), so that the batch crosses to the
main process with a few shared-memory file descriptors whatever its size; only baseline
three-component JPEGs go to the device's decoder, the others are decoded to RGB in the worker
(`gpu_decodable`); on CUDA the decoder starts after its stream has drained (`decoded_jpegs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.io import ImageReadMode, decode_jpeg

#: RandomResizedCrop's tries per image, as torchvision's
TRIES = 10
#: uniform draws per image: four per try (area, ratio, top, left) and one for the flip
DRAWS = 4 * TRIES + 1
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
JPEG_MAGIC = b"\xff\xd8"


def sample_draws(generator: torch.Generator) -> torch.Tensor:
    """One image's uniform draws in [0, 1), float64 so boxes do not depend on rounding."""
    return torch.rand(DRAWS, generator=generator, dtype=torch.float64)


def crop_boxes(heights: torch.Tensor, widths: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """RandomResizedCrop's boxes [B, 4] as (top, left, height, width) for images of the given
    sizes [B], from draws [B, DRAWS]: the first try that fits, else the central crop."""
    heights, widths = heights.double()[:, None], widths.double()[:, None]
    tries = draws[:, : 4 * TRIES].view(-1, TRIES, 4)
    area = heights * widths * (SCALE[0] + tries[..., 0] * (SCALE[1] - SCALE[0]))
    low, high = math.log(RATIO[0]), math.log(RATIO[1])
    aspect = torch.exp(low + tries[..., 1] * (high - low))
    w = torch.round(torch.sqrt(area * aspect))
    h = torch.round(torch.sqrt(area / aspect))
    fits = (w > 0) & (w <= widths) & (h > 0) & (h <= heights)
    top = torch.floor(tries[..., 2] * (heights - h + 1))
    left = torch.floor(tries[..., 3] * (widths - w + 1))
    first = torch.where(fits.any(1), fits.double().argmax(1), -1)
    pick = first.clamp_min(0)[:, None]
    chosen = torch.cat(
        [top.gather(1, pick), left.gather(1, pick), h.gather(1, pick), w.gather(1, pick)], 1
    )
    return torch.where(
        (first >= 0)[:, None], chosen, central_boxes(heights[:, 0], widths[:, 0])
    ).long()


def central_boxes(heights: torch.Tensor, widths: torch.Tensor) -> torch.Tensor:
    """The fallback crop: the whole image clipped to the allowed aspect ratios, centred."""
    ratio = widths / heights
    w = torch.where(
        ratio < RATIO[0],
        widths,
        torch.where(ratio > RATIO[1], torch.round(heights * RATIO[1]), widths),
    )
    h = torch.where(ratio < RATIO[0], torch.round(widths / RATIO[0]), heights)
    return torch.stack(
        [
            torch.div(heights - h, 2, rounding_mode="floor"),
            torch.div(widths - w, 2, rounding_mode="floor"),
            h,
            w,
        ],
        1,
    )


def resized_crops(images: list[torch.Tensor], draws: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 images [3, H, W] (any sizes, one device) cropped by their draws, resized to
    `size` x `size` (antialiased bilinear) and flipped where the last draw is below 1/2:
    uint8 [B, 3, size, size]."""
    sizes = torch.tensor([image.shape[1:] for image in images], dtype=torch.float64)
    boxes = crop_boxes(sizes[:, 0], sizes[:, 1], draws.cpu()).tolist()
    out = torch.stack(
        [
            F.interpolate(
                image[None, :, top : top + h, left : left + w].float(),
                size=(size, size),
                mode="bilinear",
                antialias=True,
                align_corners=False,
            )[0]
            for image, (top, left, h, w) in zip(images, boxes, strict=True)
        ]
    )
    flip = (draws[:, -1] < 0.5).to(out.device)[:, None, None, None]
    out = torch.where(flip, out.flip(-1), out)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def gpu_decodable(data: torch.Tensor) -> bool:
    """Whether the device's decoder takes these file bytes: a baseline or extended sequential
    (Huffman) JPEG of three components. torchvision's CUDA decode (nvJPEG) is only checked on
    such files upstream; its hardware decoder on A100/H100 takes baseline files only and other
    kinds fall back to a slower hybrid path, and it has no CMYK conversion. Greyscale (one
    component), CMYK or YCCK (four), progressive, lossless and arithmetic-coded JPEGs are
    decoded to RGB by the loader worker instead (libjpeg-turbo), as is anything that is not a
    JPEG."""
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

    def on(self, device: torch.device) -> torch.Tensor:
        """The batch decoded on `device` and augmented there: uint8 [B, 3, size, size]."""
        items = self.items()
        jpegs = [index for index, item in enumerate(items) if item.dim() == 1]
        images = [item.to(device) if item.dim() == 3 else item for item in items]  # not bytes
        if jpegs:
            decoded = decoded_jpegs([items[index] for index in jpegs], device)
            for index, image in zip(jpegs, decoded, strict=True):
                images[index] = image
        return resized_crops(images, self.draws.to(device), self.size)


def decoded_jpegs(encoded: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """JPEG file bytes decoded to RGB on `device`. On CUDA the current stream is drained first:
    torchvision allocates the decoder's outputs on the current stream, and nvJPEG writes them
    from a stream of its own (its hardware engine even ahead of work queued there) that does not
    wait for the current one, while the caching allocator hands out a block as soon as it is
    freed on that stream. Kernels still queued there could then read a block the decoder has
    overwritten (reproduced on an H100 upstream, torchvision pull request 9606). Blocks freed on
    other streams are safe: the allocator keeps them per stream, and tensors used on another
    stream are held by record_stream (kit.data.prefetch)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    return decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)


def collate(
    samples: list[tuple[torch.Tensor, torch.Tensor, int]], size: int
) -> tuple[EncodedBatch, torch.Tensor]:
    """(item, draws, label) samples as one packed EncodedBatch and a label tensor."""
    items, draws, labels = zip(*samples, strict=True)
    return EncodedBatch.pack(list(items), torch.stack(draws), size), torch.tensor(labels)
