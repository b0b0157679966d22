"""CIFAR-10 and CIFAR-100 as torchvision stores them (python pickles): `cifar10`, `cifar100`."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar

from kit.data.kinds.base import DataError, DatasetKind, DataSource, data_root, existing_folder

if TYPE_CHECKING:
    from kit.data.kinds.images import CifarImages


@dataclass(frozen=True)
class CifarLayout:
    """torchvision's on-disk CIFAR layout: python pickles in one folder."""

    folder: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    names_key: str
    labels_key: str

    def files(self) -> tuple[str, ...]:
        """Every file of the layout, training batches first."""
        return (*self.train, *self.test, self.meta)

    def entries(self) -> tuple[str, ...]:
        """Every file as a path under the data root (DatasetKind.layout)."""
        return tuple(f"{self.folder}/{name}" for name in self.files())


#: the globals a CIFAR pickle may name: numpy's array reconstruction (numpy 1's `numpy.core`,
#: numpy 2's `numpy._core`; `_frombuffer` is protocol 5's path), numpy scalars, and
#: `_codecs.encode`, with which Python 3 writes bytes at protocols 0-2. The format holds nothing
#: else (https://www.cs.toronto.edu/~kriz/cifar.html: dicts of a uint8 array, label lists and
#: names), and any other global could run code while the file is read
#: (https://docs.python.org/3/library/pickle.html#restricting-globals).
CIFAR_GLOBALS = frozenset(
    {
        *(
            f"numpy.{core}.multiarray.{name}"
            for core in ("core", "_core")
            for name in ("_reconstruct", "scalar")
        ),
        *(f"numpy.{core}.numeric._frombuffer" for core in ("core", "_core")),
        "numpy.ndarray",
        "numpy.dtype",
        "_codecs.encode",
    }
)


class CifarUnpickler(pickle.Unpickler):
    """Python's unpickler admitting only CIFAR_GLOBALS: a data file that names anything else is
    refused (DataError naming the file and the global) before that global is even imported."""

    def __init__(self, handle: BinaryIO, path: Path) -> None:
        super().__init__(handle, encoding="latin1")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if f"{module}.{name}" not in CIFAR_GLOBALS:
            raise DataError(
                f"{self.path}: refuses to load {module}.{name}: not CIFAR data (a "
                "CIFAR pickle holds only numpy arrays, lists and strings)"
            )
        return super().find_class(module, name)


def read_cifar_pickle(path: Path) -> dict[str, Any]:
    """One CIFAR pickle with text keys and class names, whether it is an original (Python 2)
    file or one re-saved from Python 3 with bytes keys, which torchvision's reader refuses.
    Read with CifarUnpickler, so that a crafted file runs no code."""
    try:
        with open(path, "rb") as handle:
            content = CifarUnpickler(handle, path).load()
    except DataError:
        raise
    except (
        OSError,
        EOFError,
        ValueError,
        pickle.UnpicklingError,
        AttributeError,
        ImportError,
        IndexError,
    ) as error:
        raise DataError(f"{path}: not a readable CIFAR pickle ({error!r})") from None
    if not isinstance(content, dict):
        raise DataError(f"{path}: a CIFAR pickle holds a dict, this one a {type(content).__name__}")
    text = {
        key.decode("latin1") if isinstance(key, bytes) else key: value
        for key, value in content.items()
    }
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
        raise DataError(
            f"{meta_path}: no '{layout.names_key}' (a CIFAR meta file has it; this "
            f"one has {', '.join(meta) or 'no keys'})"
        )
    return meta[layout.names_key]


def cifar(layout: CifarLayout, root: Path, split: str) -> CifarImages:
    """CIFAR-10/100 in torchvision's layout: root/cifar-10-batches-py or root/cifar-100-python."""
    import numpy as np

    from kit.data.kinds.images import CifarImages

    folder = existing_folder(root, "CIFAR") / layout.folder
    names = layout.train if split == "train" else layout.test
    missing = [name for name in (*names, layout.meta) if not (folder / name).is_file()]
    if missing:
        raise DataError(
            f"{folder}: missing {', '.join(missing)} (expected "
            f"{', '.join(layout.files())} in torchvision's format)"
        )
    classes = cifar_class_names(folder, layout)
    images, labels = [], []
    for name in names:
        batch = read_cifar_pickle(folder / name)
        if "data" not in batch or layout.labels_key not in batch:
            raise DataError(
                f"{folder / name}: expected 'data' and '{layout.labels_key}' "
                f"(has {', '.join(batch)})"
            )
        images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels += [int(label) for label in batch[layout.labels_key]]
    return CifarImages(np.concatenate(images).transpose(0, 2, 3, 1), labels, classes)


class CifarKind(DatasetKind):
    """A CIFAR dataset: its pickles' layout; evaluated on the test batches."""

    @property
    def obtain(self) -> str:  # type: ignore[override]
        return f"fetch it with: python -m kit download {self.name} --to <root>"

    probe_grid = "cifar"
    split_sizes = (50_000, 10_000)
    held_bytes_per_image = 3 * 32 * 32 + 8  # uint8 pixels and an int64 label
    cifar_layout: ClassVar[CifarLayout]

    def open_split(self, data: DataSource, split: str, num_classes: int) -> CifarImages:
        return cifar(self.cifar_layout, data_root(data), "train" if split == "train" else "test")

    def layout_problems(self, root: Path) -> list[str]:
        """Every pickle present, read by CifarUnpickler (a crafted file is refused here, before
        anything trains on it) and holding images with as many labels, and the meta file naming
        the classes."""
        problems = super().layout_problems(root)
        if problems:
            return problems
        folder = root / self.cifar_layout.folder
        for name in (*self.cifar_layout.train, *self.cifar_layout.test):
            try:
                batch = read_cifar_pickle(folder / name)
            except DataError as error:
                problems.append(str(error))
                continue
            rows = len(batch.get("data", []))
            if rows == 0 or rows != len(batch.get(self.cifar_layout.labels_key, [])):
                problems.append(
                    f"{folder / name}: holds {rows} images and "
                    f"{len(batch.get(self.cifar_layout.labels_key, []))} "
                    f"'{self.cifar_layout.labels_key}'; a CIFAR batch holds as many "
                    "of each, at least one"
                )
        try:
            cifar_class_names(folder, self.cifar_layout)
        except DataError as error:
            problems.append(str(error))
        return problems


class Cifar10Kind(CifarKind):
    """CIFAR-10: 50,000 training and 10,000 test images of 10 classes, 32 px."""

    name = "cifar10"
    num_classes = 10
    cifar_layout = CifarLayout(
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "batches.meta",
        "label_names",
        "labels",
    )
    layout = cifar_layout.entries()


class Cifar100Kind(CifarKind):
    """CIFAR-100: 50,000 training and 10,000 test images of 100 (fine) classes, 32 px."""

    name = "cifar100"
    num_classes = 100
    cifar_layout = CifarLayout(
        "cifar-100-python", ("train",), ("test",), "meta", "fine_label_names", "fine_labels"
    )
    layout = cifar_layout.entries()
