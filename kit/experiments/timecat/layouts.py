"""Where the authors' released checkpoints lie under a folder, found by looking at it.

The authors' repository (facebookresearch/richreps-timecat) describes its archive three ways:
`tools/download.sh` unpacks `ckpt_resnet50_sfadamw_imagenet1k_supervised.tar.gz` and renames the
folder `ckpt_resnet50_sfadamw_imagenet1k_supervised` to `resnet50_sfadamw_imagenet1k_supervised`;
`configs/pretrained_checkpoints.yaml`, which their probes load, names
`checkpoints_{full,200k,100k,80k}/checkpoint_run<i>.pth` inside it; their README draws
`resnet50_sfadamw/checkpoints_step{full,200,100,80}/checkpoint_run<i>.pth.tar`. Every release
folder (renamed, as unpacked, as drawn) with either kind of step folder (the config's, the
README's) is a layout, and a file is found under either suffix. A profile names a released file
by any of these paths: what it means is the step and the run (`released_key`), and
`find_release` looks for them in every layout. Two layouts holding different bytes for one file
are an error naming both: which one the authors meant cannot be told.

Free of torch: `kit check` looks before it opens anything.
"""

from __future__ import annotations

import filecmp
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.files.files import change_stamp
from kit.files.paths import resolve
from kit.params.params import ParameterError

#: the folders the release may sit in: download.sh's rename, the archive's own name, the README's
RELEASE_FOLDERS = (
    "resnet50_sfadamw_imagenet1k_supervised",
    "ckpt_resnet50_sfadamw_imagenet1k_supervised",
    "resnet50_sfadamw",
)
#: the released steps (the config's folder suffix) with their iterations and number of runs
STEPS = {"full": (450_000, 5), "200k": (200_000, 2), "100k": (100_000, 4), "80k": (80_000, 5)}
#: step folders and the suffix each source gives: the config's `.pth`, the README's `.pth.tar`
STYLES = {
    "config": ({s: f"checkpoints_{s}" for s in STEPS}, ".pth"),
    "readme": ({s: f"checkpoints_step{s.removesuffix('k')}" for s in STEPS}, ".pth.tar"),
}
SUFFIXES = (".pth", ".pth.tar")
_SOURCES = {
    "config": "configs/pretrained_checkpoints.yaml",
    "readme": "the README",
}
_STEP_OF_FOLDER = {
    folder: step for folders, _ in STYLES.values() for step, folder in folders.items()
}
RELEASED_PATH = re.compile(
    rf"(?:^|/)(?P<release>{'|'.join(map(re.escape, RELEASE_FOLDERS))})/"
    rf"(?P<step>{'|'.join(map(re.escape, _STEP_OF_FOLDER))})/"
    r"checkpoint_run(?P<run>\d+)\.pth(?:\.tar)?$"
)

Key = tuple[str, int]  # (step, run)


@dataclass(frozen=True)
class Layout:
    """One way the release is laid out: a release folder and a source's step folders."""

    folder: str
    style: str

    def names(self, step: str, run: int) -> list[str]:
        """The file's paths relative to the root, the style's own suffix first."""
        folders, own = STYLES[self.style]
        suffixes = [own, *(s for s in SUFFIXES if s != own)]
        return [f"{self.folder}/{folders[step]}/checkpoint_run{run}{s}" for s in suffixes]

    def describe(self) -> str:
        folders, own = STYLES[self.style]
        steps = ",".join(folders[s].removeprefix("checkpoints_") for s in STEPS)
        return (
            f"{self.folder}/checkpoints_{{{steps}}}/checkpoint_run<i>{own} "
            f"({_SOURCES[self.style]} of facebookresearch/richreps-timecat)"
        )


LAYOUTS = tuple(Layout(folder, style) for folder in RELEASE_FOLDERS for style in STYLES)


def every_key() -> list[Key]:
    """Every file of the release: the steps' runs (full: 0-4, 200k: 0-1, 100k: 0-3, 80k: 0-4)."""
    return [(step, run) for step, (_, runs) in STEPS.items() for run in range(runs)]


def released_key(path: Path) -> tuple[Path, Key] | None:
    """The root under which `path` names a released file, and its step and run; None when the
    path is laid out as no layout here."""
    found = RELEASED_PATH.search(Path(path).as_posix())
    if found is None or len(Path(path).parts) < 4:
        return None
    return Path(path).parents[2], (_STEP_OF_FOLDER[found["step"]], int(found["run"]))


