"""The configuration of one training run (`kit.train`): model, data, optimizer, budget.

One YAML file per run plus dotted command-line overrides (`data.image_size=32`), validated by the
engine in `kit.params.params` so that a refusal names the file and key. Notebook 03 takes the same
settings as its `train` section (`RunSettings`: everything but a run's seed, budget and folder).
Free of torch, like every parameter schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from kit.architectures import ARCHITECTURES
from kit.data.settings import DataSettings
from kit.params import bounds
from kit.params.params import (
    ParameterError,
    Strict,
    describe_errors,
    located,
    merge,
    parse_overrides,
    read_yaml,
)
from kit.runtime.processes import DEFAULT_GROUP_TIMEOUT_S
from kit.train.trackers import TRACKERS


class RunSettings(Strict):
    """Everything of a pretraining run but its seed, budget and folder. Optimizer defaults are
    the AlgoPerf self-tuning schedule-free AdamW submission."""

    model: str = Field(description=f"the ResNet ({', '.join(ARCHITECTURES)}: kit.architectures)")
    width: float = Field(default=1.0, gt=0.0, le=bounds.WIDTH)
    stem: Literal["auto", "imagenet", "small"] = "auto"
    num_classes: int = Field(ge=2, le=bounds.CLASSES)
    data: DataSettings
    batch_size: int = Field(ge=1, le=bounds.BATCH)
    #: images per forward pass; each micro-batch has its own BatchNorm statistics and gradients
    #: accumulate over the global batch (None: the whole per-rank batch at once)
    micro_batch: int | None = Field(default=None, ge=1, le=bounds.BATCH)
    #: the horizon warmup is measured against (AlgoPerf's workloads fix it per workload): warmup
    #: is warmup_fraction x 0.75 x step_hint steps; None: the run's own iterations. With it set,
    #: a run's steps do not depend on how long it trains, so it can be extended or snapshotted
    step_hint: int | None = Field(default=None, ge=1, le=bounds.ITERATIONS)
    lr: float = Field(default=0.0025, gt=0.0)
    betas: list[Annotated[float, Field(ge=0.0, lt=1.0)]] = Field(
        default_factory=lambda: [0.9, 0.99552], min_length=2, max_length=2
    )
    eps: float = Field(default=1.0e-8, gt=0.0)
    weight_decay: float = Field(default=0.08122, ge=0.0)
    label_smoothing: float = Field(default=0.2, ge=0.0, lt=1.0)
    warmup_fraction: float = Field(default=0.02, ge=0.0, le=1.0)
    weight_lr_power: float = Field(default=2.0, ge=0.0)
    r: float = Field(default=0.75, ge=0.0)
    bn_recalibration_batches: int = Field(default=32, ge=0, le=bounds.ITERATIONS)
    eval_every: int = Field(default=0, ge=0, le=bounds.ITERATIONS)
    checkpoint_every: int = Field(default=0, ge=0, le=bounds.ITERATIONS)
    log_every: int = Field(default=50, ge=1, le=bounds.ITERATIONS)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    channels_last: bool = True
    compile: bool = False
    num_workers: int = Field(default=4, ge=0, le=bounds.PER_NODE)
    #: seconds a collective call (all-reduce, barrier) waits for every rank before the run fails
    group_timeout_s: int = Field(default=DEFAULT_GROUP_TIMEOUT_S, ge=60, le=bounds.SECONDS)
    #: seconds a data loader may take for one batch (its first includes starting the workers)
    #: before the run fails naming its folder: a stuck or dead loader worker
    loader_timeout_s: int = Field(default=300, ge=1, le=bounds.SECONDS)
    #: seconds a rank may go without finishing a training step, an evaluation batch or a save
    #: before it fails naming the run and what it was waiting in; below group_timeout_s, so a
    #: rank left waiting for a hung one fails long before the collective call would
    stall_timeout_s: int = Field(default=600, ge=1, le=bounds.SECONDS)
    #: where rank 0 also logs metrics.jsonl's numbers as each row is written, to follow the run
    #: live (kit.train.trackers): `tensorboard` (event files in the run folder), `mlflow` (an
    #: MLflow run in `<run folder>/mlflow.db`, or in the store MLFLOW_TRACKING_URI names); empty:
    #: metrics.jsonl only
    trackers: list[str] = Field(default_factory=list, max_length=bounds.ENTRIES)

    @field_validator("trackers")
    @classmethod
    def _known_trackers(cls, trackers: list[str]) -> list[str]:
        for name in trackers:
            TRACKERS.checked(name)
        if len(set(trackers)) != len(trackers):
            raise ValueError(f"{trackers} names a tracker twice")
        return trackers

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        return ARCHITECTURES.checked(model)

    @model_validator(mode="after")
    def _consistent(self) -> RunSettings:
        if not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ValueError(f"betas: {self.betas} must lie in [0, 1)")
        if self.stall_timeout_s >= self.group_timeout_s:
            raise ValueError(
                f"stall_timeout_s: {self.stall_timeout_s} must be below "
                f"group_timeout_s ({self.group_timeout_s}), or a hung rank's peers "
                "fail in a collective call first, without saying why"
            )
        if self.micro_batch is not None and self.batch_size % self.micro_batch:
            raise ValueError(
                f"micro_batch: {self.micro_batch} does not divide batch_size {self.batch_size}"
            )
        return self

    def live_views(self, runs: Path) -> list[str]:
        """The commands that follow live what runs in run folders under `runs` log to the
        trackers these settings name."""
        return [TRACKERS.get(name).follow(runs, one_run=False) for name in self.trackers]

    def input_problems(self) -> list[str]:
        """The optional packages these settings need and this environment lacks, each naming
        its key first: checked before a run starts (`load_train_settings`, `kit check`), not
        by validation, which checks values only."""
        return [
            f"trackers: {name}: {missing}"
            for name in self.trackers
            if (missing := TRACKERS.get(name).missing()) is not None
        ]


#: settings that may change between a run and its resumption without changing what it computes
OPERATIONAL_KEYS = frozenset(
    {
        "num_workers",
        "log_every",
        "device",
        "compile",
        "output_dir",
        "trackers",
        # the switch `trackers` took over, in the configuration a checkpoint saved: where a run
        # logged its metrics changes nothing it computes
        "tensorboard",
        "group_timeout_s",
        "loader_timeout_s",
        "stall_timeout_s",
        # a snapshot leaves the run exactly where it was (kit.train.trainer): adding one changes
        # nothing the run computes
        "snapshot_steps",
    }
)


#: the most images one run may train on: 1e11 is about 29 days at 40,000 images/s, eight GPUs
#: at the ~5,000 images/s a ResNet-50 step reaches on an H100 (the paper's cat1 trains 4.6e8)
MOST_IMAGES = 10**11


def budget_problem(iterations: int, batch_size: int) -> str | None:
    """Why `iterations` steps of `batch_size` images are absurd for any machine (None if not)."""
    images = iterations * batch_size
    if images <= MOST_IMAGES:
        return None
    days = images / 40_000 / 86_400
    return (
        f"{iterations} x batch_size {batch_size} = {images:.1e} images, about {days:,.0f} "
        f"days at 40,000 images/s (eight GPUs at ~5,000 images/s each); at most "
        f"{MOST_IMAGES:.0e} images per run"
    )


def replica_problem(bn_recalibration_batches: int, ranks: int) -> str | None:
    """Why a run of `ranks` processes cannot finish with these settings (None if it can): with
    no BatchNorm recalibration each rank keeps the statistics of its own images (DDP does not
    broadcast buffers), so the check that every replica ends bit-identical fails at every finish
    and resume. A check of the plan (`kit check`, and the trainer before it starts), not of the
    values alone."""
    if bn_recalibration_batches == 0 and ranks > 1:
        return (
            f"bn_recalibration_batches: 0 with {ranks} ranks never finishes (each rank keeps "
            f"its own BatchNorm statistics); set it to 1 or more, or train on one process"
        )
    return None


class TrainSettings(RunSettings):
    """One pretraining run; the budget is in iterations, the paper's unit."""

    iterations: int = Field(ge=1, le=bounds.ITERATIONS)
    seed: int = Field(ge=0, le=bounds.SEED)
    output_dir: bounds.PathText
    #: steps at which the model (at x, BatchNorm recalibrated there) is also saved as
    #: snapshot-<step>.pt, hashed, without changing the run: the models time-concat reads from
    #: one seeded run (paper Section 5.1; notebook 03's `catn_models: snapshots`)
    snapshot_steps: list[bounds.Step] = Field(default_factory=list, max_length=bounds.LINES)

    @model_validator(mode="after")
    def _possible(self) -> TrainSettings:
        problem = budget_problem(self.iterations, self.batch_size)
        if problem:
            raise ValueError(f"iterations: {problem}")
        outside = [step for step in self.snapshot_steps if not 1 <= step <= self.iterations]
        if outside:
            raise ValueError(
                f"snapshot_steps: {outside} lie outside the run's steps 1-{self.iterations}"
            )
        return self

    def differing_settings(self, saved: dict[str, Any]) -> list[str]:
        """The settings in which a run saved as `saved` computes something else than this one.
        A longer `iterations` is no difference when step_hint is fixed: the run's steps do not
        depend on where it stops, so the saved run is extended when every other setting, its
        step_hint included, is the same (with step_hint unset, warmup follows iterations and
        `iterations` is named)."""
        current = self.model_dump()
        extends = (
            self.step_hint is not None
            and isinstance(saved.get("iterations"), int)
            and saved["iterations"] <= self.iterations
        )
        return sorted(
            key
            for key in current.keys() | saved.keys()
            if key not in OPERATIONAL_KEYS
            and current.get(key) != saved.get(key)
            and not (key == "iterations" and extends)
        )


def load_train_settings(path: Path, overrides: list[str] | None = None) -> TrainSettings:
    """A run's configuration from YAML plus dotted overrides (`data.image_size=32`), validated so
    that a refusal names the file (or the command line) and the key."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"{path}: configuration file not found")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    merge(values, sources, read_yaml(path), str(path))
    merge(values, sources, parse_overrides(overrides or []), "the command line")
    header = f"invalid training configuration {path}:"
    try:
        settings = TrainSettings(**values)
    except ValidationError as error:
        raise ParameterError(
            describe_errors(header, TrainSettings, error, sources, str(path))
        ) from None
    problems = settings.input_problems()
    if problems:
        raise ParameterError("\n".join([header, *located(problems, sources, str(path))]))
    return settings
