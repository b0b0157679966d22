"""One entry of the feature cache on disk (kit.features writes and reads them): the record of what
produced its features (checkpoints' content hashes, dataset, split, transform, dtype) and the key
it is stored under, its arrays written under a temporary name and renamed with the record last,
so that a killed extraction leaves no entry, and its verification.

The record also holds each array file's size and SHA-256, checked by rank 0 on the first hit
and vouched for afterwards by a marker holding the files' change stamps (kit.files.files:
size, modification and status-change times, inode): a zeroed, shuffled or truncated cache is
extracted again rather than trusted, also when its modification times were put back (`touch -r`
restores those, never the status-change time). Hashing is small next to extraction but not
free for the paper's features (benchmarks/file_hash.py --features-gb prints its cost), so it
happens once per change of the files (and outside collective calls), and a hit costs three stat
calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kit.files import files
from kit.runtime import distributed

DTYPES = {"float16": np.float16, "float32": np.float32}
#: the arrays of a cache entry, each recorded with its size and hash
ARRAYS = ("features.npy", "labels.npy")
#: in a cache entry: rank 0's verdict on its arrays, with the files' sizes and times it covers
VERIFIED = "verified.json"
#: seconds between looks at the file system while rank 0 hashes
POLL_S = 0.2


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


#: each checkpoint's SHA-256 by file, with the change stamp it was hashed at: notebook 03 reads
#: the same files in each task's and split's extraction (66 files of up to 20 MB, eight times)
_HASHES: dict[Path, tuple[tuple[int, ...], str]] = {}


def checkpoint_hash(path: Path) -> str:
    """A checkpoint's SHA-256, hashed again only when its change stamp moved (any change made
    through the file system moves it: kit.files.files.change_stamp)."""
    stamp = files.change_stamp(path)
    known = _HASHES.get(path)
    if known is None or known[0] != stamp:
        known = _HASHES[path] = (stamp, files.file_hash(path))
    return known[1]


def record_of(
    checkpoints: Sequence[Path],
    hashes: dict[Path, str],
    dataset_id: str,
    split: str,
    transform: str,
    dtype: str,
    rows: int,
    identities: Mapping[Path, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """What produced an entry's features: each checkpoint's name and content hash (and the
    identity the run expected of it, when given: kit.train.backbones.identity_problem), the data and
    how it was read."""
    identities = identities or {}
    return {
        "checkpoints": [
            {"name": Path(p).name, "sha256": hashes[Path(p)]}
            | ({"identity": dict(identities[Path(p)])} if Path(p) in identities else {})
            for p in checkpoints
        ],
        "dataset": dataset_id,
        "split": split,
        "transform": transform,
        "dtype": dtype,
        "rows": rows,
    }


def key(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:20]


def array_content(path: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of each array file of a cache entry."""
    return {
        name: {"size": (path / name).stat().st_size, "sha256": files.file_hash(path / name)}
        for name in ARRAYS
    }


def stamps(path: Path) -> dict[str, list[int]]:
    """The change stamps of an entry's files (kit.files.files.change_stamp): what a verification
    marker vouches for. The size comes first."""
    return {name: list(files.change_stamp(path / name)) for name in (*ARRAYS, "record.json")}


