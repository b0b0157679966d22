"""The settings of a run's images: which dataset, where it lives, how it is augmented, and the
synthetic world's section (kit.data.synthetic_settings). Free of torch, like every settings
class."""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kit.data import kinds
from kit.data.synthetic_settings import SyntheticSettings
from kit.params import bounds
from kit.params.params import Strict


class DataSettings(Strict):
    """Where the images come from and how they are augmented ('auto' picks by kind and size)."""

    #: a registered dataset kind (kit.data.kinds)
    kind: str
    root: bounds.PathText | None = None
    image_size: int = Field(ge=8, le=bounds.IMAGE_SIZE)
    augment: Literal["auto", "algoperf", "crop_flip", "none"] = "auto"
    verify_images: bool = True
    #: where training JPEGs are decoded. cpu: by the DataLoader workers (libjpeg-turbo), about
    #: 100-200 images/s per core with the crop, so eight H100s need over 100 free cores. gpu: the
    #: workers only read the files; the run's device decodes each batch (each crop's region on
    #: the GPU's hardware JPEG engines, see hardware_jpeg; else TorchCodec's decode_jpeg, nvJPEG
    #: on CUDA) and crops, resizes and flips it there (kit.data.batched). dali: the
    #: workers read the files and draw each image's crop; NVIDIA DALI decodes only that region,
    #: resizes and flips it (kit.data.dali), with the GPU's JPEG decoder on CUDA and its CPU one
    #: elsewhere; an optional extra, `pip install -e '.[dali]'` (Linux only). gpu and dali:
    #: training batches only, with augment algoperf and a folder dataset; evaluation keeps cpu
    decode: Literal["cpu", "gpu", "dali"] = "cpu"
    #: decode gpu: decode each file's crop region on the GPU's hardware JPEG engines (A100, H100,
    #: H200, L4/L40) through nvImageCodec where it is installed (`pip install -e '.[nvimgcodec]'`)
    #: and the GPU has them, the rest on its CUDA decoder (kit.data.hardware); false: the CUDA
    #: decoder for every file. Other decode paths ignore it
    hardware_jpeg: bool = True
    #: decode dali on a GPU with a hardware JPEG decoder (A100, H100, H200): the share of each
    #: batch's JPEGs DALI's `mixed` decoder sends to it, the rest to nvJPEG's CUDA decoder (DALI's
    #: `hw_decoder_load`, its default 0.65, chosen by NVIDIA for one A100 engine; not measured on
    #: an H100 or H200, whose engines decode faster and which a larger share may suit: measure it
    #: with benchmarks/gpu_input.py --dali-loads). The CPU decoder, and every other decode,
    #: ignores it
    dali_hw_decoder_load: float = Field(0.65, ge=0.0, le=1.0)
    synthetic: SyntheticSettings | None = None

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str) -> str:
        return kinds.KINDS.checked(kind)

    @model_validator(mode="after")
    def _consistent(self) -> DataSettings:
        owners = [name for name in kinds.KINDS if kinds.get(name).section == "synthetic"]
        if (self.kind in owners) != (self.synthetic is not None):
            raise ValueError(
                f"synthetic: give this section exactly when kind is {' or '.join(owners)}"
            )
        if kinds.get(self.kind).reads_disk and not self.root:
            raise ValueError(f"root: kind {self.kind} reads images from disk and needs a root")
        if self.decode != "cpu" and (
            not kinds.get(self.kind).reads_disk
            or self.augment not in ("auto", "algoperf")
            or (self.augment == "auto" and self.image_size < 64)
        ):
            raise ValueError(
                f"decode: {self.decode} decodes JPEG files with RandomResizedCrop (augment "
                f"algoperf, or auto from 64 px); kind {self.kind} with augment "
                f"{self.augment} at {self.image_size} px needs decode: cpu"
            )
        if self.decode == "dali" and not dali_installed():
            raise ValueError(
                f"decode: dali needs NVIDIA DALI, which is not installed; install it with "
                f"{DALI_INSTALL}, or set decode: cpu"
            )
        return self


#: how to install the optional DALI backend (pyproject.toml's `dali` extra, Linux x86-64 and
#: aarch64 only: NVIDIA publishes no other wheels)
DALI_INSTALL = "`pip install -e '.[dali]'` or `uv sync --extra dali` (Linux only)"


def dali_installed() -> bool:
    """Whether NVIDIA DALI can be imported, found without importing it (which takes seconds)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` package at all
        return False
