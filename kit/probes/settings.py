"""Settings of the linear probes, one class per probe, shared with notebook 03 (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from kit.data import kinds
from kit.params import bounds
from kit.params.params import Strict
from kit.probes.base import FeaturePasses, ImagePasses, ProbeSettings, ProbeUse
from kit.probes.selection import BOUNDED, RULES
from kit.runtime.processes import DEFAULT_GROUP_TIMEOUT_S

if TYPE_CHECKING:
    from kit.data.settings import DataSettings

#: the authors' weight-decay grids per evaluation dataset, as their released linear-probe script
#: for the paper's Section 5.1 (Table 3) sets them: ImageNet {1e-4, 5e-4}, iNat18 {1e-6, 1e-5,
#: 1e-4}, CIFAR {1e-4 ... 5e-2}
PAPER_WEIGHT_DECAYS: dict[str, tuple[float, ...]] = {
    "imagenet": (1e-4, 5e-4),
    "inat18": (1e-6, 1e-5, 1e-4),
    "cifar": (1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2),
}


@dataclass(frozen=True)
class AuthorsProbeSetup:
    """How the authors ran their linear probe on one kind of target, from their release's
    scripts (facebookresearch/richreps-timecat, `scripts/supervised_transfer/imagenet/to_*/
    linear_probing/*_sf.sh`, `run_*` for one model, `cat_*` for concatenations) and the defaults
    of the `supervised.py` they call: processes (one per GPU, srun tasks), the batch of each,
    SyncBatchNorm of the head's BN1d over all processes (`--sync_bn True`) or BN statistics per
    process, epochs, learning rate, its x0.1 milestones and the weight-decay grid."""

    processes: int
    per_process_batch: int
    sync_bn: bool
    epochs: int
    lr: float
    milestones: tuple[int, ...]
    weight_decays: tuple[float, ...]
    script: str


_TO = "scripts/supervised_transfer/imagenet/to_"
_RECIPE: dict[str, Any] = {
    "epochs": 28,
    "lr": 0.01,
    "milestones": (8, 16, 24),
}  # supervised.py's defaults

#: the authors' setup per target, by `setups` key of FaithfulProbeSettings: ImageNet-1k probes
#: of one model on 5 GPUs and of concatenations on 6, iNat18 on 8 with SyncBatchNorm, CIFAR-10
#: and CIFAR-100 on one GPU with a batch of 256
AUTHORS_PROBE_SETUPS: dict[str, AuthorsProbeSetup] = {
    "imagenet-cat1": AuthorsProbeSetup(
        5,
        32,
        False,
        **_RECIPE,
        weight_decays=(1e-4, 5e-4),
        script=f"{_TO}imagenet1k/linear_probing/run_imagenet_sf.sh",
    ),
    "imagenet-catN": AuthorsProbeSetup(
        6,
        32,
        False,
        **_RECIPE,
        weight_decays=(1e-4, 5e-4),
        script=f"{_TO}imagenet1k/linear_probing/cat_imagenet_sf.sh",
    ),
    "inat18-cat1": AuthorsProbeSetup(
        8,
        32,
        True,
        **_RECIPE,
        weight_decays=(1e-6, 1e-5, 1e-4),
        script=f"{_TO}inat18/linear_probing/run_inat_sf.sh",
    ),
    "inat18-catN": AuthorsProbeSetup(
        8,
        32,
        True,
        **_RECIPE,
        weight_decays=(1e-6, 1e-5, 1e-4),
        script=f"{_TO}inat18/linear_probing/cat_inat_sf.sh",
    ),
    "cifar-cat1": AuthorsProbeSetup(
        1,
        256,
        False,
        **_RECIPE,
        weight_decays=(1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2),
        script=f"{_TO}cifar/linear_probing/run_cifar_sf.sh",
    ),
    "cifar-catN": AuthorsProbeSetup(
        1,
        256,
        False,
        **_RECIPE,
        weight_decays=(1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2),
        script=f"{_TO}cifar/linear_probing/cat_cifar_sf.sh",
    ),
}


def setup_key(grid: str, concatenated: bool) -> str:
    """The `setups` key of a probe: its grid, and whether it probes several models."""
    return f"{grid}-{'catN' if concatenated else 'cat1'}"


class ProbeSetup(Strict):
    """One kind of target's processes, batch per process and BatchNorm handling."""

    #: processes (GPUs) of each probe of this kind
    processes: int = Field(ge=1, le=bounds.PER_NODE)
    #: images per process; the global batch is processes x batch_size
    batch_size: int = Field(ge=1, le=bounds.BATCH)
    #: BN statistics over the whole global batch (SyncBatchNorm), else over each process's
    sync_bn: bool = False


