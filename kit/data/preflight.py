"""Cheap checks of a data root's layout, made before anything trains (no image is opened).

Kept free of torch so that validating parameters (`python -m kit check`) stays fast; checks
that need torch (opening checkpoints) import it when called. Every check returns all the
problems it finds, each naming its path, so that one pass reports them all.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.core.paths import resolve
from kit.data.settings import DataSettings

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class DataError(ValueError):
    """Data that cannot be trained on, with the path that holds it."""


@dataclass(frozen=True)
class CifarLayout:
    """torchvision's on-disk CIFAR layout: python pickles in one folder."""

    folder: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    names_key: str
    labels_key: str


CIFAR_LAYOUTS = {
    "cifar10": CifarLayout("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)),
                           ("test_batch",), "batches.meta", "label_names", "labels"),
    "cifar100": CifarLayout("cifar-100-python", ("train",), ("test",), "meta",
                            "fine_label_names", "fine_labels"),
}

#: what each on-disk kind must hold under its root, checked before anything starts
EXPECTED_LAYOUT = {
    "imagefolder": ["train/", "val/"],
    **{kind: [f"{layout.folder}/{name}" for name in (*layout.train, *layout.test, layout.meta)]
       for kind, layout in CIFAR_LAYOUTS.items()},
    "inat18": ["train2018.json", "val2018.json"],
}


def read_cifar_pickle(path: Path) -> dict[str, Any]:
    """One CIFAR pickle with text keys and class names, whether it is an original (Python 2)
    file or one re-saved from Python 3 with bytes keys, which torchvision's reader refuses."""
    try:
        with open(path, "rb") as handle:
            content = pickle.load(handle, encoding="latin1")
    except (OSError, EOFError, ValueError, pickle.UnpicklingError, AttributeError,
            ImportError, IndexError) as error:
        raise DataError(f"{path}: not a readable CIFAR pickle ({error!r})") from None
    if not isinstance(content, dict):
        raise DataError(f"{path}: a CIFAR pickle holds a dict, this one a "
                        f"{type(content).__name__}")
    text = {key.decode("latin1") if isinstance(key, bytes) else key: value
            for key, value in content.items()}
    for key, value in text.items():
        if key.endswith("label_names"):
            text[key] = [v.decode("latin1") if isinstance(v, bytes) else v for v in value]
    return text


def cifar_class_names(folder: Path, layout: CifarLayout) -> list[str]:
    """The class names in a CIFAR folder's meta file; DataError naming the file when it is
    unreadable or lacks them."""
    meta_path = folder / layout.meta
    meta = read_cifar_pickle(meta_path)
    if layout.names_key not in meta:
        raise DataError(f"{meta_path}: no '{layout.names_key}' (a CIFAR meta file has it; this "
                        f"one has {', '.join(meta) or 'no keys'})")
    return meta[layout.names_key]


def _holds_an_image(folder: str) -> bool:
    """Stops at the first image found, so that a full ImageNet split is checked quickly."""
    subfolders = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir():
                subfolders.append(entry.path)
            elif entry.name.lower().endswith(IMAGE_SUFFIXES):
                return True
    return any(_holds_an_image(sub) for sub in subfolders)


def empty_class_folders(split: Path) -> list[Path]:
    """Class folders of an ImageFolder split holding no image (at any depth)."""
    return [folder for folder in sorted(p for p in split.iterdir() if p.is_dir())
            if not _holds_an_image(str(folder))]


def preflight(data: DataSettings) -> list[str]:
    """Cheap layout checks of a data root (no image is opened): the problems found, if any."""
    if data.kind == "synthetic":
        return []
    root = resolve(data.root)
    if "$" in str(root):
        return [f"{data.root}: an environment variable in data.root is not set"]
    if not root.is_dir():
        return [f"{root}: data root for kind {data.kind} does not exist (data.root)"]
    if not os.access(root, os.R_OK | os.X_OK):
        return [f"{root}: data root for kind {data.kind} is not readable (data.root)"]
    problems = []
    for entry in EXPECTED_LAYOUT[data.kind]:
        path = root / entry
        if entry.endswith("/"):
            if not path.is_dir() or not any(path.iterdir()):
                problems.append(f"{path}: expected a non-empty folder for kind {data.kind}")
            else:
                problems += [f"{folder}: class folder without images"
                             for folder in empty_class_folders(path)]
        elif not path.is_file():
            problems.append(f"{path}: expected file missing for kind {data.kind}")
        elif not os.access(path, os.R_OK):
            problems.append(f"{path}: not readable")
    if data.kind in CIFAR_LAYOUTS and not problems:
        layout = CIFAR_LAYOUTS[data.kind]
        try:
            cifar_class_names(root / layout.folder, layout)
        except DataError as error:
            problems.append(str(error))
    return problems


def writable_problems(folder: Path) -> list[str]:
    """Whether `folder` can be created and written, without creating it."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [f"{existing}: not a folder, so {folder} cannot be created (output_dir)"]
    if not os.access(existing, os.W_OK | os.X_OK):
        verb = "written" if existing == folder else f"created (in {existing})"
        return [f"{folder}: output folder cannot be {verb}: permission denied (output_dir)"]
    return []
