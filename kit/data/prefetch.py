"""Batches onto the device: loader workers hand over uint8 pixels and the device normalises them.

A uint8 image is a quarter of its float32 size, so workers collate and the host copies four
times fewer bytes; conversion to float, ImageNet standardisation and the channels-last layout
happen on the device. On CUDA the next batch is copied (or decoded, `data.decode: gpu`),
cropped and normalised on streams of its own while the current one computes; on other devices the
same steps run inline, so CPU runs stay exact. Stream order (kit.data.streams): an event is
recorded after the batch's work on the side stream, the compute stream waits for that event
before the step uses the batch, and the batch's tensors are recorded on the compute stream, so
the caching allocator does not hand their blocks to the side stream while the step still reads
them; the side stream does not wait for the compute stream (that would queue each batch behind
the step it should overlap), and nothing waits on the host.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from kit.data.batched import EncodedBatch
from kit.data.dali import DaliBatch
from kit.data.streams import CudaOrder, Order

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

Batch = tuple[torch.Tensor, torch.Tensor]


@functools.cache
def _standardisation(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageNet's mean and 1/std in pixel units on `device`, copied there once (a copy per batch
    would make every batch wait for the host)."""
    mean = torch.tensor(IMAGENET_MEAN).mul_(255).view(1, 3, 1, 1)
    scale = torch.tensor(IMAGENET_STD).mul_(255).reciprocal_().view(1, 3, 1, 1)
    mean, scale = mean.to(device), scale.to(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # ready for every stream that reads them
    return mean, scale


def normalise(
    images: torch.Tensor, memory_format: torch.memory_format = torch.contiguous_format
) -> torch.Tensor:
    """uint8 pixels [B, 3, H, W] as float32 standardised with ImageNet's mean and std. Images
    that are already floating point are taken as standardised (inputs prepared by the caller)."""
    images = images.contiguous(memory_format=memory_format)
    if images.dtype != torch.uint8:
        return images
    mean, scale = _standardisation(images.device)
    return images.float().sub_(mean).mul_(scale)


class DeviceBatches:
    """A loader's (uint8 images, labels) batches as (standardised images, labels) on `device`.
    `order` makes the streams for one pass (CUDA's by default; tests pass a recording one)."""

    def __init__(
        self,
        loader: Iterable[Batch],
        device: torch.device,
        memory_format: torch.memory_format = torch.contiguous_format,
        order: Callable[[torch.device], Order] | None = None,
    ) -> None:
        self.loader, self.device, self.memory_format = loader, device, memory_format
        self.order = order or (CudaOrder if device.type == "cuda" else None)

    def _prepare(self, batch: Batch, order: Order | None = None) -> Batch:
        images, labels = batch
        if isinstance(images, EncodedBatch):  # data.decode: gpu
            images = images.on(self.device, order)
        elif isinstance(images, DaliBatch):
            images = images.on(self.device)
        else:
            images = images.to(self.device, non_blocking=True)
        return normalise(images, self.memory_format), labels.to(self.device, non_blocking=True)

    def __iter__(self) -> Iterator[Batch]:
        if self.order is None:
            for batch in self.loader:
                yield self._prepare(batch)
            return
        order, batches = self.order(self.device), iter(self.loader)

        def ahead() -> tuple[Batch, Any] | None:
            batch = next(batches, None)
            if batch is None:
                return None
            with order.use(order.side):
                prepared = self._prepare(batch, order)
            return prepared, order.mark(order.side)

        upcoming = ahead()
        while upcoming is not None:
            current, ready = upcoming
            order.hand_over(current, ready, order.compute)
            upcoming = ahead()
            yield current