#: a cap on L-BFGS iterations, not a stopping rule (how many a fit takes: docs/probes.md)
LBFGS_MAX_ITER = 2000
#: L-BFGS stops once an iteration changes the objective or the weights by less than this
#: (torch's default; what a larger one saves and costs: docs/probes.md)
TOLERANCE_CHANGE = 1e-9


def rules_given(max_gap: float | None) -> tuple[str, ...]:
    """The rules a feature probe reports: `bounded` after the others when given `max_gap`."""
    return RULES if max_gap is None else (*RULES, BOUNDED)


class FeatureProbeSettings(ProbeSettings):
    """What every probe of cached features shares: its held-out rows, selection rules, seed,
    devices and L-BFGS tolerance."""

    heldout_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    #: a third selection rule, `bounded`: the held-out choice among heads whose top-1 on their
    #: fit rows exceeds their held-out top-1 by at most this many points (`kit.probes.selection`);
    #: None reports only `paper` and `heldout`
    max_gap: float | None = Field(default=None, gt=0.0)
    seed: int = Field(default=0, ge=0, le=bounds.SEED)
    #: with device `cuda` (no index): the GPUs the fits are spread over, each holding its own
    #: copy of the features, None for every visible one; on the CPU, more than one runs the fits
    #: in that many groups side by side
    devices: int | None = Field(default=None, ge=1, le=bounds.PER_NODE)
    #: L-BFGS's stopping tolerance on the change of objective or weights per iteration
    tolerance_change: float = Field(default=TOLERANCE_CHANGE, gt=0.0, lt=1e-3)

    def rules(self) -> tuple[str, ...]:
        return rules_given(self.max_gap)


class LbfgsProbeSettings(FeatureProbeSettings):
    """Full-batch multinomial logistic regression by float64 L-BFGS, one fit per weight decay,
    run until torch's tolerances stop it (`kit.probes.lbfgs`)."""

    kind: Literal["lbfgs"] = "lbfgs"
    weight_decays: list[bounds.Decay] = Field(
        default_factory=lambda: [1e-6, 1e-5, 1e-4, 1e-3], min_length=1, max_length=bounds.GRID
    )
    #: only a cap: a fit that reaches it is refused, its accuracy being the optimiser's
    max_iter: int = Field(default=LBFGS_MAX_ITER, ge=1, le=bounds.ITERATIONS)


class FastProbeSettings(FeatureProbeSettings):
    """Minibatch SGD (Nesterov) with cosine decay on standardised features; one head per
    (learning rate, weight decay), all trained in one pass."""

    kind: Literal["fast"] = "fast"
    lrs: list[bounds.Rate] = Field(
        default_factory=lambda: [0.03, 0.1, 0.3], min_length=1, max_length=bounds.GRID
    )
    weight_decays: list[bounds.Decay] = Field(
        default_factory=lambda: [0.0, 1.0e-4], min_length=1, max_length=bounds.GRID
    )
    epochs: int = Field(default=8, ge=1, le=bounds.EPOCHS)
    batch_size: int = Field(default=512, ge=1, le=bounds.BATCH)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    #: on CUDA, float32 products of the SGD heads on TF32 tensor cores (10-bit mantissa); the
    #: float64 L-BFGS finish is unaffected. false keeps full float32
    tf32: bool = True
    #: the heads the two rules choose from. `epochs`: every (lr, weight decay, epoch), as the
    #: authors and DINOv2 do; choosing the epoch on held-out rows is early stopping, another
    #: estimator than a converged fit. `converged`: per weight decay, the last epoch's head with
    #: the lowest training objective, finished by float64 L-BFGS to its tolerance (the rules
    #: then choose a weight decay only, as for `kit.probes.lbfgs.lbfgs_probe`), because SGD
    #: alone does not converge on ill-conditioned features (measured in docs/probes.md)
    select_from: Literal["epochs", "converged"] = "epochs"

    @model_validator(mode="after")
    def _converges(self) -> FastProbeSettings:
        if self.select_from == "converged" and min(self.weight_decays) <= 0:
            raise ValueError(
                f"weight_decays: select_from converged needs every weight decay > 0 "
                f"(an unpenalised fit of separable features has no minimum), got "
                f"{self.weight_decays}"
            )
        return self

    def feature_passes(self) -> FeaturePasses:
        """Every head sees every training row once an epoch."""
        return FeaturePasses(self.epochs, len(self.lrs) * len(self.weight_decays))

    def reference(self) -> LbfgsProbeSettings:
        """The L-BFGS probe of the same settings (`lbfgs`)."""
        return self.lbfgs()

    def lbfgs(self) -> LbfgsProbeSettings:
        """The L-BFGS probe of the same weight decays and shared settings (held-out rows, seed,
        devices, tolerance): the converged fit this probe is checked against."""
        shared = {
            name: getattr(self, name)
            for name in FeatureProbeSettings.model_fields
            if name != "kind"
        }
        return LbfgsProbeSettings(weight_decays=list(self.weight_decays), **shared)


