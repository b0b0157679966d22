"""Penultimate features of one or several frozen backbones, concatenated and cached on disk.

The paper's measurement is a linear probe on the concatenated global-average-pooled features of k
models. Extracting them is the expensive part, so features are written once to a memory-mapped
`.npy` file (an ImageNet-sized set, 1.28M x 8192, never has to fit in RAM) next to a JSON record
of what produced them: the checkpoints' content hashes, dataset, split, transform and dtype. A
call with the same record is a cache hit; a changed checkpoint file is a miss. Files are written
under temporary names and renamed, the record last, so a killed extraction leaves no cache entry.
The record also holds each array file's size and SHA-256, checked on every hit: a zeroed,
shuffled or truncated cache is extracted again rather than trusted (hashing costs about 1.5 s per
GB read, small next to extraction).

With several processes (`torchrun`), each rank extracts a contiguous shard of the rows into the
same memory map and rank 0 writes the record.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm import tqdm

from kit import files, models
from kit.config import TrainConfig

DTYPES = {"float16": np.float16, "float32": np.float32}
#: the arrays of a cache entry, each recorded with its size and hash
ARRAYS = ("features.npy", "labels.npy")


def load_backbone(path: Path) -> models.KitResNet:
    """A network from a kit checkpoint (its config rebuilds the architecture) or from one of
    the paper's AlgoPerf checkpoints (ResNet-50, 1000 classes)."""
    state = models.read_checkpoint(path)
    if isinstance(state, dict) and "model_params" in state:
        model = models.build("resnet50", 1000)
        models.load_algoperf_checkpoint(model, path, state)
    elif isinstance(state, dict) and "model" in state and "config" in state:
        cfg = TrainConfig(**state["config"])
        model = models.build(cfg.model, cfg.num_classes, cfg.width, cfg.stem,
                             cfg.data.image_size)
        models.load_state(model, state["model"], str(path))
    else:
        keys = ", ".join(list(state)[:5]) if isinstance(state, dict) else type(state).__name__
        raise models.CheckpointError(f"{path}: neither a kit checkpoint ('model' and 'config') "
                                     f"nor an AlgoPerf one ('model_params'); has {keys}")
    return model.eval()


@dataclass
class FeatureSet:
    """Concatenated features [N, sum of widths] (memory-mapped) and labels [N]."""

    features: np.ndarray
    labels: np.ndarray
    record: dict[str, Any]
    path: Path
    cache_hit: bool

    def torch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-copy tensors over the memory map (float16 features stay float16)."""
        return torch.from_numpy(self.features), torch.from_numpy(self.labels)


def _record(checkpoints: Sequence[Path], dataset_id: str, split: str, transform: str,
            dtype: str, rows: int) -> dict[str, Any]:
    return {"checkpoints": [{"name": Path(p).name, "sha256": files.file_hash(Path(p))}
                            for p in checkpoints],
            "dataset": dataset_id, "split": split, "transform": transform, "dtype": dtype,
            "rows": rows}


def _key(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:20]


def _content(path: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of each array file of a cache entry (about 1.5 s per GB)."""
    return {name: {"size": (path / name).stat().st_size, "sha256": files.file_hash(path / name)}
            for name in ARRAYS}


def _verified(path: Path) -> dict[str, Any] | None:
    """The record of a complete cache entry whose arrays are unchanged since they were written;
    None when there is none, or when it is corrupt (said on stderr: it will be rebuilt)."""
    record_path = path / "record.json"
    if not record_path.exists():
        return None
    try:
        record = json.loads(record_path.read_text())
        recorded = record["content"]
        for name in ARRAYS:
            size = (path / name).stat().st_size
            if size != recorded[name]["size"]:
                raise ValueError(f"{name} has {size} bytes, {recorded[name]['size']} recorded")
        if _content(path) != recorded:
            raise ValueError("an array's content differs from its recorded hash")
    except (OSError, ValueError, KeyError, TypeError) as error:
        problem = str(error) if isinstance(error, ValueError) else repr(error)
        print(f"{path}: cached features are corrupt or incomplete ({problem}); extracting them "
              "again", file=sys.stderr)
        return None
    return record


