"""The bottom layer's rooms as docs/architecture.md lists them, from the code: the rooms and their
order from `.importlinter` (the bottom layer's layers contract), each room's purpose from the
first line of its package's docstring, its modules from its folder. `python -m kit figures`
(kit.cli.figures) writes the list into the page as the block `bottom-rooms`, `--check` fails
when it differs, and tests/test_architecture.py checks that the rooms are every package the
kit-wide contract puts at the bottom."""

from __future__ import annotations

import configparser
import importlib
import pkgutil
import re

from kit.files.paths import REPO_ROOT

CONTRACTS = REPO_ROOT / ".importlinter"
#: the contracts naming the floors and, inside the bottom floor, its rooms
KIT_WIDE, BOTTOM = "importlinter:contract:layers", "importlinter:contract:bottom"


def layers(contract: str) -> list[list[str]]:
    """A layers contract's layers, top first, each the modules of one line (`a | b`, `a : b`)."""
    parser = configparser.ConfigParser()
    parser.read(CONTRACTS)
    lines = parser[contract]["layers"].split("\n")
    return [re.split(r"\s*[|:]\s*", line.strip()) for line in lines if line.strip()]


def rooms() -> list[list[str]]:
    """The bottom layer's rooms, by layer, top first: `[["kit.params", "kit.runtime"], ...]`."""
    return layers(BOTTOM)


def purpose(room: str) -> str:
    """A room's job in one line: the first line of its package's docstring."""
    doc = importlib.import_module(room).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else "(no docstring)"


def modules(room: str) -> list[str]:
    """The modules and subpackages a room holds, by name."""
    package = importlib.import_module(room)
    return sorted(found.name for found in pkgutil.iter_modules(package.__path__))


def bottom_rooms() -> str:
    """The block: a table of the rooms, top first, with their job, their modules and the rooms
    each may import (those on the contract's lower lines)."""
    by_layer = rooms()
    lines = [
        "| room | its job | its modules | may import |",
        "|---|---|---|---|",
    ]
    for depth, layer in enumerate(by_layer):
        below = [room for lower in by_layer[depth + 1 :] for room in lower]
        for room in layer:
            lines.append(
                f"| `{room}` | {purpose(room)} | "
                + ", ".join(f"`{name}`" for name in modules(room))
                + f" | {', '.join(f'`{r}`' for r in below) or 'nothing of the kit'} |"
            )
    return "\n".join(lines) + "\n"
