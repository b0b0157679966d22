"""What notebook 03's values name on disk and in the environment, checked before compute (`kit
check`, `kit run`, the notebook's first cell): the data roots' layouts, the variants' checkpoint
files and the training's optional packages. The settings' validators check values only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.core.params import ParameterError
from kit.core.paths import resolve
from kit.experiments.timecat import layouts
from kit.experiments.timecat.layouts import checkpoint_file, released_identity

if TYPE_CHECKING:
    from kit.experiments.timecat.settings import TimecatSettings


def input_problems(settings: TimecatSettings) -> list[str]:
    """Every problem, one line per key: the data roots' layouts (pretraining's, then the
    tasks'), the variants' checkpoint files (found, then opened: this imports torch) and the
    training's optional packages."""
    problems = _data_problems(settings) + _checkpoint_problems(settings)
    if settings.train is not None:
        problems += [f"train.{problem}" for problem in settings.train.input_problems()]
    return problems


def _data_problems(settings: TimecatSettings) -> list[str]:
    """Each data root's layout (kit.data.preflight), a root shared by pretraining and a task
    named once, under train."""
    from kit.data.preflight import preflight

    datas = {"tasks": [settings.task_data(task)[0] for task in settings.tasks]}
    if settings.train is not None and any(v.trained or v.initialised for v in settings.variants):
        datas = {"train": [settings.train.data]} | datas
    lines, seen = [], set()
    for key, sources in datas.items():
        problems = [p for data in sources for p in preflight(data) if p not in seen]
        seen |= set(problems)
        if problems:
            lines.append(f"{key}: " + "; ".join(dict.fromkeys(problems)))
    return lines


def _checkpoint_problems(settings: TimecatSettings) -> list[str]:
    """The variants' checkpoint files this many replicates read: found, then opened, each
    checked to record the identity its entry expects (iterations, and the seed of run<i>)."""
    expected = {
        file: released_identity(variant.iterations, settings.seeds(replicate), file)
        for variant in settings.variants
        for replicate, group in enumerate((variant.checkpoints or [])[: settings.replicates])
        for file in group
    }
    files = list(expected)
    try:
        missing = [missing_line(file) for file in files if not checkpoint_file(file).is_file()]
    except ParameterError as error:  # two layouts of the release differ
        return [f"variants: {error}"]
    if missing:
        return [f"variants: {len(missing)} checkpoint file(s) not found: " + "; ".join(missing)]
    if not files:
        return []
    from kit.features import checkpoint_problems  # opens them: imports torch

    unusable = checkpoint_problems(
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


def checkpoint_notes(settings: TimecatSettings) -> list[str]:
    """What `kit check` prints of the checkpoints it will read: for each root of the authors'
    release, the layout found there, then each file read with its variant, step and run."""
    notes, roots = [], {}
    for variant in settings.variants:
        for group in (variant.checkpoints or [])[: settings.replicates]:
            for file in group:
                found = layouts.released_key(resolve(file))
                if found is not None and found[0] not in roots:
                    roots[found[0]] = layouts.find_release(found[0])
                    notes.append(f"checkpoints: {roots[found[0]].describe()}")
                where = "" if found is None else f" ({layouts.describe_key(found[1])})"
                notes.append(f"checkpoints: {variant.name} reads {checkpoint_file(file)}{where}")
    return notes
