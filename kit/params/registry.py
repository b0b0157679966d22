"""Registries of named kinds (dataset, probe, variant): one lookup that names the known kinds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from kit.params.param_errors import did_you_mean
from kit.params.params import ParameterError

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind; adding a kind is one `register` call."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        """Add `entry` under `name`; a name registered twice is refused."""
        if name in self._entries:
            raise ValueError(f"{self.what} '{name}' is registered twice")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        """The entry named `name`; an unknown name raises ParameterError listing the known ones
        and the closest (did you mean ...?)."""
        try:
            return self._entries[name]
        except KeyError:
            raise ParameterError(self.unknown(name)) from None

    def checked(self, name: str) -> str:
        """`name` when registered; else ValueError (what a settings field's validator raises)
        with the message of `unknown`."""
        if name not in self._entries:
            raise ValueError(self.unknown(name))
        return name

    def unknown(self, name: str) -> str:
        """The message refusing an unknown name."""
        return (
            f"unknown {self.what} '{name}'{did_you_mean(name, self._entries)} "
            f"(known: {', '.join(sorted(self._entries))})"
        )

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
