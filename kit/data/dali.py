"""`data.decode: dali`: training images decoded, cropped, resized and flipped by NVIDIA DALI.

Loader workers (kit.data.pipeline.DaliSamples) read each file's bytes and its size (PIL reads
the header only), draw the sample's random numbers from its seeded generator and turn them into
the RandomResizedCrop box and flip of `kit.data.batched` (the boxes `decode: gpu` crops, with
torchvision's distribution). DALI then decodes that region of each file, and only that region
where its decoder can (`fn.decoders.image_slice`, region-of-interest decoding), resizes it to
size x size (linear, antialiased when shrinking, as torchvision's `antialias=True`) and flips it:
the `mixed` decoder on CUDA (nvJPEG, with the share `data.dali_hw_decoder_load` of the JPEGs on
the GPU's hardware JPEG engine on A100, H100 and H200), the CPU one (libjpeg-turbo) elsewhere.
DALI draws nothing itself, so a batch depends only on the run's seed and the sampler's (epoch,
index) keys: a resumed run reads exactly the batches an uninterrupted one would, as with
`decode: cpu`.

DALI's fused `fn.decoders.image_random_crop` is the same region decode with the window drawn by
DALI: its generator is seeded once per pipeline (one `seed`, no per-sample seeds), so its draws
follow the pipeline's history, and a resumed run would need DALI's own checkpoint of that state,
taken in step with the kit's, to crop as the uninterrupted one. `image_slice` given the kit's
boxes decodes the same way with the kit's per-sample seeded draws, which need no saved state, do
not depend on the batch an image lands in, and are the boxes `decode: gpu` crops.

Pixels differ from the kit's own path by the decoders' and resize kernels' rounding (a grey
level or two; tests/test_dali.py measures it), not by what is cropped. EXIF orientation is
ignored, as torchvision's decoder ignores it. A worker packs its batch into one flat tensor, so
that it crosses to the main process with a constant number of shared-memory file descriptors
(as `batched.EncodedBatch`). DALI's API: https://docs.nvidia.com/deeplearning/dali/user-guide/.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class DaliBatch:
    """What a loader worker hands over with `data.decode: dali`: the files' bytes end to end in
    one flat uint8 tensor, and each image's crop box (top, left, height, width) and flip."""

    data: torch.Tensor
    #: [B + 1] int64: file i is data[offsets[i]:offsets[i + 1]]
    offsets: torch.Tensor
    #: [B, 4] int64
    boxes: torch.Tensor
    #: [B] bool
    flips: torch.Tensor
    size: int
    #: CPU threads DALI decodes with (the run's num_workers, at least one)
    threads: int
    #: the share of JPEGs the `mixed` decoder gives the GPU's hardware JPEG decoder
    #: (`data.dali_hw_decoder_load`)
    hw_decoder_load: float

    def on(self, device: torch.device) -> torch.Tensor:
        """The batch decoded, cropped, resized and flipped by DALI for `device`: uint8
        [B, 3, size, size] there."""
        bounds = self.offsets.tolist()
        files = [self.data[a:b].numpy() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        boxes = self.boxes.numpy().astype(np.int32)
        runner = _pipeline(device, self.size, len(files), self.threads, self.hw_decoder_load)
        runner.feed_input("files", files)
        runner.feed_input("anchors", list(boxes[:, :2]))
        runner.feed_input("shapes", list(boxes[:, 2:]))
        runner.feed_input("flips", list(self.flips.numpy().astype(np.int32)))
        (images,) = runner.run()
        return _to_torch(images, device)


def collate(
    samples: list[tuple[torch.Tensor, torch.Tensor, bool, int]],
    size: int,
    threads: int,
    hw_decoder_load: float,
) -> tuple[DaliBatch, torch.Tensor]:
    """(bytes, box, flip, label) samples as one packed DaliBatch and a label tensor."""
    files, boxes, flips, labels = zip(*samples, strict=True)
    lengths = torch.tensor([0] + [len(data) for data in files], dtype=torch.int64)
    batch = DaliBatch(
        torch.cat(files),
        lengths.cumsum(0),
        torch.stack(boxes),
        torch.tensor(flips),
        size,
        max(threads, 1),
        hw_decoder_load,
    )
    return batch, torch.tensor(labels)


@functools.cache
def _pipeline(
    device: torch.device, size: int, batch: int, threads: int, hw_decoder_load: float
) -> Any:
    """A built DALI pipeline for batches of up to `batch` files: the `mixed` decoder for a CUDA
    device (`hw_decoder_load` of the JPEGs to the hardware decoder where the GPU has one), the
    CPU one otherwise. Built once per process and shape: building takes a second."""
    from nvidia.dali import fn, pipeline_def, types

    cuda = device.type == "cuda"

    @pipeline_def(batch_size=batch, num_threads=threads, seed=0, prefetch_queue_depth=1)
    def graph() -> Any:
        files = fn.external_source(name="files", dtype=types.DALIDataType.UINT8, ndim=1)
        anchors = fn.external_source(name="anchors", dtype=types.DALIDataType.INT32, ndim=1)
        shapes = fn.external_source(name="shapes", dtype=types.DALIDataType.INT32, ndim=1)
        flips = fn.external_source(name="flips", dtype=types.DALIDataType.INT32, ndim=0)
        # Any: DALI's stubs type some operators' outputs as unions of a node and a list of them
        images: Any = fn.decoders.image_slice(
            files,
            anchors,
            shapes,
            axis_names="HW",
            device="mixed" if cuda else "cpu",
            output_type=types.DALIImageType.RGB,
            adjust_orientation=False,
            hw_decoder_load=hw_decoder_load,  # the CPU decoder ignores it
            # the CPU decoder's chroma upsampling (libjpeg-turbo's, as torchvision's)
            jpeg_fancy_upsampling=True,
        )
        images = fn.resize(
            images,
            size=[size, size],
            interp_type=types.DALIInterpType.INTERP_LINEAR,
            antialias=True,
        )
        images = fn.flip(images, horizontal=flips)
        return fn.transpose(images, perm=[2, 0, 1])

    runner = graph(device_id=(device.index or 0) if cuda else None)
    runner.build()
    return runner


def _to_torch(images: Any, device: torch.device) -> torch.Tensor:
    """DALI's output batch as a torch tensor of its own on `device` (DALI reuses its buffers on
    the next run); on CUDA copied on the current stream, after DALI's work."""
    dense = images.as_tensor()
    if device.type != "cuda":
        return torch.from_numpy(np.array(dense))  # a copy
    from nvidia.dali.plugin.pytorch import feed_ndarray

    out = torch.empty(dense.shape(), dtype=torch.uint8, device=device)
    feed_ndarray(dense, out, cuda_stream=torch.cuda.current_stream(device))
    return out
