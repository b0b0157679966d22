"""Penultimate features of one or several frozen backbones, concatenated and cached on disk.

The paper's measurement is a linear probe on the concatenated global-average-pooled features of k
models. Extracting them is the expensive part, so features are written once to a memory-mapped
`.npy` file (an ImageNet-sized set, 1.28M x 8192, never has to fit in RAM) next to a JSON record
of what produced them: the checkpoints' content hashes (and the identity the run expects each to
record: a file copied from another run is refused, never served another run's features),
dataset, split, transform and dtype. A call with the same record is a cache hit; a changed
checkpoint file is a miss. Files are written
under temporary names and renamed, the record last, so a killed extraction leaves no cache entry.
Each entry's arrays are hashed once and vouched for afterwards (kit.feature_cache), so a zeroed,
shuffled or truncated cache is extracted again rather than trusted.

Decoding is the other expensive part, so each checkpoint is cached on its own and all checkpoints
missing from the cache are extracted in one pass over the images; a representation of several
checkpoints is then copied together from their entries, and representations sharing a model
(cat1, cat2, cat4 of one run) share its extraction.

With several processes (`torchrun`), each rank extracts a contiguous shard of the rows into the
same memory map and rank 0 writes the record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm import tqdm

from kit import feature_cache, models
from kit.data import workers
from kit.data.kinds.base import split_size
from kit.data.prefetch import DeviceBatches
from kit.files.paths import shown
from kit.numerics import blocked
from kit.numerics.threads import numerics_threads, one_thread
from kit.readout.numbers import counted
from kit.readout.progress import Stage, paused
from kit.runtime import distributed
from kit.train.backbones import load_backbone

#: the backbones of the last extraction pass, by checkpoint file and SHA-256. Notebook 03 reads
#: the same checkpoints in several passes (each task's training and evaluation splits), and
#: reading a trainer's checkpoint (its optimizer state included) can cost more than a small
#: pass: 0.3-0.4 s for each of a rehearsal's twelve ResNet-50s on a CPU, in every pass of every
#: rank
_LAST_PASS: dict[tuple[Path, str, str], models.KitResNet] = {}
#: how a CPU extraction's forward computes batch norm (numerics 3: folded into the convolution
#: before it, kit.models.fold_batch_norms), in its cache records: features cached under an
#: unfolded forward are other bits and never served for a folded one
FOLDED = "folded into the convolutions"


def _backbones(
    checkpoints: dict[Path, tuple[Path, str, dict[str, Any] | None]],
) -> dict[Path, models.KitResNet]:
    """The backbone of each entry's (checkpoint, SHA-256, expected identity): the last pass's
    when it read the same file with the same contents as the same identity, else loaded (and its
    identity checked); only this pass's are kept for the next."""
    keys = {
        entry: (path, digest, json.dumps(expected, sort_keys=True))
        for entry, (path, digest, expected) in checkpoints.items()
    }
    found = {
        entry: _LAST_PASS[key] if key in _LAST_PASS else load_backbone(*checkpoints[entry][::2])
        for entry, key in keys.items()
    }
    _LAST_PASS.clear()
    _LAST_PASS.update({key: found[entry] for entry, key in keys.items()})
    return found


