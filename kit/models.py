"""ResNets as the paper pretrained them, and the paper's released checkpoints.

The networks are torchvision's ResNet blocks and layer builder with AlgoPerf's initialisation:
the last BatchNorm scale of every residual block starts at zero (each block starts as the
identity) and the head is N(0, 0.01) with zero bias. `width` multiplies every channel count:
`resnet50` at width 2 is the resnet50w2 of Table 2 (93.9M parameters without the head; widening
only the bottleneck, as torchvision's wide_resnet50_2 does, gives 66.8M). The small stem (3x3
convolution, stride 1, no max-pool) keeps 32 px inputs from being reduced to 1x1 before layer4.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

from kit.architectures import ARCHITECTURES
from kit.files import files
from kit.readout import notices


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, is corrupt, or does not fit its model."""


#: how to get a good copy of a checkpoint, for error messages
REPLACE_CHECKPOINT = (
    "Replace it with a good copy; for a run the kit trained, delete the run's "
    "folder and run again to retrain it."
)


def read_checkpoint(path: Path, rebuild: str = REPLACE_CHECKPOINT) -> Any:
    """A checkpoint file's content (tensors on the CPU), checked against its recorded hash when
    it has one (else a notice names the file: on stderr, and in the run's summary and report,
    kit.readout.notices); a missing, corrupt or unreadable file raises CheckpointError naming it
    and `rebuild` (how to make it again)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file not found")
    try:
        verified = files.verify(path, rebuild)
    except files.IntegrityError as error:
        raise CheckpointError(str(error)) from None
    if not verified:
        notices.notice(
            f"{path}: no recorded hash ({files.sidecar(path).name}), so it is "
            "loaded unverified (a file the kit did not write, or one whose hash was "
            "removed)"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (
        RuntimeError,
        EOFError,
        OSError,
        ValueError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
    ) as error:
        if isinstance(error, pickle.UnpicklingError) and "unsupported global" in str(error).lower():
            raise CheckpointError(_pickled_objects(path, str(error), rebuild)) from None
        # torch's own words after the unpickler's name, not its first line, which advises
        # loading the file unsafely
        said = str(error).split("WeightsUnpickler error:")[-1]
        reason = ([line for line in said.strip().splitlines() if line.strip()] or [""])[0][:200]
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint, truncated or corrupt "
            f"({type(error).__name__}: {reason}). {rebuild}"
        ) from None


def _pickled_objects(path: Path, said: str, rebuild: str) -> str:
    """The refusal of a checkpoint holding Python objects beyond tensors, which torch's safe
    loader will not build: the kit's own advice (where the file came from, how to check it),
    never torch's, which suggests loading it unsafely."""
    found = re.search(r"GLOBAL ([\w.]+)", said)
    what = f" ({found.group(1)})" if found else ""
    return (
        f"{path}: holds Python objects beyond tensors{what}, so it is not loaded: loading them "
        "would run code from the file. The kit's checkpoints and the paper's released ones hold "
        f"tensors only; find out where this file came from and compare its SHA-256 (sha256sum "
        f"{path}) with the hash its source publishes. {rebuild}"
    )


