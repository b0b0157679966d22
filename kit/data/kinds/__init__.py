"""The registry of dataset kinds (`DataSettings.kind`): one module per kind, registered below.

To add a kind, write a module here with a kit.data.kinds.base.DatasetKind subclass and register
an instance of it at the end of this file.
"""

from __future__ import annotations

import difflib

from kit.core.params import ParameterError
from kit.data.kinds.base import DatasetKind

_KINDS: dict[str, DatasetKind] = {}


def register(kind: DatasetKind) -> DatasetKind:
    """Make `kind` available under its name; a name registered twice is a programming error."""
    if kind.name in _KINDS:
        raise ValueError(f"dataset kind {kind.name!r} is registered twice")
    _KINDS[kind.name] = kind
    return kind


def names() -> tuple[str, ...]:
    """The registered kinds' names, sorted."""
    return tuple(sorted(_KINDS))


def expected(name: str) -> str:
    """What a kind name should be, with the closest registered name if there is one."""
    close = difflib.get_close_matches(name, names(), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"one of the registered dataset kinds: {', '.join(names())}{hint}"


def get(name: str) -> DatasetKind:
    """The kind registered as `name`; ParameterError listing the known kinds otherwise."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ParameterError(f"unknown dataset kind {name!r}: should be {expected(name)}"
                             ) from None


from kit.data.kinds import cifar, imagefolder, inat18, synthetic  # noqa: E402

register(synthetic.SyntheticKind())
register(imagefolder.ImageFolderKind())
register(cifar.Cifar10Kind())
register(cifar.Cifar100Kind())
register(inat18.INat18Kind())
