"""JPEG decoding on a GPU's hardware JPEG engines for `data.decode: gpu`, through NVIDIA's
nvImageCodec, with a fallback for every file the engines do not decode.

A100, H100, H200 and L4/L40 GPUs have hardware JPEG decoders beside their SMs (NVJPG engines):
decoding there leaves the SMs to the training step, where nvJPEG's CUDA decoder (TorchCodec's
`decode_jpeg` on CUDA) and the crops compete with it. nvImageCodec's `HW_GPU_ONLY` backend drives
those engines. The engines decode baseline JPEGs; each training batch's files are routed so:

- the loader worker decodes on the CPU what it can tell from the header the device's decoders
  do not take (greyscale, CMYK, progressive and other JPEGs, files that are not JPEGs;
  kit.data.batched.gpu_decodable), as before;
- the engines decode the rest, each file only in its crop's region where the library offers it
  (region-of-interest decoding: fewer pixels decoded, and fewer for the resize to read);
- a file the engines return nothing for (a baseline JPEG they refuse, a corrupt one) falls back
  to the CUDA decoder, then to the CPU decoder; one no decoder reads stops the run naming it.

Each image not decoded by the first choice (the engines, or the CUDA decoder where there are
none) is counted (`FALLBACKS`), and the trainer logs the count in its metrics rows
(`decode_fallbacks`). A GPU without the engines (V100), or a node without nvImageCodec, uses the
CUDA decoder, said once when the first batch is decoded; so is a library whose engines do not
decode regions (the whole file is decoded and cropped then). On a CPU run nvImageCodec's CPU
backend (libjpeg-turbo) stands in for the engines, so that the same code, regions and fallbacks
included, runs in the tests. `data.hardware_jpeg: false` keeps the CUDA decoder.

nvImageCodec allocates its outputs itself, outside PyTorch's caching allocator: an output is kept
alive until an event recorded after the side stream's crops of it has passed, so that its memory
is not freed or reused while those kernels may still read it.
"""

from __future__ import annotations

import functools
import importlib
import io
import sys
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

#: how to install nvImageCodec (pyproject.toml's `nvimgcodec` extra, part of dev)
NVIMGCODEC_INSTALL = "`pip install -e '.[nvimgcodec]'` or `uv sync --extra nvimgcodec`"


class Fallbacks:
    """Images of `data.decode: gpu` batches decoded by a fallback rather than the first-choice
    decoder, since the count was last taken (the trainer takes it at each metrics row)."""

    def __init__(self) -> None:
        self.count: int | None = None

    def add(self, images: int) -> None:
        self.count = (self.count or 0) + images

    def take(self) -> int | None:
        """The count since the last take, reset; None when no such batch was decoded since."""
        taken, self.count = self.count, None
        return taken


#: this process's count (one training run at a time per process)
FALLBACKS = Fallbacks()


@functools.cache
def say_once(message: str) -> None:
    """`message` on stderr, once per process."""
    print(message, file=sys.stderr, flush=True)


