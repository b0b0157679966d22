"""What `python -m kit download` knows of each release it fetches: where it is served, its
archive's name, size and MD5 where they are published, the folder it goes to, and what the
archive may hold (its files, their number and sizes: kit.files.archive_members). The command
itself is kit.cli.download."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from kit.experiments.timecat import layouts
from kit.files import archive_members, download_record

#: members an archive may hold beyond the release's files and folders (kit.files.archive_members)
MEMBERS_MARGIN = 64
#: the authors' archive, as their tools/download.sh fetches it (facebookresearch/richreps-timecat)
CHECKPOINTS_URL = (
    "https://dl.fbaipublicfiles.com/richreps-timecat/"
    "ckpt_resnet50_sfadamw_imagenet1k_supervised.tar.gz"
)


def _cifar_members(name: str) -> Callable[[], dict[str, str]]:
    """The MD5 of every file of a CIFAR folder, as torchvision records them."""

    def members() -> dict[str, str]:
        from torchvision import datasets

        dataset = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
        meta = [dataset.meta["filename"], dataset.meta["md5"]]
        return {
            f"{dataset.base_folder}/{file}": md5
            for file, md5 in [*dataset.train_list, *dataset.test_list, meta]
        }

    return members


@dataclass(frozen=True)
class Source:
    """What `kit download NAME` fetches: the URL (overridden by `--url`, then by the
    environment variable `variable`), the archive's name, the size and MD5 recorded of it (None
    where nobody publishes one), the folder it goes to without `--to` ($`root`/`subfolder`), and
    for a dataset its kind and the MD5 of each file it unpacks."""

    url: str
    variable: str
    archive: str
    size: int | None
    md5: str | None
    root: str
    subfolder: str = ""
    kind: str | None = None
    members: Callable[[], dict[str, str]] | None = None
    #: the most bytes one file and all files of the release unpack to: the known sizes with a
    #: margin (kit.files.archive_members)
    most_file_bytes: int = 0
    most_bytes: int = 0
    #: the release in words, for a refusal ("CIFAR-10 (about 186 MB)")
    known: str = ""

    def release(self) -> archive_members.Release:
        """What the archive is known to hold: a dataset's files (`members`), or the released
        checkpoints in every layout the kit reads (kit.experiments.timecat.layouts); as many
        members as it holds with their folders, with a margin of MEMBERS_MARGIN."""
        if self.members is not None:
            files = one = frozenset(self.members())
        else:
            keys = layouts.every_key()
            files = frozenset(
                name for layout in layouts.LAYOUTS for key in keys for name in layout.names(*key)
            )
            one = frozenset(layouts.LAYOUTS[0].names(*key)[0] for key in keys)  # as unpacked
        folders = {str(up) for name in one for up in PurePosixPath(name).parents} - {"."}
        return archive_members.Release(
            files,
            len(one) + len(folders) + MEMBERS_MARGIN,
            self.most_file_bytes,
            self.most_bytes,
            self.known,
            functools.partial(download_record.kept_for_the_kit, archive=self.archive),
            "the archive, its record, a partial download, the unpacking folder, the lock",
        )


SOURCES = {
    "checkpoints": Source(
        CHECKPOINTS_URL,
        "TIMECAT_CHECKPOINTS_URL",
        "ckpt_resnet50_sfadamw_imagenet1k_supervised.tar.gz",
        None,
        None,
        "TIMECAT_CHECKPOINTS",
        # a full-width ResNet-50 in float32 is 102 MB (docs/try-the-paper-profiles.md): 16 files,
        # each allowed 2.5 times that
        most_file_bytes=256_000_000,
        most_bytes=16 * 256_000_000,
        known="the authors' release (16 checkpoints of about 100 MB)",
    ),
    # torchvision/datasets/cifar.py: CIFAR10.url, .filename, .tgz_md5 (sizes: the served files')
    "cifar10": Source(
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "TIMECAT_CIFAR10_URL",
        "cifar-10-python.tar.gz",
        170_498_071,
        "c58f30108f718f92721af3b95e74349a",
        "TIMECAT_DATA",
        "cifar10",
        "cifar10",
        _cifar_members("cifar10"),
        # six batches of 10,000 images of 3,072 bytes (31.0 MB each), 10% over
        most_file_bytes=34_200_000,
        most_bytes=205_000_000,
        known="CIFAR-10 (about 186 MB)",
    ),
    "cifar100": Source(
        "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "TIMECAT_CIFAR100_URL",
        "cifar-100-python.tar.gz",
        169_001_437,
        "eb9058c3a382ffc7106e4002c42a8d85",
        "TIMECAT_DATA",
        "cifar100",
        "cifar100",
        _cifar_members("cifar100"),
        # a training file of 50,000 images of 3,072 bytes (155.2 MB) and a test file of 10,000
        # (31.0 MB), 10% over
        most_file_bytes=171_000_000,
        most_bytes=205_000_000,
        known="CIFAR-100 (about 186 MB)",
    ),
}