def _marker(path: Path, signature: dict[str, list[int]]) -> dict[str, Any] | None:
    """The verification marker of an entry, if it vouches for the files as they are now."""
    try:
        marker = json.loads((path / VERIFIED).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("signature") == signature else None


def _check_content(path: Path, signature: dict[str, list[int]]) -> dict[str, Any]:
    """Rank 0: hash the entry's arrays against its record and write the verdict as its marker."""
    try:
        recorded = json.loads((path / "record.json").read_text())["content"]
        for name in ARRAYS:
            if signature[name][0] != recorded[name]["size"]:
                raise ValueError(
                    f"{name} has {signature[name][0]} bytes, {recorded[name]['size']} recorded"
                )
        if array_content(path) != recorded:
            raise ValueError("an array's content differs from its recorded hash")
        verdict: dict[str, Any] = {"ok": True}
    except (OSError, ValueError, KeyError, TypeError) as error:
        verdict = {
            "ok": False,
            "problem": str(error) if isinstance(error, ValueError) else repr(error),
        }
    _vouch(path, verdict, signature)
    return verdict


def _vouch(path: Path, verdict: dict[str, Any], signature: dict[str, list[int]]) -> None:
    """Write an entry's marker: its verdict for the files of `signature`."""
    with files.atomic_write(path / VERIFIED) as handle:
        handle.write(json.dumps(verdict | {"signature": signature}).encode())


def verified(path: Path) -> dict[str, Any] | None:
    """The record of a complete cache entry whose arrays are unchanged since they were written;
    None when there is none, or when it is corrupt (said on stderr: it will be rebuilt).

    The arrays are hashed once, by rank 0, which leaves its verdict in the entry's marker
    (verified.json) with the files' change stamps: later hits trust a marker that still matches
    them (any change through the file system, times put back or not, alters a stamp), and the other
    ranks wait for the marker on the file system, not in
    a collective call that a long hash would time out."""
    if not (path / "record.json").exists():
        return None
    try:
        signature = stamps(path)
    except OSError as error:
        verdict: dict[str, Any] = {"ok": False, "problem": repr(error)}
    else:
        found = _marker(path, signature)
        if found is None and distributed.rank_and_world()[0] == 0:
            found = _check_content(path, signature)
        while found is None:
            time.sleep(POLL_S)
            found = _marker(path, signature)
        verdict = found
    if not verdict["ok"]:
        if distributed.rank_and_world()[0] == 0:
            print(
                f"{path}: cached features are corrupt or incomplete ({verdict['problem']}); "
                "extracting them again",
                file=sys.stderr,
            )
        return None
    return json.loads((path / "record.json").read_text())


def open_entry(path: Path, hit: bool) -> FeatureSet:
    features = np.load(path / "features.npy", mmap_mode="c")  # copy-on-write: the file stays
    labels = np.load(path / "labels.npy")
    record = json.loads((path / "record.json").read_text())
    return FeatureSet(features, labels, record, path, hit)


def partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def start_entries(entries: dict[Path, tuple[int, str]], rows: int) -> None:
    """Rank 0 creates each entry's temporary folder and feature file (width, dtype), after
    removing a corrupt entry of that name; all wait."""
    distributed.barrier()  # nobody still reads a corrupt entry when rank 0 removes it
    if distributed.rank_and_world()[0] == 0:
        for path, (width, dtype) in entries.items():
            if path.exists():
                shutil.rmtree(path)
            partial(path).mkdir(parents=True, exist_ok=True)
            np.lib.format.open_memmap(
                partial(path) / "features.npy", mode="w+", dtype=DTYPES[dtype], shape=(rows, width)
            ).flush()
    distributed.barrier()


def finish_entries(records: dict[Path, dict[str, Any]], labels: np.ndarray) -> None:
    """Once every rank wrote its shard, rank 0 writes labels and records (hashing the arrays)
    and renames the temporary folders, the record last, so that a killed extraction leaves no
    entry; the other ranks wait for the entries on the file system, outside any collective
    call, however long the hashing takes."""
    distributed.barrier()
    if distributed.rank_and_world()[0] == 0:
        for path, record in records.items():
            np.save(partial(path) / "labels.npy", labels)
            record = record | {"content": array_content(partial(path))}
            (partial(path) / "record.json").write_text(json.dumps(record, indent=2))
            # the arrays were just hashed: their marker vouches for them as written (renaming
            # the folder changes no file's stamp), so the first hit does not hash them again
            _vouch(partial(path), {"ok": True}, stamps(partial(path)))
            os.replace(partial(path), path)
    for path in records:
        while not (path / "record.json").exists():
            time.sleep(POLL_S)
