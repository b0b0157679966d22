"""The order of a batch's work on a CUDA device, in events rather than host waits.

Three streams: `decode`, on which only the JPEG decoder runs; `side`, on which the batch is
copied, cropped and normalised; `compute`, on which the step runs. Work moves from one to the
next by `hand_over`: the receiving stream waits for an event recorded after the giving stream's
work (`mark`), and each tensor moved is recorded on the receiving stream
(`Tensor.record_stream`), so the caching allocator, which reuses a freed block as soon as the
stream that allocated it is done with it, also waits for the receiving stream's uses.

Why the decoder has a stream of its own. A CUDA JPEG decoder allocates its outputs on the stream
current when it is called but writes them from nvJPEG, whose hardware engine does not wait for
work already queued on that stream; the caching allocator hands out a block as soon as it has
been freed on the stream that owns it, on the understanding that later users are ordered on that
stream. So the decoder can be given a block that kernels still queued on the caller's stream are
about to read, and overwrite it before they run (reproduced on an H100 and described in
torchvision pull request 9606, https://github.com/pytorch/vision/pull/9606, and TorchCodec pull
request 1634, https://github.com/meta-pytorch/torchcodec/pull/1634). Draining the caller's
stream before each decode avoids it at the cost of a host wait. Here the decoder's calling stream
carries no other work: every block freed on it is a decoder output that was handed over to the
side stream, which the allocator keeps until the side stream's uses are done, so no queued kernel
can read what the decoder writes. The streams come from PyTorch's stream pool; the kit queues
nothing else on them.

`CudaOrder` is the real order; tests pass a recording stand-in with the same methods, so the
order of waits and records is checked on CPU tensors (tests/test_batched.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch


class Order(Protocol):
    """Streams and the two moves between them; `Any` stands for a CUDA stream or event."""

    decode: Any
    side: Any
    compute: Any

    def use(self, stream: Any) -> AbstractContextManager[Any]:
        """The block's work is queued on `stream`."""
        ...

    def mark(self, stream: Any) -> Any:
        """An event that completes when the work queued on `stream` so far has run."""
        ...

    def hand_over(self, tensors: Iterable[torch.Tensor], event: Any, stream: Any) -> None:
        """`stream` waits for `event` and the tensors are recorded on it, before it uses them."""
        ...


class CudaOrder:
    """The order on a CUDA device: a decode stream and, with `side`, a side stream from the pool;
    the compute stream is the one current at construction (the side stream too without `side`,
    for a caller that crops on its own stream)."""

    def __init__(self, device: torch.device, side: bool = True) -> None:
        self.compute = torch.cuda.current_stream(device)
        self.side = torch.cuda.Stream(device) if side else self.compute
        self.decode = torch.cuda.Stream(device)

    def use(self, stream: torch.cuda.Stream) -> AbstractContextManager[Any]:
        return torch.cuda.stream(stream)

    def mark(self, stream: torch.cuda.Stream) -> torch.cuda.Event:
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def hand_over(
        self, tensors: Iterable[torch.Tensor], event: torch.cuda.Event, stream: torch.cuda.Stream
    ) -> None:
        stream.wait_event(event)
        for tensor in tensors:
            tensor.record_stream(stream)
