"""Expected ResNet-50 training rates per GPU model: what `kit selfcheck` compares a node with and
what `kit launch plan` estimates wall times from (one table, so the two never disagree).

Figures are images per second of one GPU in a multi-GPU node, 224 px, mixed precision:

- A100: 2,078 img/s. NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/
  resnet50v1.5/README.md, table "Training performance: NVIDIA DGX A100 (8x A100 80GB)": 16,621
  img/s with mixed precision on 8 GPUs (pytorch-21.03 NGC container, DALI loading), / 8.
- V100: 1,200 img/s. The same README, "Training performance: NVIDIA DGX-1 (8x V100 16GB)",
  one GPU, mixed precision.
- H200: 4,645 img/s, measured: the kit's trainer on one H200 (eager, ResNet-50, 224 px, batch 256,
  bf16, channels-last; torch 2.11), docs/gpu-nodes.md "Measured on one H200".
- H100: an estimate, the H200's measurement: the same GH100 GPU at the same clocks (the H200's
  faster memory may make it some percent faster); replace it with what `kit selfcheck` measures.

`torch.compile` multiplied the trainer's rate by COMPILE_SPEEDUP on that H200.
"""

from __future__ import annotations

_A100 = 16_621 / 8
_H200 = 4_645.0
_H200_SOURCE = "the kit's trainer on one H200, eager, torch 2.11 (docs/gpu-nodes.md)"

#: GPU name fragment (matched case-insensitively, first match wins) -> (img/s, source)
EXPECTED_TRAIN_RATES: dict[str, tuple[float, str]] = {
    "H200": (_H200, f"measured: {_H200_SOURCE}"),
    "H100": (_H200, f"estimate: the H200's figure, the same GH100 GPU ({_H200_SOURCE})"),
    "A100": (
        _A100,
        "NVIDIA DeepLearningExamples ResNet-50 v1.5 (PyTorch), DGX A100 8x A100 "
        "80GB, mixed precision, 16,621 img/s / 8",
    ),
    "V100": (
        1200.0,
        "NVIDIA DeepLearningExamples ResNet-50 v1.5 (PyTorch), DGX-1 V100 16GB, "
        "one GPU, mixed precision",
    ),
}
#: the trainer's rate with `compile: true` over its eager rate: 6,567 / 4,645 img/s on that H200
COMPILE_SPEEDUP = 6_567 / 4_645


def expected_rate(gpu_name: str) -> tuple[float, str] | None:
    """The expected training images/s and its source for a GPU named `gpu_name`, if known."""
    for fragment, figure in EXPECTED_TRAIN_RATES.items():
        if fragment.lower() in gpu_name.lower():
            return figure
    return None
