"""The house rules a newcomer relies on, checked over the source and by doing each kind of
change once: the parameter engine names no notebook."""

from __future__ import annotations

from pathlib import Path

import kit

KIT = Path(kit.__file__).parent


def sources(package: str) -> dict[Path, str]:
    return {path: path.read_text() for path in sorted((KIT / package).rglob("*.py"))}


def test_the_bottom_layer_names_no_experiment_even_in_strings() -> None:
    """Import contracts see imports only; a dotted path in a string would hide one."""
    naming = [str(path) for path, text in sources("core").items() if "kit.experiments" in text]
    assert not naming, f"kit.core names kit.experiments: {naming}"