def _shard(rows: int) -> range:
    rank, world = distributed.rank_and_world()
    return range(rank * rows // world, (rank + 1) * rows // world)


def _gather_labels(labels: np.ndarray, folder: Path) -> np.ndarray:
    """Every rank's labels in rank order, through files in `folder` (gloo or NCCL alike)."""
    rank, world = distributed.rank_and_world()
    if world == 1:
        return labels
    np.save(folder / f"labels.rank{rank}.npy", labels)
    distributed.barrier()
    parts = [np.load(folder / f"labels.rank{r}.npy") for r in range(world)]
    distributed.barrier()
    (folder / f"labels.rank{rank}.npy").unlink()
    return np.concatenate(parts)


def _place(backbones: Iterable[models.KitResNet], target: torch.device) -> None:
    """Each backbone on `target` in channels-last memory; on the CPU each batch norm folded into
    its convolution first (numerics version 3: kit.models.fold_batch_norms)."""
    for model in backbones:
        if target.type == "cpu":
            models.fold_batch_norms(model)
        model.to(target, memory_format=torch.channels_last)


def _extract_checkpoints(
    records: dict[Path, dict[str, Any]],
    checkpoints: dict[Path, Path],
    dataset: Dataset,
    batch_size: int,
    device: str,
    num_workers: int,
    progress: bool,
    stage: Stage,
    loader_timeout_s: float,
    side_by_side: int = 1,
) -> None:
    """One pass over this rank's shard: each batch is decoded and normalised once and fed to
    every backbone (on the CPU, `side_by_side` at once); entry `path` receives the features of
    `checkpoints[path]`. A loader worker that gives no batch for `loader_timeout_s` (or dies)
    fails the pass naming the checkpoints, the split and the batch it waited for."""
    backbones = _backbones(
        {
            path: (
                checkpoints[path],
                records[path]["checkpoints"][0]["sha256"],
                records[path]["checkpoints"][0].get("identity"),
            )
            for path in records
        }
    )
    records = {
        path: record | {"widths": [backbones[path].feature_dim]} for path, record in records.items()
    }
    rows = split_size(dataset)
    feature_cache.start_entries(
        {path: (model.feature_dim, records[path]["dtype"]) for path, model in backbones.items()},
        rows,
    )
    target = torch.device(device)
    _place(backbones.values(), target)
    outputs = {
        path: np.load(feature_cache.partial(path) / "features.npy", mmap_mode="r+")
        for path in backbones
    }
    shard = _shard(rows)
    loader = DataLoader(
        Subset(dataset, shard),
        batch_size=batch_size,
        num_workers=num_workers,
        pin_memory=target.type == "cuda",
        multiprocessing_context=workers.context() if num_workers else None,
        timeout=loader_timeout_s if num_workers else 0,
    )
    labels = np.empty(len(shard), dtype=np.int64)
    row = 0
    what = _named(list(checkpoints.values()))
    batches = tqdm(
        DeviceBatches(loader, target, torch.channels_last),
        desc=f"features of {counted(len(backbones), 'backbone')}",
        total=len(loader),
        disable=not progress or distributed.rank_and_world()[0] != 0,
    )
    waited = workers.loader_failures(
        lambda error: (
            f"extracting features of {what} on {stage.name}: {error} at batch "
            f"{row // batch_size + 1} of {len(loader)} (feature_loader_timeout_s: "
            f"{loader_timeout_s:g}): a loader worker is stuck or died. Nothing of this pass is "
            "cached; run it again to extract it again"
        )
    )
    # several backbones on the CPU: side by side, one intra-op thread each (kit.probes.parallel
    # says why); one: its blocks of images over the process's threads; a GPU runs them in turn
    side = side_by_side if target.type == "cpu" and len(backbones) > 1 else 1

    def forward(path: Path, images: torch.Tensor, span: slice) -> None:
        with (  # autocast is per thread: entered in the thread that runs the backbone
            torch.no_grad(),
            torch.autocast(target.type, torch.bfloat16, enabled=target.type == "cuda"),
        ):
            features = blocked.images(backbones[path].features, images)
            outputs[path][span] = features.float().cpu().numpy()

    lent = one_thread() if side > 1 else numerics_threads(target.type == "cpu")
    with waited, lent, ThreadPoolExecutor(max_workers=side) as pool:
        # side by side, a batch's backbones run while the next batch is read (its images
        # rendered or decoded, here or in the loader's workers): no core waits for the reading
        running: list[Future[None]] = []
        for images, batch_labels in batches:
            end = row + len(batch_labels)
            span = slice(shard.start + row, shard.start + end)
            if side > 1:
                submitted = [pool.submit(forward, path, images, span) for path in backbones]
                for done in running:
                    done.result()
                running = submitted
            else:
                for path in backbones:
                    forward(path, images, span)
            labels[row:end] = batch_labels.cpu().numpy()
            row = end
            stage.advance()
        for done in running:
            done.result()
    for output in outputs.values():
        output.flush()
    outputs.clear()  # the memory maps closed before their files are hashed
    first = next(iter(records))
    feature_cache.finish_entries(records, _gather_labels(labels, feature_cache.partial(first)))


def _named(checkpoints: list[Path]) -> str:
    """The checkpoints of a pass as a message names them: the first, and how many more."""
    more = len(checkpoints) - 1
    return shown(checkpoints[0]) + (f" and {counted(more, 'more checkpoint')}" if more else "")


def _concatenate(
    path: Path,
    record: dict[str, Any],
    parts: list[feature_cache.FeatureSet],
    chunk_rows: int = 1 << 16,
) -> None:
    """A representation's entry from its checkpoints' entries, each rank copying its shard of
    rows in chunks (an ImageNet-sized file never has to fit in RAM)."""
    record = record | {"widths": [part.features.shape[1] for part in parts]}
    rows = len(parts[0].labels)
    feature_cache.start_entries({path: (sum(record["widths"]), record["dtype"])}, rows)
    output = np.load(feature_cache.partial(path) / "features.npy", mmap_mode="r+")
    shard = _shard(rows)
    for start in range(shard.start, shard.stop, chunk_rows):
        stop = min(start + chunk_rows, shard.stop)
        output[start:stop] = np.concatenate([part.features[start:stop] for part in parts], 1)
    output.flush()
    del output
    feature_cache.finish_entries({path: record}, parts[0].labels)


@paused()
def extract_many(
    representations: Sequence[Sequence[Path]],
    dataset: Dataset,
    dataset_id: str,
    split: str,
    transform: str,
    cache_dir: Path,
    batch_size: int = 256,
    dtype: str = "float32",
    device: str = "cpu",
    num_workers: int = 0,
    progress: bool = True,
    loader_timeout_s: float = 300,
    side_by_side: int = 1,
    identities: Mapping[Path, Mapping[str, Any]] | None = None,
) -> list[feature_cache.FeatureSet]:
    """Features of several representations (lists of checkpoints) on one split, each
    concatenated in the order given; its time counts for no open progress bar (`paused`).
    Every checkpoint has its own cache entry (a single-checkpoint representation's entry), and
    all the checkpoints not cached yet are extracted together: each image is decoded once
    whatever the number of backbones and representations. A representation of several
    checkpoints is then written from their entries. `dataset_id` and `transform` describe the
    inputs for the cache records (e.g. a path and the transform's name); the dataset returns
    (image, label) with images transformed, uint8 pixels (normalised on the device) or floats
    already standardised. On the CPU, `side_by_side` backbones run at once, each on one
    intra-op thread (a thread per backbone keeps small convolutions busy where two threads
    splitting each one wait on each other; docs/benchmarks.md, "One sweep cell's cost").

    `identities` gives, by checkpoint, what the run expects it to be
    (kit.train.backbones.identity_problem): a checkpoint recording another identity is refused
    when extracted, and the identity is part of its cache key, so that features cached for the
    same bytes under another run's name (a file copied between runs) are never served for this
    one.
    """
    if not representations or not all(representations):
        raise ValueError("extract needs at least one checkpoint per representation")
    if dtype not in feature_cache.DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(feature_cache.DTYPES)}, got {dtype}")
    rows = split_size(dataset)
    if rows == 0:
        raise ValueError(f"dataset '{dataset_id}' split '{split}' is empty")
    hashes = {
        Path(p): feature_cache.checkpoint_hash(Path(p)) for rep in representations for p in rep
    }

    def entry(checkpoints: Sequence[Path]) -> tuple[Path, dict[str, Any]]:
        record = feature_cache.record_of(
            checkpoints, hashes, dataset_id, split, transform, dtype, rows, identities
        )
        if torch.device(device).type == "cpu":  # other bits than an unfolded forward's
            record["batch_norm"] = FOLDED
        return Path(cache_dir) / feature_cache.key(record), record

    verdicts: dict[Path, bool] = {}

    def cached(path: Path) -> bool:
        """A complete, uncorrupted entry (checked once per call; every rank reaches the same
        verdict on the same files)."""
        if path not in verdicts:
            verdicts[path] = feature_cache.verified(path) is not None
        return verdicts[path]

    wanted = [entry(rep) for rep in representations]
    hits = [cached(path) for path, _ in wanted]
    needed = dict.fromkeys(
        Path(p) for rep, hit in zip(representations, hits, strict=True) if not hit for p in rep
    )  # ordered, without repeats
    missing = {
        path: (checkpoint, record)
        for checkpoint in needed
        for path, record in [entry([checkpoint])]
        if not cached(path)
    }
    name = f"features {split.split('[')[0]} ({rows} rows)"
    reused = f"reused {sum(hits)} of {counted(len(hits), 'cached representation')}"
    if missing:
        stage = Stage(
            name,
            math.ceil(len(_shard(rows)) / batch_size),
            "batch",
            f"{reused}, extracting {counted(len(missing), 'checkpoint')}",
        )
        _extract_checkpoints(
            {path: record for path, (_, record) in missing.items()},
            {path: checkpoint for path, (checkpoint, _) in missing.items()},
            dataset,
            batch_size,
            device,
            num_workers,
            progress,
            stage,
            loader_timeout_s,
            side_by_side,
        )
        verdicts.update(dict.fromkeys(missing, True))
    else:
        stage = Stage(name, 0, "batch", "")
    rebuilt = 0
    for rep, (path, record) in zip(representations, wanted, strict=True):
        if not cached(path):
            _concatenate(
                path, record, [feature_cache.open_entry(entry([p])[0], hit=True) for p in rep]
            )
            verdicts[path] = True
            rebuilt += 1
    said = f"{reused}, extracted {counted(len(missing), 'checkpoint')}"
    if rebuilt:  # a missing or corrupt representation whose checkpoints were cached
        said += f", concatenated {counted(rebuilt, 'representation')} from cached checkpoints"
    stage.finish(said)
    return [
        feature_cache.open_entry(path, hit) for (path, _), hit in zip(wanted, hits, strict=True)
    ]


def extract(
    checkpoints: Sequence[Path],
    dataset: Dataset,
    dataset_id: str,
    split: str,
    transform: str,
    cache_dir: Path,
    batch_size: int = 256,
    dtype: str = "float32",
    device: str = "cpu",
    num_workers: int = 0,
    progress: bool = True,
    loader_timeout_s: float = 300,
) -> feature_cache.FeatureSet:
    """Features of `dataset` under each checkpoint, concatenated in the order given (one
    representation of `extract_many`)."""
    return extract_many(
        [checkpoints],
        dataset,
        dataset_id,
        split,
        transform,
        cache_dir,
        batch_size,
        dtype,
        device,
        num_workers,
        progress,
        loader_timeout_s,
    )[0]
