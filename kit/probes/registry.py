"""The probes by name: each one's settings class (torch-free, what parameter validation reads)
and its `kit.probes.base.Probe` class, imported on first use so that naming and checking a
probe never imports torch.

Adding a probe is one module (its `Probe` subclass, and its settings class, which must import no
torch: in `kit.probes.settings` or a module of its own) and one `register_probe` call, as timm's
`@register_model` adds a model: nothing else in the kit names a probe.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from kit.params.registry import Registry
from kit.params.sections import ByKind, by_kind
from kit.probes.base import FeatureProbe, Probe, ProbeSettings
from kit.probes.settings import FaithfulProbeSettings, FastProbeSettings, LbfgsProbeSettings


@dataclass(frozen=True)
class ProbeEntry:
    """A registered probe: its settings class and its `Probe` class as "module:Class"."""

    settings: type[ProbeSettings]
    probe: str


#: every probe by the name its settings' `kind` gives
PROBES: Registry[ProbeEntry] = Registry("probe")


def register_probe(settings: type[ProbeSettings], probe: str) -> str:
    """Register the probe whose settings class is `settings` and whose `Probe` class is
    `probe` ("module:Class"), under the kind `settings` fixes; returns that name."""
    kind = settings.model_fields["kind"].default
    if not isinstance(kind, str):
        raise TypeError(f"{settings.__name__}: kind needs a default naming the probe")
    PROBES.register(kind, ProbeEntry(settings, probe))
    return kind


def get(name: str) -> Probe:
    """The probe called `name` (a ParameterError names the known ones)."""
    module, attribute = PROBES.get(name).probe.split(":")
    return getattr(importlib.import_module(module), attribute)()


def reference_probe(settings: ProbeSettings) -> FeatureProbe:
    """The probe that `settings`, a probe's converged reference (`ProbeSettings.reference`), are
    the settings of: a probe of cached features, as it is fitted on the same features."""
    probe = get(settings.kind)
    if not isinstance(probe, FeatureProbe):
        raise TypeError(f"the reference probe {settings.kind} does not fit cached features")
    return probe


def settings_class(name: str) -> type[ProbeSettings]:
    """The settings class of the probe called `name`; ValueError naming the known probes (what a
    settings validator raises)."""
    return PROBES.get(PROBES.checked(name)).settings


def default_settings(name: str) -> ProbeSettings:
    """The settings of the probe called `name` at their defaults (each settings class fixes its
    `kind`); a ValidationError names the keys that have none."""
    return settings_class(name).model_validate({})


def settings_classes() -> dict[str, type[ProbeSettings]]:
    """Every probe's settings class, by name."""
    return {name: PROBES.get(name).settings for name in PROBES}


#: the type of a field holding the settings of any registered probe, validated as the settings
#: class its `kind` names
AnyProbeSettings = by_kind(ProbeSettings, ByKind("probe", settings_classes))

register_probe(FastProbeSettings, "kit.probes.fast:FastProbe")
register_probe(LbfgsProbeSettings, "kit.probes.lbfgs:LbfgsProbe")
register_probe(FaithfulProbeSettings, "kit.probes.faithful_launch:FaithfulProbe")
