"""The kinds of variant notebook 03 compares (paper Section 5.1, Table 3, and its controls): one
registry, so that a new kind is one `VARIANT_KINDS.register` call. A kind's entry carries its
behaviour (how its models are made, whether it is what the paper tests or a control, how the
sweep runs it); no other module compares a kind with its name (tests/test_architecture.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kit.params.registry import Registry


@dataclass(frozen=True)
class VariantKind:
    """How a variant's models are made and how it enters the comparisons."""

    name: str
    #: what the kind is, in one sentence (shown in the docs)
    description: str
    #: its models are trained by the notebook (else: untrained networks, written once)
    trained: bool
    #: always one model (n: 1)
    one_model: bool = False
    #: one model per task named in `tasks`, trained on that task alone and probed on it only
    per_task: bool = False
    #: n models trained for a share of the budget each and concatenated: what the paper tests;
    #: with `catn_models: snapshots` its models are snapshots of the replicate's seeded runs
    concatenated: bool = False
    #: as a control, compared with every concatenated variant of n > 1 (`all`) or with those of
    #: the same n (`same_n`); None: not a control
    controls: Literal["all", "same_n"] | None = None
    #: its model is `width` times wider than cat1's, so an iteration costs width^2 of cat1's:
    #: notebook 04 also runs it at cat1's compute (budget / width^2 iterations)
    widened: bool = False


VARIANT_KINDS: Registry[VariantKind] = Registry("variant kind")

for kind in (
    VariantKind(
        "time-concat",
        "n models of budget/n iterations each, concatenated (cat1 is "
        "n=1, one model trained for the whole budget)",
        trained=True,
        concatenated=True,
    ),
    VariantKind(
        "wide",
        "one model `width` times wider trained for the whole budget: Table 2's "
        "resnet50w2, a single model with as many features",
        trained=True,
        one_model=True,
        controls="all",
        widened=True,
    ),
    VariantKind(
        "random-init",
        "n untrained networks: what the architecture gives without learning",
        trained=False,
        controls="same_n",
    ),
    VariantKind(
        "direct",
        "one model per task in `tasks`, trained on that task alone with the "
        "budget: the ceiling transfer is compared with",
        trained=True,
        one_model=True,
        per_task=True,
    ),
):
    VARIANT_KINDS.register(kind.name, kind)


def kinds_where(has: Callable[[VariantKind], object]) -> list[str]:
    """The registered kinds whose entry `has` it (`kinds_where(lambda kind: kind.concatenated)`:
    the kinds the paper's claim is about)."""
    return [name for name in VARIANT_KINDS if has(VARIANT_KINDS.get(name))]