def tried(key: Key) -> str:
    """Every name looked for a file, in brace notation relative to the root."""
    step, run = key
    steps = sorted({STYLES[style][0][step] for style in STYLES})
    return f"{{{','.join(RELEASE_FOLDERS)}}}/{{{','.join(steps)}}}/checkpoint_run{run}.pth{{,.tar}}"


def describe_key(key: Key) -> str:
    step, run = key
    return f"run {run} at {step} ({STEPS[step][0]:,} iterations)"


@dataclass
class Release:
    """What `find_release` found under a root: the layouts holding files (in LAYOUTS' order)
    and each file by step and run."""

    root: Path
    layouts: list[Layout] = field(default_factory=list)
    files: dict[Key, Path] = field(default_factory=dict)

    def describe(self) -> str:
        if not self.layouts:
            return f"{self.root}: no layout of the authors' release found"
        found = " and, the same files, ".join(layout.describe() for layout in self.layouts)
        return f"{self.root}: the authors' release, laid out as {found}"


def find_release(root: Path) -> Release:
    """Every released file under `root`, in whichever layouts hold them; ParameterError naming
    both files when two layouts (or both suffixes) hold different bytes for one of them."""
    present = [
        (layout, key, root / name)
        for layout in LAYOUTS
        for key in every_key()
        for name in layout.names(*key)
        if (root / name).is_file()
    ]
    stamps = tuple((str(path), change_stamp(path)) for _, _, path in present)
    return _found(root, stamps, tuple((layout, key) for layout, key, _ in present))


@functools.lru_cache(maxsize=8)
def _found(
    root: Path,
    stamps: tuple[tuple[str, tuple[int, ...]], ...],
    keys: tuple[tuple[Layout, Key], ...],
) -> Release:
    """find_release's comparison, once per root while no file in it changes."""
    release = Release(root)
    for (layout, key), (name, _) in zip(keys, stamps, strict=True):
        path = Path(name)
        first = release.files.setdefault(key, path)
        if first != path and not _same_bytes(first, path):
            raise ParameterError(
                f"{root}: two copies of the authors' release differ ({describe_key(key)}): "
                f"{first} and {path} hold different bytes, so which one to read cannot be "
                "told; move one of the two layouts out of this folder"
            )
        if layout not in release.layouts:
            release.layouts.append(layout)
    return release


def _same_bytes(one: Path, other: Path) -> bool:
    if one.stat().st_size != other.stat().st_size:
        return False
    return one.samefile(other) or filecmp.cmp(one, other, shallow=False)


def located(path: Path) -> Path | None:
    """The file a profile's released path stands for, in whichever layout holds it; None when
    no layout holds it or the path names no released file (ParameterError when ambiguous)."""
    found = released_key(path)
    if found is None:
        return None
    root, key = found
    return find_release(root).files.get(key)


#: the suffix the authors' README gives their released checkpoints (their config names `.pth`)
RELEASED_SUFFIX = ".tar"


def checkpoint_file(path: str) -> Path:
    """A variant's checkpoint file: a path laid out as the authors' release names a step and a
    run, found in whichever layout holds them under its root (kit.experiments.timecat.layouts);
    any other path is the file given, or that name with `.tar` appended when only it exists.
    A file found nowhere is the path given (`kit check` reports it)."""
    given = resolve(path)
    found = located(given)
    if found is not None:
        return found
    twin = given.with_name(given.name + RELEASED_SUFFIX)
    return twin if not given.is_file() and twin.is_file() else given


#: how the authors name their released runs' files: run<i> is the replicate's i-th seed
RELEASED_RUN = re.compile(r"checkpoint_run(\d+)")


def released_identity(iterations: int | None, seeds: list[int], path: str) -> dict[str, Any]:
    """What a variant's listed checkpoint file must record of itself, as the profile lists it:
    the variant's `iterations`, and the seed of its run when it is named as the authors name theirs
    (checkpoint_run<i>: the replicate's i-th seed, as their configs/pretrained_checkpoints.yaml
    maps them). A file holding no record of its own (the authors' AlgoPerf format) is known by
    its path alone."""
    expected: dict[str, Any] = {}
    if iterations is not None:
        expected["iterations"] = iterations
    found = RELEASED_RUN.search(Path(path).name)
    if found is not None and int(found.group(1)) < len(seeds):
        expected["seed"] = seeds[int(found.group(1))]
    return expected
