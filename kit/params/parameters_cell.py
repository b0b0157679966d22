"""The sections of a notebook's parameters cell: objects that take papermill's dotted values.

Papermill writes `-p train.lr 0.1` as the statement `train.lr = 0.1` in the cell it injects after
the notebook's parameters cell, so a section declared there as None fails before any kit code
runs. Declared as an empty `Section`, it takes the assignment;
kit.params.kernel_params.from_notebook merges the keys set over the profile's section.
"""

from __future__ import annotations

from typing import Any


class Section:
    """A section of a notebook's parameters (`train`, `probe`, ...) that its parameters cell
    leaves to the profile. Papermill writes `-p train.lr 0.1` as the statement `train.lr = 0.1`
    in its injected cell, so a section takes attribute assignment, nested ones included
    (`train.data.workers = 4`); `from_notebook` merges the keys set over the profile's section.
    Names starting with '_' are no keys (IPython probes objects for `_repr_html_` and the like)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_keys", {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._keys.setdefault(name, Section())  # `train.data` of `train.data.workers = 4`

    def __setattr__(self, name: str, value: Any) -> None:
        self._keys[name] = value

    def as_dict(self) -> dict[str, Any]:
        """The keys set, as the nested mapping a parameter file would give (empty: none)."""
        nested = {}
        for name, value in self._keys.items():
            if isinstance(value, Section):
                value = value.as_dict()
                if not value:  # only read, never set
                    continue
            nested[name] = value
        return nested

    def __repr__(self) -> str:
        return f"Section({self.as_dict()!r})"
