"""Expected ResNet-50 training rates per GPU model: what `kit selfcheck` compares a node with and
what `kit launch plan` estimates wall times from (one table, so the two never disagree).

Figures are images per second of one GPU in a multi-GPU node, 224 px, mixed precision:

- A100: 2,078 img/s. NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/
  resnet50v1.5/README.md, table "Training performance: NVIDIA DGX A100 (8x A100 80GB)": 16,621
  img/s with mixed precision on 8 GPUs (pytorch-21.03 NGC container, DALI loading), / 8.
- V100: 1,200 img/s. The same README, "Training performance: NVIDIA DGX-1 (8x V100 16GB)",
  one GPU, mixed precision.
- H100, H200: estimates, twice the A100 (no row in that README): replace them with what
  `kit selfcheck` measures on the node.
"""

from __future__ import annotations

_A100 = 16_621 / 8

#: GPU name fragment (matched case-insensitively, first match wins) -> (img/s, source)
EXPECTED_TRAIN_RATES: dict[str, tuple[float, str]] = {
    "H200": (2 * _A100, "estimate: twice the A100 figure, as the H100"),
    "H100": (
        2 * _A100,
        "estimate: twice the A100 figure (NVIDIA's ResNet-50 README has no H100 row)",
    ),
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


def expected_rate(gpu_name: str) -> tuple[float, str] | None:
    """The expected training images/s and its source for a GPU named `gpu_name`, if known."""
    for fragment, figure in EXPECTED_TRAIN_RATES.items():
        if fragment.lower() in gpu_name.lower():
            return figure
    return None
