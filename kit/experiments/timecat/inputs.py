"""What notebook 03's values name on disk and in the environment, checked before compute (`kit
check`, `kit run`, the notebook's first cell): the data roots' layouts and the variants'
checkpoint files. The settings' validators check values only; the settings hand these checks
the data and files they name, so this module knows nothing of the settings' class."""

from __future__ import annotations

from dataclasses import dataclass

from kit.data.settings import DataSettings
from kit.experiments.timecat import layouts
from kit.experiments.timecat.layouts import checkpoint_file, released_identity
from kit.files.paths import resolve
from kit.params.params import ParameterError
from kit.readout.numbers import counted


@dataclass(frozen=True)
class Read:
    """One checkpoint file a variant reads, with what its entry must record of itself: the
    variant's iterations and the seeds of the file's replicate (layouts.released_identity)."""

    variant: str
    file: str
    iterations: int | None
    seeds: list[int]


def data_problems(datas: dict[str, list[DataSettings]]) -> list[str]:
    """Each data root's layout (kit.data.preflight), by the key that names it (`train`,
    `tasks`), a root named under two keys checked under the first."""
    from kit.data.preflight import preflight

    lines, seen = [], set()
    for key, sources in datas.items():
        problems = [p for data in sources for p in preflight(data) if p not in seen]
        seen |= set(problems)
        if problems:
            lines.append(f"{key}: " + "; ".join(dict.fromkeys(problems)))
    return lines


def checkpoint_problems(reads: list[Read]) -> list[str]:
    """The checkpoint files read: found, then opened, each checked to record the identity its
    entry expects (iterations, and the seed of run<i>)."""
    expected = {
        read.file: released_identity(read.iterations, read.seeds, read.file) for read in reads
    }
    files = list(expected)
    try:
        missing = [missing_line(file) for file in files if not checkpoint_file(file).is_file()]
    except ParameterError as error:  # two layouts of the release differ
        return [f"variants: {error}"]
    if missing:
        return [
            f"variants: {counted(len(missing), 'checkpoint file')} not found: " + "; ".join(missing)
        ]
    if not files:
        return []
    # opens them: torch
    from kit.train.backbones import checkpoint_problems as unusable_checkpoints

    unusable = unusable_checkpoints(
        [str(checkpoint_file(file)) for file in files],
        {str(checkpoint_file(file)): found for file, found in expected.items()},
    )
    return ["variants: " + "; ".join(unusable)] if unusable else []


def missing_line(file: str) -> str:
    """A missing checkpoint file and, for one of the authors' release, its step and run and
    every name looked for (in every layout, either suffix)."""
    found = layouts.released_key(resolve(file))
    if found is None:
        return f"{file} (or {file}.tar)" if file.endswith(".pth") else file
    root, key = found
    return f"{file}: {layouts.describe_key(key)}, tried {root}/{layouts.tried(key)}"


def checkpoint_notes(reads: list[Read]) -> list[str]:
    """What `kit check` prints of the checkpoints it will read: for each root of the authors'
    release, the layout found there, then each file read with its variant, step and run."""
    notes, roots = [], {}
    for read in reads:
        found = layouts.released_key(resolve(read.file))
        if found is not None and found[0] not in roots:
            roots[found[0]] = layouts.find_release(found[0])
            notes.append(f"checkpoints: {roots[found[0]].describe()}")
        where = "" if found is None else f" ({layouts.describe_key(found[1])})"
        notes.append(f"checkpoints: {read.variant} reads {checkpoint_file(read.file)}{where}")
    return notes
