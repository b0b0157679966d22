"""The house rules a newcomer relies on, checked over the source and by doing each kind of
change once: the parameter engine names no notebook, and a variant's kind is read from its
registry entry, never compared with its name."""

from __future__ import annotations

import ast
from pathlib import Path

import kit
from kit.experiments.timecat.variants import VARIANT_KINDS

KIT = Path(kit.__file__).parent


def sources(package: str) -> dict[Path, str]:
    return {path: path.read_text() for path in sorted((KIT / package).rglob("*.py"))}


def test_the_bottom_layer_names_no_experiment_even_in_strings() -> None:
    """Import contracts see imports only; a dotted path in a string would hide one."""
    naming = [str(path) for path, text in sources("core").items() if "kit.experiments" in text]
    assert not naming, f"kit.core names kit.experiments: {naming}"


def literals(node: ast.AST) -> list[str]:
    """The string constants a comparison operand holds, directly or in a list, tuple or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [text for element in node.elts for text in literals(element)]
    return []


def test_no_module_but_the_registry_compares_a_variant_kind_with_its_name() -> None:
    """A kind's behaviour is its registry entry's (`VARIANT_KINDS.get(kind).per_task`), so that
    a new kind is one registration: `kind == "direct"` or `.is_in(["time-concat"])` outside
    the registry would leave the new kind out of that decision."""
    registry = KIT / "experiments" / "timecat" / "variants.py"
    names = set(VARIANT_KINDS)
    found = []
    for path, text in sources(".").items():
        if path == registry:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "is_in":
                operands = list(node.args)
            else:
                continue
            named = names.intersection(t for operand in operands for t in literals(operand))
            if named:
                found.append(f"{path.relative_to(KIT)}:{node.lineno} compares with {named}")
    assert not found, "\n".join(found)
