"""Settings of the linear probes, one class per probe, shared with notebook 03 (no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kit.core.params import Strict
from kit.core.processes import DEFAULT_GROUP_TIMEOUT_S
from kit.data import kinds

#: the authors' weight-decay grids per evaluation dataset, as their released linear-probe script
#: for the paper's Section 5 (Table 3) sets them: ImageNet {1e-4, 5e-4}, iNat18 {1e-6, 1e-5,
#: 1e-4}, CIFAR {1e-4 ... 5e-2}
PAPER_WEIGHT_DECAYS: dict[str, tuple[float, ...]] = {
    "imagenet": (1e-4, 5e-4),
    "inat18": (1e-6, 1e-5, 1e-4),
    "cifar": (1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2),
}

#: a cap on L-BFGS iterations, not a stopping rule: every fit of the cpu profile's features
#: stopped by tolerance within 500
LBFGS_MAX_ITER = 2000
#: L-BFGS stops once an iteration changes the objective or the weights by less than this
#: (torch's default). On the cpu profile's features, 1e-7 takes about a third fewer iterations
#: and moves no head's top-1 by more than 0.2 point (benchmarks/probe_tolerance.py)
TOLERANCE_CHANGE = 1e-9


class LbfgsProbeSettings(Strict):
    """Full-batch multinomial logistic regression by float64 L-BFGS, one fit per weight decay,
    run until torch's tolerances stop it (`kit.probes.lbfgs`)."""

    weight_decays: list[float] = Field(default_factory=lambda: [1e-6, 1e-5, 1e-4, 1e-3],
                                       min_length=1)
    heldout_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    #: only a cap: a fit that reaches it is refused, its accuracy being the optimiser's
    max_iter: int = Field(default=LBFGS_MAX_ITER, ge=1)
    #: the stopping tolerance on the change of objective or weights per iteration
    #: (TOLERANCE_CHANGE's note says what a larger one costs)
    tolerance_change: float = Field(default=TOLERANCE_CHANGE, gt=0.0, lt=1e-3)
    #: a third selection rule, `bounded`: the held-out choice among heads whose top-1 on their
    #: fit rows exceeds their held-out top-1 by at most this many points (`kit.probes.selection`);
    #: None reports only `paper` and `heldout`
    max_gap: float | None = Field(default=None, gt=0.0)
    seed: int = Field(default=0, ge=0)
    device: str = Field(default="cpu", min_length=1)
    #: with device `cuda` (no index): the GPUs the weight decays' fits are spread over, None for
    #: every visible one; on the CPU, more than one runs that many fits side by side
    devices: int | None = Field(default=None, ge=1)


class FastProbeSettings(Strict):
    """Minibatch SGD (Nesterov) with cosine decay on standardised features; one head per
    (learning rate, weight decay), all trained in one pass."""

    lrs: list[float] = Field(default_factory=lambda: [0.03, 0.1, 0.3], min_length=1)
    weight_decays: list[float] = Field(default_factory=lambda: [0.0, 1.0e-4], min_length=1)
    epochs: int = Field(default=8, ge=1)
    batch_size: int = Field(default=512, ge=1)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    heldout_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    #: a third selection rule, `bounded`: the held-out choice among heads whose top-1 on their
    #: fit rows exceeds their held-out top-1 by at most this many points (`kit.probes.selection`);
    #: None reports only `paper` and `heldout`
    max_gap: float | None = Field(default=None, gt=0.0)
    seed: int = Field(default=0, ge=0)
    device: str = Field(default="cpu", min_length=1)
    #: with device `cuda` (no index): the GPUs the heads (and the L-BFGS finishing fits) are
    #: spread over, None for every visible one; each GPU holds its own copy of the features when
    #: it fits. On the CPU, more than one splits the heads into that many groups (no faster; the
    #: tests check that splitting changes no result)
    devices: int | None = Field(default=None, ge=1)
    #: on CUDA, float32 products of the SGD heads on TF32 tensor cores (10-bit mantissa, several
    #: times faster than true float32 on A100/H100); the float64 L-BFGS finish is unaffected.
    #: false keeps full float32
    tf32: bool = True
    #: the heads the two rules choose from. `epochs`: every (lr, weight decay, epoch), as the
    #: authors and DINOv2 do; choosing the epoch on held-out rows is early stopping, another
    #: estimator than a converged fit. `converged`: per weight decay, the last epoch's head with
    #: the lowest training objective, finished by float64 L-BFGS to its tolerance (the rules
    #: then choose a weight decay only, as for `kit.probes.lbfgs.lbfgs_probe`). SGD alone did
    #: not get there: 400 epochs still left 3e-3 of objective and up to 0.78 point of top-1 on
    #: the cpu profile's features; finishing 10 epochs' heads gave L-BFGS's fits within 0.2 point
    #: (benchmarks/probe_agreement.py), the SGD start saving 11-26% of L-BFGS's iterations
    select_from: Literal["epochs", "converged"] = "epochs"
    #: L-BFGS's stopping tolerance on the change of objective or weights per iteration, for the
    #: converged finish and for the L-BFGS probe of the same settings (`lbfgs`)
    tolerance_change: float = Field(default=TOLERANCE_CHANGE, gt=0.0, lt=1e-3)

    @model_validator(mode="after")
    def _converges(self) -> FastProbeSettings:
        if self.select_from == "converged" and min(self.weight_decays) <= 0:
            raise ValueError(f"weight_decays: select_from converged needs every weight decay > 0 "
                             f"(an unpenalised fit of separable features has no minimum), got "
                             f"{self.weight_decays}")
        return self

    def lbfgs(self) -> LbfgsProbeSettings:
        """The L-BFGS probe of the same weight decays, held-out rows, seed and device: the
        converged fit this probe is checked against."""
        return LbfgsProbeSettings(weight_decays=list(self.weight_decays),
                                  heldout_fraction=self.heldout_fraction, seed=self.seed,
                                  device=self.device, devices=self.devices,
                                  max_gap=self.max_gap, tolerance_change=self.tolerance_change)


