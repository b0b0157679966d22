"""The kit's ResNets: AlgoPerf initialisation, widths, features, and the paper's checkpoints."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
import torch
import torchvision
from torchvision.models.resnet import BasicBlock, Bottleneck

from kit import models
from kit.architectures import ARCHITECTURES
from kit.params import bounds


def test_resnet50_has_torchvision_names_and_resnet50w2_is_widened_everywhere() -> None:
    plain, wide = models.build("resnet50", 1000), models.build("resnet50", 1000, width=2.0)
    reference = torchvision.models.resnet50().state_dict()
    assert {k: v.shape for k, v in plain.state_dict().items()} == {
        k: v.shape for k, v in reference.items()
    }
    backbone = sum(p.numel() for n, p in wide.named_parameters() if not n.startswith("fc."))
    assert backbone == pytest.approx(93.9e6, rel=0.001)  # Table 2's resnet50w2
    assert wide.feature_dim == 4096


def test_algoperf_initialisation() -> None:
    torch.manual_seed(0)
    model = models.build("resnet50", 1000)
    blocks = [m for m in model.modules() if isinstance(m, Bottleneck)]
    assert len(blocks) == 16 and all(torch.all(b.bn3.weight == 0) for b in blocks)
    assert all(torch.all(b.bn1.weight == 1) for b in blocks)
    assert torch.all(model.fc.bias == 0)
    assert model.fc.weight.std().item() == pytest.approx(0.01, rel=0.02)
    small = models.build("resnet18", 10, image_size=32)
    assert all(torch.all(b.bn2.weight == 0) for b in small.modules() if isinstance(b, BasicBlock))


def test_small_stem_and_features_are_the_pooled_input_of_the_head() -> None:
    model = models.build("resnet18", 7, width=0.25, image_size=32).eval()
    assert model.stem == "small" and model.conv1.stride == (1, 1)
    assert models.build("resnet18", 7, image_size=224).stem == "imagenet"
    x = torch.randn(3, 3, 32, 32)
    features = model.features(x)
    assert features.shape == (3, model.feature_dim) == (3, 128)
    assert (features >= 0).all()  # after the last ReLU
    assert torch.allclose(model(x), model.fc(features))


def trained_looking(model: torch.nn.Module) -> torch.nn.Module:
    """Randomise every parameter and buffer so a wrong mapping cannot go unnoticed."""
    torch.manual_seed(1)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.1)
    return model.eval()


def test_algoperf_checkpoint_round_trip_gives_identical_outputs(tmp_path: Path) -> None:
    source = trained_looking(models.build("resnet50", 11, width=0.25))
    path = tmp_path / "algoperf.pt"
    models.save_algoperf_checkpoint(source, path)
    saved = torch.load(path, weights_only=True)["model_params"]
    assert "_orig_mod.module.layer1.0.downsample.conv.weight" in saved
    assert "_orig_mod.module.layer4.0.downsample.bn.running_var" in saved
    assert not any(".downsample.0." in name for name in saved)
    target = models.build("resnet50", 11, width=0.25).eval()
    models.load_algoperf_checkpoint(target, path)
    x = torch.randn(2, 3, 64, 64)
    assert torch.equal(source(x), target(x))
    assert torch.equal(source.features(x), target.features(x))


@pytest.mark.parametrize(
    "arch, width, expected",
    [
        ("resnet18", 0.25, "missing"),
        ("resnet50", 0.5, "shape mismatch"),
    ],
)
def test_checkpoint_of_another_architecture_is_refused(
    tmp_path: Path, arch: str, width: float, expected: str
) -> None:
    path = tmp_path / "other.pt"
    models.save_algoperf_checkpoint(models.build(arch, 11, width=width), path)
    target = models.build("resnet50", 11, width=0.25)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(models.CheckpointError) as error:
        models.load_algoperf_checkpoint(target, path)
    message = str(error.value)
    assert str(path) in message and expected in message and "resnet50" in message
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def test_file_without_model_params_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save({"state_dict": {}}, path)
    with pytest.raises(models.CheckpointError, match="not an AlgoPerf checkpoint"):
        models.load_algoperf_checkpoint(models.build("resnet18", 3), path)


class _RunsCode:
    """What a crafted checkpoint holds: unpickling it would call os.system."""

    def __reduce__(self) -> tuple:
        import os

        return (os.system, ("touch pwned",))


def test_a_checkpoint_holding_code_is_refused_with_the_kits_advice_not_torchs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's safe loader refuses a pickle that would run code, and its message advises setting
    `weights_only` to False (its warning to trust the source aside): the kit says what the file
    holds and how to check where it came from, never that advice; nothing of the file runs."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": _RunsCode()}, path)
    with pytest.raises(models.CheckpointError) as refused:
        models.read_checkpoint(path)
    said = str(refused.value)
    assert said.startswith(f"{path}: holds Python objects beyond tensors (")
    assert "so it is not loaded: loading them would run code from the file" in said
    assert f"sha256sum {path}" in said and said.endswith(models.REPLACE_CHECKPOINT)
    assert "weights_only" not in said and "False" not in said and "\x1b" not in said
    assert "\n" not in said and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("arch", ["resnet10", "resnet50"])
def test_folded_batch_norms_compute_the_same_features_up_to_rounding(arch: str) -> None:
    """Numerics 3's extraction: every batch norm after a convolution folded into it, none left,
    the features those of the unfolded network within float32 rounding; folding twice changes
    nothing, and a network in training mode is refused (its batch norms read the batch)."""
    torch.manual_seed(0)
    model = models.build(arch, 10, 0.25, image_size=24)
    images = torch.randn(32, 3, 24, 24)
    model(images)  # running statistics other than the initial ones
    with pytest.raises(ValueError, match="eval mode"):
        models.fold_batch_norms(model)
    model.eval()
    with torch.no_grad():
        plain = model.features(images)
        folded = models.fold_batch_norms(model)
        features = folded.features(images)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    assert torch.allclose(features, plain, atol=1e-5, rtol=1e-4)
    weights = [p.clone() for p in folded.parameters()]
    models.fold_batch_norms(folded)
    assert all(torch.equal(a, b) for a, b in zip(weights, folded.parameters(), strict=True))


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_each_architecture_counts_the_sizes_of_the_network_it_builds(arch: str) -> None:
    """`Architecture.sizes` (what the plan's estimates read without torch) is the network's
    own count: its feature width, parameters, batch-norm statistics and counters, and the bytes
    of its state dict, for both stems, at widths down to those whose narrowest stage rounds to
    one channel (1/128: 0.5 rounds to 0, raised to 1) and up to the bound, odd ones between, and
    several class counts."""
    spec = ARCHITECTURES.get(arch)
    widths = (1.0, 1 / 8, 1 / 32, 1 / 128, 0.77, 3.3, bounds.WIDTH)
    cases = itertools.product(widths, ("imagenet", "small"))
    for (width, stem), num_classes in zip(cases, itertools.cycle((1000, 10, 1, 7)), strict=False):
        with torch.device("meta"):  # shapes without memory: the widest holds billions of weights
            network = models.build(arch, num_classes, width, stem)
        state = network.state_dict()
        sizes = spec.sizes(num_classes, width, stem)
        counted = {
            "feature_dim": network.feature_dim,
            "parameters": sum(p.numel() for p in network.parameters()),
            "statistics": sum(t.numel() for t in network.buffers() if t.is_floating_point()),
            "counters": sum(t.numel() for t in network.buffers() if not t.is_floating_point()),
        }
        assert dataclasses.asdict(sizes) == counted, (arch, width, num_classes, stem)
        assert sizes.state_bytes == sum(t.numel() * t.element_size() for t in state.values())
        assert spec.feature_dim(width) == network.feature_dim
