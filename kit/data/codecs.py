"""The image decoders of the kit's pipelines: TorchCodec's, or torchvision's where TorchCodec
cannot load.

TorchCodec's image decoders (libjpeg-turbo, libpng and libwebp on the CPU, nvJPEG on CUDA) are
built against one release of PyTorch's C++ library, which is why the kit pins them with torch. A
cluster's own PyTorch (a node's container, a module) is often another release, and there
TorchCodec's library fails to load. torchvision's `torchvision.io` decoders call the same
libraries (TorchCodec took them over from torchvision, which deprecates its own from 0.29), and
torchvision is always built for the torch beside it, so where TorchCodec does not load the kit
decodes with them and says so once, on stderr, in the process that starts the others (loader
workers, which decode too, keep quiet). The choice is made at the first decode, not at
import, so importing the training path never loads either library.
"""

from __future__ import annotations

import functools
import multiprocessing
import sys
from collections.abc import Callable
from typing import Any, cast

import torch


@functools.cache
def _decoders() -> tuple[Callable[..., Any], Callable[..., Any], str]:
    """(decode_jpeg, decode_image, which): TorchCodec's where it loads, else torchvision's."""
    try:
        from torchcodec.decoders import decode_image, decode_jpeg

        return decode_jpeg, decode_image, "torchcodec"
    except Exception as error:  # ImportError, or the library failing to load against this torch
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    from torchvision import io

    def jpegs(data: Any, mode: str, device: Any = "cpu") -> Any:
        return io.decode_jpeg(data, mode=io.ImageReadMode.RGB, device=device)

    def image(path: str, mode: str) -> torch.Tensor:
        return cast(torch.Tensor, io.decode_image(io.read_file(path), mode=io.ImageReadMode.RGB))

    if multiprocessing.parent_process() is None:  # not a loader worker
        print(
            f"TorchCodec's image decoders do not load with torch {torch.__version__} ({reason}); "
            "images are decoded by torchvision's decoders (the same libjpeg-turbo and nvJPEG)",
            file=sys.stderr,
            flush=True,
        )
    return jpegs, image, "torchvision"


def decode_jpeg(
    data: torch.Tensor | list[torch.Tensor], device: torch.device | str = "cpu"
) -> torch.Tensor | list[torch.Tensor]:
    """JPEG file bytes (uint8 [n], or a list of them) decoded to RGB uint8 [3, H, W] on
    `device` (nvJPEG on CUDA, libjpeg-turbo on the CPU); raises RuntimeError on a bad file."""
    return cast(torch.Tensor | list[torch.Tensor], _decoders()[0](data, mode="RGB", device=device))


def decode_image(path: str) -> torch.Tensor:
    """An image file (JPEG, PNG, WebP) decoded to RGB uint8 [3, H, W] on the CPU; raises
    RuntimeError, ValueError or OSError for a format the decoders do not read or a bad file."""
    return cast(torch.Tensor, _decoders()[1](path, mode="RGB"))


def decoders_in_use() -> str:
    """Which decoders decode: 'torchcodec', or 'torchvision' where TorchCodec does not load."""
    return _decoders()[2]