def _open(path: Path, record: dict[str, Any], hit: bool) -> FeatureSet:
    features = np.load(path / "features.npy", mmap_mode="c")  # copy-on-write: the file stays
    labels = np.load(path / "labels.npy")
    return FeatureSet(features, labels, record, path, hit)


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def extract(checkpoints: Sequence[Path], dataset: Dataset, dataset_id: str, split: str,
            transform: str, cache_dir: Path, batch_size: int = 256, dtype: str = "float32",
            device: str = "cpu", num_workers: int = 0, progress: bool = True) -> FeatureSet:
    """Features of `dataset` under each checkpoint, concatenated in the order given.

    `dataset_id` and `transform` describe the inputs for the cache record (e.g. a path and the
    transform's repr); the dataset must return (image, label) with images already transformed.
    """
    if not checkpoints:
        raise ValueError("extract needs at least one checkpoint")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype}")
    rows = len(dataset)
    if rows == 0:
        raise ValueError(f"dataset '{dataset_id}' split '{split}' is empty")
    record = _record(checkpoints, dataset_id, split, transform, dtype, rows)
    path = Path(cache_dir) / _key(record)
    cached = _verified(path)  # every rank reaches the same verdict on the same files
    if cached is not None:
        return _open(path, cached, hit=True)

    rank, world = _rank_and_world()
    _barrier()  # nobody still reads a corrupt entry when rank 0 removes it
    if rank == 0 and path.exists():
        shutil.rmtree(path)
    backbones = [load_backbone(Path(p)) for p in checkpoints]
    widths = [b.feature_dim for b in backbones]
    temporary = path.with_name(path.name + ".partial")
    if rank == 0:
        temporary.mkdir(parents=True, exist_ok=True)
        np.lib.format.open_memmap(temporary / "features.npy", mode="w+", dtype=DTYPES[dtype],
                                  shape=(rows, sum(widths))).flush()
    _barrier()
    features = np.load(temporary / "features.npy", mmap_mode="r+")
    shard = range(rank * rows // world, (rank + 1) * rows // world)
    loader = DataLoader(Subset(dataset, shard), batch_size=batch_size, num_workers=num_workers,
                        pin_memory=device.startswith("cuda"))
    labels = np.empty(len(shard), dtype=np.int64)
    target = torch.device(device)
    use_bf16 = target.type == "cuda"
    column = 0
    for index, (backbone, width) in enumerate(zip(backbones, widths)):
        backbone.to(target, memory_format=torch.channels_last)
        row = shard.start
        for images, batch_labels in tqdm(loader, desc=f"features {index + 1}/{len(backbones)}",
                                         disable=not progress or rank != 0):
            images = images.to(target, non_blocking=True, memory_format=torch.channels_last)
            with torch.no_grad(), torch.autocast(target.type, torch.bfloat16, enabled=use_bf16):
                batch = backbone.features(images).float().cpu().numpy()
            features[row:row + len(batch), column:column + width] = batch
            if index == 0:
                labels[row - shard.start:row - shard.start + len(batch)] = batch_labels.numpy()
            row += len(batch)
        backbone.cpu()
        column += width
    features.flush()
    del features
    np.save(temporary / f"labels.rank{rank}.npy", labels)
    _barrier()
    if rank == 0:
        parts = [np.load(temporary / f"labels.rank{r}.npy") for r in range(world)]
        np.save(temporary / "labels.npy", np.concatenate(parts))
        for r in range(world):
            (temporary / f"labels.rank{r}.npy").unlink()
        record["widths"] = widths
        record["content"] = _content(temporary)
        (temporary / "record.json").write_text(json.dumps(record, indent=2))
        os.replace(temporary, path)
    _barrier()
    return _open(path, json.loads((path / "record.json").read_text()), hit=False)

