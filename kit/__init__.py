"""timecat-kit: the logic behind the notebooks, in layers (kit.cli on top; at the bottom, rooms
by job: kit.params, kit.runtime, kit.numerics, kit.readout, kit.files); `.importlinter` lists
them and the test suite checks that every import points down.

Importing the kit puts the environment of its reproducible CPU numerics in place before
anything loads torch, so every process the kit starts inherits it (kit.numerics.numerics; the
switch `TIMECAT_CPU_NUMERICS=fast` turns it off)."""

from kit.numerics import numerics as _numerics

_numerics.prepare_environment()
