"""Parameter YAML that cannot exhaust memory or change its meaning in silence.

PyYAML's safe loader still expands aliases (a few lines of nested `&a [*b, *b, ...]` grow to
gigabytes), resolves duplicate keys last-wins and parses a file of any size. Parameters need
none of that, so this loader refuses anchors, aliases and merge keys, duplicate keys, explicit
tags (`!!python/...`, `!!binary`, ...), lists longer than MAX_LIST_ITEMS, values nested deeper
than MAX_DEPTH (PyYAML composes a node's children recursively: a few thousand brackets exhaust
Python's stack) and texts longer than MAX_TEXT_BYTES, each with one line naming the line (the
caller adds the file). Every YAML error becomes such a line (PyYAML's own message spans several,
with the offending text drawn under it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: the largest parameter file (or `--set` value) read, in bytes: the kit's largest profile file
#: is a few kB
MAX_TEXT_BYTES = 1_000_000
#: the most items a list of parameters may hold (budgets, learning rates, tasks, variants)
MAX_LIST_ITEMS = 10_000
#: the deepest nesting of lists and mappings a parameter value may have: the profiles' deepest
#: is 7 (a variant's checkpoint groups in notebook 03's file)
MAX_DEPTH = 32
#: the tags of plain values, which a file may also write out (`!!float 1e-3`); any other tag
#: (`!!python/...`, `!!binary`, `!!set`) is refused
PLAIN_TAGS = {
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")
}


class StrictYamlError(ValueError):
    """YAML a parameter file may not hold; the message is one line (without the file)."""


class StrictLoader(yaml.SafeLoader):
    """SafeLoader without anchors, aliases, explicit tags, duplicate keys or huge lists."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1
        nests = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if nests and self.depth >= MAX_DEPTH:
            raise StrictYamlError(
                f"line {line}: lists and mappings nested more than {MAX_DEPTH} deep; "
                "parameters take at most that"
            )
        if isinstance(event, yaml.AliasEvent):
            raise StrictYamlError(
                f"line {line}: aliases (*{event.anchor}) are not allowed in "
                "parameters; write the value out"
            )
        if getattr(event, "anchor", None) is not None:
            raise StrictYamlError(
                f"line {line}: anchors (&{event.anchor}) are not allowed in "
                "parameters; write the value out"
            )
        tag = getattr(event, "tag", None)  # None unless written in the text
        if tag not in (None, "!") and tag not in PLAIN_TAGS:
            shown = tag.replace("tag:yaml.org,2002:", "!!")
            raise StrictYamlError(
                f"line {line}: tag '{shown}' is not allowed in parameters "
                "(only plain values, lists and mappings)"
            )
        self.depth += nests
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= nests

    def construct_sequence(self, node: Any, deep: bool = False) -> Any:
        if len(node.value) > MAX_LIST_ITEMS:
            raise StrictYamlError(
                f"line {node.start_mark.line + 1}: a list of "
                f"{len(node.value):,} items; parameters take at most "
                f"{MAX_LIST_ITEMS:,}"
            )
        return super().construct_sequence(node, deep)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise StrictYamlError(
                    f"line {line}: merge keys (<<) are not allowed in "
                    "parameters; write the values out"
                )
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader names it
                break
            if first is not None:
                raise StrictYamlError(
                    f"line {line}: key {key!r} is given twice (first on line {first}); keep one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep)


def loads(text: str) -> Any:
    """The value of a YAML text (StrictYamlError, one line naming the line, if refused)."""
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise StrictYamlError(
            f"{len(text.encode()):,} bytes; parameters take at most {MAX_TEXT_BYTES:,}"
        )
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = " ".join(str(error.problem or error.context or "not valid YAML").split())
        raise StrictYamlError(f"{where}not valid YAML: {problem}") from None
    except yaml.YAMLError as error:
        raise StrictYamlError("not valid YAML: " + " ".join(str(error).split())) from None
    except RecursionError:  # the composer is bounded above; a scanner's stack, in case
        raise StrictYamlError(
            f"nested too deeply to be read; parameters take at most {MAX_DEPTH} levels"
        ) from None


def load_file(path: Path) -> Any:
    """The value of a YAML file, its size checked before it is read."""
    size = path.stat().st_size
    if size > MAX_TEXT_BYTES:
        raise StrictYamlError(f"{size:,} bytes; parameter files take at most {MAX_TEXT_BYTES:,}")
    return loads(path.read_text())