class EngineDecoder:
    """nvImageCodec's decoder for one device: the hardware backend on a CUDA device, the CPU
    backend on the CPU; `regions` whether it decodes a file's region alone."""

    def __init__(self, codec: Any, device: torch.device, regions: bool = True) -> None:
        self.codec, self.device, self.regions = codec, device, regions
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            backend = codec.Backend(codec.BackendKind.HW_GPU_ONLY)
        else:
            index, backend = (
                codec.NVIMGCODEC_DEVICE_CPU_ONLY,
                codec.Backend(codec.BackendKind.CPU_ONLY),
            )
        self.decoder = codec.Decoder(device_id=index, backends=[backend])
        self.params = codec.DecodeParams(
            apply_exif_orientation=False,  # as the CUDA and CPU decoders: the file's pixels
            color_spec=codec.ColorSpec.SRGB,
            allow_any_depth=False,
            sample_format=codec.SampleFormat.I_RGB,
        )
        #: (event, outputs) kept until the event has passed (the module's docstring says why)
        self.held: deque[tuple[Any, list[Any]]] = deque()

    def decode(
        self, files: Sequence[torch.Tensor], boxes: Sequence[Sequence[int]] | None, stream: Any
    ) -> list[torch.Tensor | None]:
        """Each file's bytes decoded to RGB uint8 [3, h, w] on the device (a view of
        nvImageCodec's output), its box's region only where `boxes` (top, left, height, width)
        are given; None where the decoder returned nothing. `stream`: the CUDA stream the
        outputs are ready on (None on the CPU)."""
        streams = [self.codec.CodeStream(data.numpy()) for data in files]
        if boxes is not None:
            streams = [
                whole.get_sub_code_stream(
                    region=self.codec.Region(start=(top, left), end=(top + h, left + w))
                )
                for whole, (top, left, h, w) in zip(streams, boxes, strict=True)
            ]
        handle = 0 if stream is None else stream.cuda_stream
        found = self.decoder.decode(streams, params=self.params, cuda_stream=handle)
        return [None if image is None else self._tensor(image) for image in found]

    def _tensor(self, image: Any) -> torch.Tensor:
        """An nvImageCodec image [h, w, 3] as a uint8 [3, h, w] view that keeps it alive."""
        if self.device.type == "cuda":
            pixels = torch.from_dlpack(image)
        else:
            pixels = torch.from_numpy(np.asarray(image))
        return pixels.permute(2, 0, 1)

    def hold(self, outputs: list[torch.Tensor], event: Any) -> None:
        """Keep `outputs` alive until `event` has passed (CUDA), dropping those whose event has;
        nothing to keep on the CPU."""
        while self.held and self.held[0][0].query():
            self.held.popleft()
        if self.device.type == "cuda" and outputs:
            self.held.append((event, outputs))


def probe_jpeg(height: int = 192, width: int = 256) -> bytes:
    """A small baseline 4:2:0 JPEG of a gradient, to try a decoder with."""
    from PIL import Image

    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x % 256, y % 256, (x + y) % 256], -1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


@functools.cache
def engine_decoder(device: torch.device) -> EngineDecoder | None:
    """The engines' decoder of `device`, tried on a small JPEG whole and by region; None (said
    once) where nvImageCodec is not installed or the device has no engines it can use."""
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    fallback = "the CUDA decoder (nvJPEG on the SMs)" if device.type == "cuda" else "the CPU"
    try:
        codec = importlib.import_module("nvidia.nvimgcodec")
    except ImportError as error:
        say_once(
            f"data.decode: gpu: nvImageCodec is not installed ({error}), so JPEGs are decoded by "
            f"{fallback}; install it with {NVIMGCODEC_INSTALL} to decode on a GPU's hardware "
            "JPEG engines"
        )
        return None
    data = torch.from_numpy(np.frombuffer(probe_jpeg(), dtype=np.uint8).copy())
    try:
        decoder = EngineDecoder(codec, device)
        whole = decoder.decode([data], None, None)[0]
        if whole is None or tuple(whole.shape) != (3, 192, 256):
            raise RuntimeError(f"a 256 x 192 baseline JPEG decoded to {whole}")
    except Exception as error:  # no engines: the decoder cannot be made, or decodes nothing
        say_once(
            f"data.decode: gpu: {where} has no hardware JPEG decoder nvImageCodec can use "
            f"({str(error).splitlines()[0] if str(error) else type(error).__name__}); JPEGs are "
            f"decoded by {fallback}"
        )
        return None
    try:
        region = decoder.decode([data], [(10, 20, 100, 120)], None)[0]
        regions = region is not None and tuple(region.shape) == (3, 100, 120)
    except Exception:
        regions = False
    if not regions:
        say_once(
            f"data.decode: gpu: the hardware JPEG decoder of {where} does not decode regions; "
            "each file is decoded whole and cropped"
        )
    decoder.regions = regions
    if device.type == "cuda":
        say_once(f"data.decode: gpu: JPEGs are decoded by the hardware JPEG decoder of {where}")
    return decoder