def non_finite(state: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors of a state dict holding NaN or infinity."""
    return [
        name
        for name, tensor in state.items()
        if tensor.is_floating_point() and not torch.isfinite(tensor).all()
    ]


class KitResNet(ResNet):
    """torchvision's ResNet with a width multiplier, a small-input stem and `features()`."""

    def __init__(
        self,
        arch: str,
        num_classes: int,
        width: float = 1.0,
        stem: Literal["imagenet", "small"] = "imagenet",
    ) -> None:
        nn.Module.__init__(self)  # ResNet.__init__ hard-codes 64 channels; build the same layout
        spec = ARCHITECTURES.get(arch)
        block: type[BasicBlock | Bottleneck] = Bottleneck if spec.bottleneck else BasicBlock
        layers = spec.stages
        widths = spec.channels(width)
        self.arch, self.width, self.stem = arch, width, stem
        self._norm_layer = nn.BatchNorm2d
        self.inplanes, self.dilation, self.groups, self.base_width = widths[0], 1, 1, 64
        if stem == "small":
            self.conv1 = nn.Conv2d(3, widths[0], kernel_size=3, stride=1, padding=1, bias=False)
            self.maxpool: nn.Module = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)
        self.feature_dim = self.fc.in_features
        self._algoperf_init()

    def _algoperf_init(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        for module in self.modules():
            if isinstance(module, Bottleneck):
                nn.init.zeros_(module.bn3.weight)
            elif isinstance(module, BasicBlock):
                nn.init.zeros_(module.bn2.weight)
        nn.init.normal_(self.fc.weight, mean=0.0, std=0.01)
        nn.init.zeros_(self.fc.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Global-average-pooled layer4 output (after its ReLU): what linear probes read."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def fold_batch_norms(model: nn.Module) -> nn.Module:
    """`model` (in eval mode) with every batch norm that follows a convolution folded into it
    (the convolution's weight scaled per output channel and a bias added, the batch norm replaced
    by the identity): the same function up to rounding at about a fifth less of a forward's
    cost, for extraction (docs/benchmarks.md, "What extraction should cost"). The scale
    gamma / sqrt(var + eps) and the bias are computed in float64 with numpy's correctly rounded
    operations and rounded once to the weights' type, so the folded weights are the same bits on
    every CPU. Idempotent: a folded network has no batch norm left to fold."""
    if model.training:
        raise ValueError("batch norms fold only in eval mode (their running statistics)")
    pairs: list[tuple[nn.Module, str, str]] = []
    for module in model.modules():
        if isinstance(module, nn.Sequential) and len(module) == 2:
            pairs.append((module, "0", "1"))
        pairs += [
            (module, f"conv{i}", f"bn{i}")
            for i in (1, 2, 3)
            if isinstance(getattr(module, f"conv{i}", None), nn.Conv2d)
        ]
    for parent, conv_name, bn_name in pairs:
        conv, bn = getattr(parent, conv_name), getattr(parent, bn_name)
        if not (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)):
            continue
        assert bn.running_var is not None and bn.running_mean is not None
        weight = conv.weight.detach()
        var, mean = (t.detach().double().cpu().numpy() for t in (bn.running_var, bn.running_mean))
        gamma = bn.weight.detach().double().cpu().numpy() if bn.affine else np.ones_like(var)
        beta = bn.bias.detach().double().cpu().numpy() if bn.affine else np.zeros_like(var)
        scale = gamma / np.sqrt(var + bn.eps)
        shift = beta - mean * scale
        if conv.bias is not None:
            shift = shift + conv.bias.detach().double().cpu().numpy() * scale
        folded = weight.double().cpu().numpy() * scale[:, None, None, None]
        fused = nn.Conv2d(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,  # type: ignore[arg-type]
            conv.stride,  # type: ignore[arg-type]
            conv.padding,  # type: ignore[arg-type]
            conv.dilation,  # type: ignore[arg-type]
            conv.groups,
            bias=True,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            fused.weight.copy_(torch.from_numpy(folded).to(weight.dtype))
            assert fused.bias is not None
            fused.bias.copy_(torch.from_numpy(shift).to(weight.dtype))
        fused.eval()
        setattr(parent, conv_name, fused)
        setattr(parent, bn_name, nn.Identity())
    return model


def build(
    arch: str,
    num_classes: int,
    width: float = 1.0,
    stem: Literal["auto", "imagenet", "small"] = "auto",
    image_size: int = 224,
) -> KitResNet:
    """A freshly initialised network; stem 'auto' is 'small' below 64 px."""
    if arch not in ARCHITECTURES:
        raise ValueError(ARCHITECTURES.unknown(arch))
    if stem == "auto":
        return KitResNet(arch, num_classes, width, "small" if image_size < 64 else "imagenet")
    return KitResNet(arch, num_classes, width, stem)


# ---------------------------------------------------------------------------------------------
# AlgoPerf checkpoints: {'model_params': state_dict} with torch.compile/DDP prefixes and
# downsample layers named conv/bn where torchvision numbers them 0/1
# ---------------------------------------------------------------------------------------------

_WRAPPER_PREFIX = re.compile(r"^(?:_orig_mod\.|module\.)+")
_TO_TORCHVISION = {".downsample.conv.": ".downsample.0.", ".downsample.bn.": ".downsample.1."}


def from_algoperf_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """AlgoPerf parameter names -> the kit's (torchvision's) names."""
    renamed = {}
    for name, tensor in state.items():
        name = _WRAPPER_PREFIX.sub("", name)
        for algoperf, torchvision in _TO_TORCHVISION.items():
            name = name.replace(algoperf, torchvision)
        renamed[name] = tensor
    return renamed


def to_algoperf_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The kit's names -> AlgoPerf's, as saved from a compiled DDP model."""
    renamed = {}
    for name, tensor in state.items():
        for algoperf, torchvision in _TO_TORCHVISION.items():
            name = name.replace(torchvision, algoperf)
        renamed[f"_orig_mod.module.{name}"] = tensor
    return renamed


def save_algoperf_checkpoint(model: nn.Module, path: Path) -> None:
    """Write a model in the format of the paper's released checkpoints (with its hash)."""
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    with files.hashed_write(Path(path)) as handle:
        torch.save({"model_params": to_algoperf_names(state)}, handle)


def algoperf_width(params: dict[str, torch.Tensor]) -> float:
    """The width of an AlgoPerf ResNet-50 from its stem's channels (64 at width 1, as the
    released files have; a narrower stand-in for tests has fewer), 1.0 when it has no stem."""
    stem = from_algoperf_names(params).get("conv1.weight")
    return 1.0 if stem is None else stem.shape[0] / 64


def load_state(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Load weights strictly, refusing with a list of what differs when they do not fit."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        f"{name} {tuple(state[name].shape)} vs {tuple(expected[name].shape)}"
        for name in sorted(set(state) & set(expected))
        if state[name].shape != expected[name].shape
    ]
    if missing or unexpected or mismatched:
        described = getattr(model, "arch", type(model).__name__)
        problems = [
            f"{source}: does not fit the model ({described}, "
            f"width {getattr(model, 'width', '?')}); is it another architecture?"
        ]
        for label, names in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("shape mismatch (checkpoint vs model)", mismatched),
        ):
            if names:
                more = f" ... and {len(names) - 5} more" if len(names) > 5 else ""
                problems.append(f"  {len(names)} {label}: {', '.join(names[:5])}{more}")
        raise CheckpointError("\n".join(problems))
    model.load_state_dict(state)


def load_algoperf_checkpoint(model: nn.Module, path: Path, checkpoint: Any = None) -> None:
    """Load one of the paper's AlgoPerf checkpoints into a kit model (the head included);
    `checkpoint` is the file's content when the caller has already read it."""
    if checkpoint is None:
        checkpoint = read_checkpoint(path)
    if not isinstance(checkpoint, dict) or "model_params" not in checkpoint:
        keys = ", ".join(list(checkpoint)[:5]) if isinstance(checkpoint, dict) else "not a dict"
        raise CheckpointError(f"{path}: not an AlgoPerf checkpoint (no 'model_params'; has {keys})")
    load_state(model, from_algoperf_names(checkpoint["model_params"]), str(path))