class FaithfulProbeSettings(Strict):
    """The authors' probe (`kit.probes.faithful`): frozen backbones on augmented images every
    epoch, BN1d + Linear heads (N(0, 0.01) weights), one per weight decay of the task's grid,
    SGD with Nesterov momentum, the learning rate x0.1 after each milestone, no weight decay on
    BN, as the authors' released linear-probe script for the paper's Section 5 (Table 3) runs it.
    The recipe's values default to the authors'; what depends on the machine (processes,
    DataLoader workers, precision of the backbones) has no default."""

    #: grids replacing the authors' (PAPER_WEIGHT_DECAYS), by grid name (imagenet, inat18,
    #: cifar: every task of that data kind) or by task name (that task only)
    weight_decays: dict[str, list[float]] = Field(default_factory=dict)
    epochs: int = Field(default=28, ge=1)
    #: epochs after which the learning rate is multiplied by 0.1
    milestones: list[int] = Field(default_factory=lambda: [8, 16, 24])
    lr: float = Field(default=0.01, gt=0.0)
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0)
    #: the global batch, split over the processes (the authors: 5 GPUs x 32 images)
    batch_size: int = Field(default=160, ge=1)
    #: rows per BatchNorm statistics group, the authors' per-GPU batch (None: the global batch)
    bn_batch: int | None = Field(default=32, ge=1)
    heldout_fraction: float = Field(default=0.1, gt=0.0, lt=1.0)
    seed: int = Field(default=0, ge=0)
    #: processes (GPUs) of one probe: more than one runs it under torchrun
    processes: int = Field(ge=1)
    #: DataLoader workers decoding images, per process
    workers: int = Field(ge=0)
    #: bf16 runs the frozen backbones under bfloat16 autocast (the heads stay float32)
    precision: Literal["fp32", "bf16"]
    #: the device of each process (cuda: each process its own GPU); notebook 03 sets its own
    device: str = Field(default="cpu", min_length=1)
    #: seconds a collective call (all-reduce, barrier) of the probes' process group waits for
    #: every rank before failing (as the trainer's train.group_timeout_s; a rank opening
    #: ImageNet's 1.28M files or iNat18's JSON can take minutes)
    group_timeout_s: int = Field(default=DEFAULT_GROUP_TIMEOUT_S, ge=60)

    @model_validator(mode="after")
    def _consistent(self) -> FaithfulProbeSettings:
        for name, grid in self.weight_decays.items():
            if not grid or any(decay < 0 for decay in grid):
                raise ValueError(f"weight_decays: {name} needs one or more weight decays >= 0, "
                                 f"got {grid}")
        if list(self.milestones) != sorted(set(self.milestones)) or any(
                m < 1 for m in self.milestones):
            raise ValueError(f"milestones: expected increasing epochs >= 1, got "
                             f"{self.milestones}")
        local, left = divmod(self.batch_size, self.processes)
        if left or (self.bn_batch is not None and local % self.bn_batch):
            raise ValueError(f"batch_size: the global batch {self.batch_size} over "
                             f"{self.processes} process(es) must give each a multiple of bn_batch "
                             f"{self.bn_batch}")
        return self

    def grid(self, task: str, kind: str) -> list[float]:
        """The weight decays a task is probed with: its own grid, else its data kind's (the
        authors' unless replaced)."""
        if task in self.weight_decays:
            return list(self.weight_decays[task])
        name = kinds.get(kind).probe_grid
        return list(self.weight_decays.get(name, PAPER_WEIGHT_DECAYS[name]))
