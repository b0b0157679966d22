"""The probes by name: `get(name)` imports the one asked for, `check(name)` imports nothing."""

from __future__ import annotations

import importlib

from kit.core.registry import Registry
from kit.probes.base import Probe

#: every probe, as "module:class" of a class implementing `kit.probes.base.Probe`, imported on
#: first use: naming and checking a probe (as parameter validation does) never imports torch.
#: Adding a probe is one module and one line here.
PROBES: Registry[str] = Registry("probe")
PROBES.register("fast", "kit.probes.fast:FastProbe")
PROBES.register("lbfgs", "kit.probes.lbfgs:LbfgsProbe")
PROBES.register("faithful", "kit.probes.faithful:FaithfulProbe")


def get(name: str) -> Probe:
    """The probe called `name` (a ParameterError names the known ones)."""
    module, attribute = PROBES.get(name).split(":")
    return getattr(importlib.import_module(module), attribute)()
