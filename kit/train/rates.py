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

What the training loader delivers (INPUT_RATES) and what the fast probe of cached features
reads per second (FAST_PROBE_BYTES_PER_S) were measured on one H200 node with 16 cores
(docs/gpu-nodes.md): a step runs at the slower of the GPU and its input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

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
COMPILE_SOURCE = "torch.compile's speed-up measured on one H200"


def expected_rate(gpu_name: str) -> tuple[float, str] | None:
    """The expected training images/s and its source for a GPU named `gpu_name`, if known."""
    for fragment, figure in EXPECTED_TRAIN_RATES.items():
        if fragment.lower() in gpu_name.lower():
            return figure
    return None


@dataclass(frozen=True)
class InputRate:
    """Images/s one GPU's training loader delivers on a `data.decode` path: `per_worker` for
    each loader worker (CPU decoding grows with the cores), or `per_gpu` whatever the workers;
    neither when it was never measured (the step's rate is then assumed), and the `source`."""

    per_worker: float | None
    per_gpu: float | None
    source: str


_GPU_INPUT = "benchmarks/gpu_input.py on one H200 node, 16 cores, 2026-11-27 (docs/gpu-nodes.md)"

#: by `data.decode`, what the training loader delivered to the compiled ResNet-50 step from
#: 500 x 375 JPEGs with a photograph's detail (about 120 kB a file)
INPUT_RATES: dict[str, InputRate] = {
    "cpu": InputRate(
        3_648 / 15,
        None,
        f"measured: 15 CPU-decoding workers fed 3,648 img/s, 243 a worker ({_GPU_INPUT})",
    ),
    "gpu": InputRate(
        None,
        2_990,
        f"measured before its crops were resized a batch at a time and its decoder given a "
        f"stream of its own: GPU decoding with 8 workers fed 2,990 img/s ({_GPU_INPUT})",
    ),
    "dali": InputRate(None, None, "not measured on a GPU: the step's rate is assumed"),
}

#: bytes of cached features per second the fast probe reads, counting every epoch, at
#: FAST_PROBE_HEADS heads: 200,000 rows x 10,240 float16 features x 2 epochs in 5.7 s, 1,000
#: classes (benchmarks/probe_memory.py on one H200, 2026-11-26, docs/gpu-nodes.md)
FAST_PROBE_BYTES_PER_S = 200_000 * 10_240 * 2 * 2 / 5.7
FAST_PROBE_HEADS = 6
FAST_PROBE_SOURCE = (
    "measured: the fast probe read 200,000 x 10,240 float16 features, 2 epochs, 6 heads, "
    "1,000 classes in 5.7 s on one H200 (docs/gpu-nodes.md); time grows with the features "
    "read and the heads"
)


def input_rate(decode: str, workers: int) -> tuple[float | None, str]:
    """Images/s one GPU's training loader delivers with `data.decode: decode` and `workers`
    workers (None: not measured) and where the figure comes from."""
    found = INPUT_RATES[decode]
    if found.per_worker is not None:
        return max(workers, 1) * found.per_worker, found.source
    return found.per_gpu, found.source


def loader_rate() -> float:
    """Images/s one CPU-decoding loader worker delivers (the input table's, or a measured one)."""
    return INPUT_RATES["cpu"].per_worker or 0.0


def fast_probe_seconds(feature_bytes: float, epochs: int, heads: int) -> float:
    """Seconds the fast probe takes on one GPU over `feature_bytes` of cached features."""
    return feature_bytes * epochs / FAST_PROBE_BYTES_PER_S * heads / FAST_PROBE_HEADS


#: the help of `--rates` where a command takes a measured rates file
MEASURED_RATES_HELP = (
    "a JSON file benchmarks/gpu_input.py wrote (its --out) on a node: its measured step and input "
    "rates replace the table's (kit/train/rates.py), each line naming the file"
)


def use_measured(path: Path) -> list[str]:
    """Plan and check with what `benchmarks/gpu_input.py` measured on a node (its GPU's
    eager and compiled step, each decode path's input rate) in place of the figures above, for
    the rest of this process; returns one line per figure replaced, naming the file. Rows the
    file lacks keep the table's figure."""
    global COMPILE_SPEEDUP, COMPILE_SOURCE
    try:
        measured = json.loads(path.read_text())
        node, rows = measured["measured_on"], measured["rates"]
        device = str(node["device"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: not a JSON file written by benchmarks/gpu_input.py ({error})"
        ) from error
    cores, torch_version = node.get("cores", "?"), node.get("torch", "?")
    where = f"measured: {path} ({device}, {cores} cores, torch {torch_version})"
    best = {(r["input"], r["compiled"], r["workers"]): float(r["median"]) for r in rows}
    said = []
    eager, compiled = best.get(("synthetic", False, 0)), best.get(("synthetic", True, 0))
    if eager is not None:
        key = next((k for k in EXPECTED_TRAIN_RATES if k.lower() in device.lower()), device)
        EXPECTED_TRAIN_RATES[key] = (eager, where)
        said.append(f"step on {key}: {eager:,.0f} img/s eager")
        if compiled is not None:
            COMPILE_SPEEDUP, COMPILE_SOURCE = compiled / eager, where
            said.append(f"torch.compile: x{COMPILE_SPEEDUP:.2f}")
    for decode in INPUT_RATES:
        fed = sorted((w, rate) for (i, c, w), rate in best.items() if i == decode and c)
        if not fed:
            continue
        workers, rate = fed[-1]
        INPUT_RATES[decode] = (
            InputRate(rate / workers, None, f"{where}: {workers} workers fed {rate:,.0f} img/s")
            if decode == "cpu"
            else InputRate(None, rate, f"{where}: {workers} workers fed {rate:,.0f} img/s")
        )
        said.append(f"input {decode}: {rate:,.0f} img/s with {workers} workers")
    return [f"{line} ({path})" for line in said]