class FaithfulProbeSettings(ProbeSettings):
    """The authors' probe (`kit.probes.faithful`): frozen backbones on augmented images every
    epoch, BN1d + Linear heads (N(0, 0.01) weights), one per weight decay of the task's grid,
    SGD with Nesterov momentum, the learning rate x0.1 after each milestone, no weight decay on
    BN, as the authors' released linear-probe script for the paper's Section 5.1 (Table 3) runs it.
    The recipe's values default to the authors'; what depends on the machine (processes,
    DataLoader workers, precision of the backbones) has no default."""

    kind: Literal["faithful"] = "faithful"
    #: grids replacing the authors' (PAPER_WEIGHT_DECAYS), by grid name (imagenet, inat18,
    #: cifar: every task of that data kind) or by task name (that task only)
    weight_decays: dict[str, bounds.Grid] = Field(default_factory=dict, max_length=bounds.ENTRIES)
    epochs: int = Field(default=28, ge=1, le=bounds.EPOCHS)
    #: epochs after which the learning rate is multiplied by 0.1
    milestones: list[int] = Field(default_factory=lambda: [8, 16, 24], max_length=bounds.GRID)
    lr: float = Field(default=0.01, gt=0.0)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    #: the global batch, split over the processes (the authors: 5 GPUs x 32 images)
    batch_size: int = Field(default=160, ge=1, le=bounds.BATCH)
    #: rows per BatchNorm statistics group, the authors' per-GPU batch (None: the global batch)
    bn_batch: int | None = Field(default=32, ge=1, le=bounds.BATCH)
    heldout_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    seed: int = Field(default=0, ge=0, le=bounds.SEED)
    #: processes (GPUs) of one probe: more than one runs it under torchrun; with `setups`, the
    #: most a probe of a target they name may take
    processes: int = Field(ge=1, le=bounds.PER_NODE)
    #: DataLoader workers decoding images, per process
    workers: int = Field(ge=0, le=bounds.PER_NODE)
    #: bf16 runs the frozen backbones under bfloat16 autocast (the heads stay float32)
    precision: Literal["fp32", "bf16"]
    #: per kind of target, by grid and representation (imagenet-cat1, imagenet-catN, inat18-cat1,
    #: inat18-catN, cifar-cat1, cifar-catN; AUTHORS_PROBE_SETUPS holds the authors'): the
    #: processes, batch per process and BatchNorm handling of its probes, replacing processes,
    #: batch_size and bn_batch, which remain for targets not named. Probes are launched in
    #: groups of the same process count; `processes` is then the most any group may take
    setups: dict[str, ProbeSetup] = Field(default_factory=dict, max_length=bounds.ENTRIES)
    #: seconds a collective call (all-reduce, barrier) of the probes' process group waits for
    #: every rank before failing (as the trainer's train.group_timeout_s; a rank opening
    #: ImageNet's 1.28M files or iNat18's JSON can take minutes)
    group_timeout_s: int = Field(default=DEFAULT_GROUP_TIMEOUT_S, ge=60, le=bounds.SECONDS)
    #: seconds one of the probe's loaders may take for one batch (its first includes starting
    #: the workers) before the probe fails naming its folder: a stuck or dead loader worker (as
    #: the trainer's train.loader_timeout_s); the probe resumes from its last finished epoch
    loader_timeout_s: int = Field(default=300, ge=1, le=bounds.SECONDS)

    @model_validator(mode="after")
    def _consistent(self) -> FaithfulProbeSettings:
        for name, grid in self.weight_decays.items():
            if not grid or any(decay < 0 for decay in grid):
                raise ValueError(
                    f"weight_decays: {name} needs one or more weight decays >= 0, got {grid}"
                )
        if list(self.milestones) != sorted(set(self.milestones)) or any(
            m < 1 for m in self.milestones
        ):
            raise ValueError(f"milestones: expected increasing epochs >= 1, got {self.milestones}")
        known = {setup_key(grid, many) for grid in PAPER_WEIGHT_DECAYS for many in (False, True)}
        for name, setup in self.setups.items():
            if name not in known:
                raise ValueError(f"setups: {name} is none of {', '.join(sorted(known))}")
            if setup.processes > self.processes:
                raise ValueError(
                    f"setups: {name} asks for {setup.processes} processes, more "
                    f"than processes {self.processes}"
                )
        local, left = divmod(self.batch_size, self.processes)
        if left or (self.bn_batch is not None and local % self.bn_batch):
            raise ValueError(
                f"batch_size: the global batch {self.batch_size} over "
                f"{self.processes} process(es) must give each a multiple of bn_batch "
                f"{self.bn_batch}"
            )
        return self

    def problems(self, use: ProbeUse) -> list[str]:
        """Rows it cannot subsample, extra evaluation sets it cannot score, grids naming no task,
        several processes sharing one device."""
        found = []
        if use.extra_evals:
            found.append(
                f"tasks: {', '.join(use.extra_evals)}: extra_evals are scored by the probes of "
                "cached features (fast, lbfgs), whose heads score any features; the faithful "
                "probe trains on images and scores its own evaluation split only: set "
                "probe_kind to fast or lbfgs, or drop them"
            )
        if use.train_rows is not None:
            found.append(
                "probe_train_rows: the faithful probe trains on every training image; unset it, "
                "or use a probe of cached features"
            )
        unknown = sorted(set(self.weight_decays) - set(PAPER_WEIGHT_DECAYS) - set(use.tasks))
        if unknown:
            found.append(
                f"probes.{self.kind}.weight_decays: names {', '.join(unknown)}, neither a grid "
                f"({', '.join(PAPER_WEIGHT_DECAYS)}) nor a task ({', '.join(use.tasks)})"
            )
        if self.processes > 1 and use.device not in ("cpu", "cuda"):
            found.append(
                f"device: several processes of the faithful probe each take their own device; "
                f"give cuda or cpu, not {use.device}"
            )
        return found

    def for_probe(self, grid: str, concatenated: bool) -> FaithfulProbeSettings:
        """The settings one probe runs with: its target's setup where `setups` names it (its
        processes, global batch and BN groups), else these."""
        setup = self.setups.get(setup_key(grid, concatenated))
        if setup is None:
            return self
        return self.model_copy(
            update={
                "processes": setup.processes,
                "batch_size": setup.processes * setup.batch_size,
                "bn_batch": None if setup.sync_bn else setup.batch_size,
            }
        )

    def image_passes(self, data: DataSettings, models: int) -> ImagePasses:
        """Every epoch over the training images, on the processes of the target's setup."""
        own = self.for_probe(kinds.get(data.kind).probe_grid, models > 1)
        return ImagePasses(self.epochs, own.processes, self.workers)

    def grid(self, task: str, kind: str) -> list[float]:
        """The weight decays a task is probed with: its own grid, else its data kind's (the
        authors' unless replaced)."""
        if task in self.weight_decays:
            return list(self.weight_decays[task])
        name = kinds.get(kind).probe_grid
        return list(self.weight_decays.get(name, PAPER_WEIGHT_DECAYS[name]))
