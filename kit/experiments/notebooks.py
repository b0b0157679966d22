"""The notebooks, each by the module of its experiment that registers its parameter schema.

The parameter engine (kit.params.params) names no notebook: the module that defines a notebook's
schema registers it (`params.register_schema("03_time_concat", TimecatSettings)`), and importing
this module imports each of them. `kit run`, `kit check`, the parameter reference and each
notebook's first cell import it before asking the engine about a notebook by name; a new
notebook's experiment is one more import here.
"""

from __future__ import annotations

from kit.experiments import evidence, toy_settings
from kit.experiments.timecat import settings, sweep_settings

#: the modules registering the notebooks' schemas, in the notebooks' order
EXPERIMENTS = (toy_settings, evidence, settings, sweep_settings)
