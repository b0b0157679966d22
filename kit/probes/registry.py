"""The probes by name: `get(name)` imports the one asked for, `check(name)` imports nothing."""

from __future__ import annotations

import difflib
import importlib

from kit.core.params import ParameterError
from kit.probes.base import Probe

#: every probe, as "module:class" of a class implementing `kit.probes.base.Probe`, imported on
#: first use: naming and checking a probe (as parameter validation does) never imports torch.
#: Adding a probe is one module and one line here.
PROBES: dict[str, str] = {
    "fast": "kit.probes.fast:FastProbe",
    "lbfgs": "kit.probes.lbfgs:LbfgsProbe",
    "faithful": "kit.probes.faithful:FaithfulProbe",
}


def check(name: str) -> str:
    """`name` when a probe has it, else a ParameterError listing the known ones."""
    if name in PROBES:
        return name
    close = difflib.get_close_matches(name, PROBES, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise ParameterError(f"unknown probe '{name}'{hint} (known: {', '.join(PROBES)})")


def get(name: str) -> Probe:
    """The probe called `name` (a ParameterError names the known ones)."""
    module, attribute = PROBES[check(name)].split(":")
    return getattr(importlib.import_module(module), attribute)()
