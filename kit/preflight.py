"""Cheap checks of a data root's layout, made before anything trains (no image is opened).

Kept free of torch so that validating parameters (`python -m kit check`) stays fast.
"""

from __future__ import annotations

from kit.config import DataConfig
from kit.paths import resolve

#: what each on-disk kind must hold under its root, checked before anything starts
EXPECTED_LAYOUT = {
    "imagefolder": ["train/", "val/"],
    "cifar10": [f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)]
               + ["cifar-10-batches-py/test_batch", "cifar-10-batches-py/batches.meta"],
    "cifar100": ["cifar-100-python/train", "cifar-100-python/test", "cifar-100-python/meta"],
    "inat18": ["train2018.json", "val2018.json"],
}


def preflight(data: DataConfig) -> list[str]:
    """Cheap layout checks of a data root (no image is opened): the problems found, if any."""
    if data.kind == "synthetic":
        return []
    root = resolve(data.root)
    if "$" in str(root):
        return [f"{data.root}: an environment variable in data.root is not set"]
    if not root.is_dir():
        return [f"{root}: data root for kind {data.kind} does not exist (data.root)"]
    problems = []
    for entry in EXPECTED_LAYOUT[data.kind]:
        path = root / entry
        if entry.endswith("/"):
            if not path.is_dir() or not any(path.iterdir()):
                problems.append(f"{path}: expected a non-empty folder for kind {data.kind}")
        elif not path.is_file():
            problems.append(f"{path}: expected file missing for kind {data.kind}")
    return problems
