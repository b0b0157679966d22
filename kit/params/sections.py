"""Settings sections of several kinds, told apart by a `kind` key (a probe's settings, say):
each validated, explained and documented as its kind's own class. No torch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, SerializeAsAny, ValidatorFunctionWrapHandler, WrapValidator


@dataclass(frozen=True)
class ByKind:
    """A section holding the settings of one of several kinds, told apart by its `kind` key:
    validated, explained and documented as the class `classes()` gives for that kind (a callable,
    so that a registry may grow after the schema is built). Use it through `by_kind`."""

    what: str
    classes: Callable[[], Mapping[str, type[BaseModel]]]

    def validate(self, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, Mapping):
            return handler(data)
        known, kind = self.classes(), data.get("kind")
        if not isinstance(kind, str) or kind not in known:
            raise ValueError(f"unknown {self.what} {kind!r} (known: {', '.join(sorted(known))})")
        return known[kind].model_validate(data)


def by_kind(base: type[BaseModel], marker: ByKind) -> Any:
    """The type of a field holding settings of any kind `marker` knows (subclasses of `base`):
    each validated as its kind's class, and written out whole."""
    return Annotated[base, SerializeAsAny(), WrapValidator(marker.validate), marker]
