"""The toy counterexample of the paper's Section 3, built so that it can be trained and measured.

The extracted paper text lost the formulas of Section 3; the construction below is our
reconstruction (notebook 01 explains it). Inputs live in the plane of the two features the
extractor can produce, phi1(x) = x[0] and phi2(x) = x[1]; the mixture's support is four points in
XOR position (a diamond): two positives on the phi1 axis, two negatives on the phi2 axis.

The trained model is a diagonal linear network: the extractor gates each feature
(z = u * phi(x)) and a linear head reads z. Weight decay on u and v acts as an L1 penalty on the
effective weights u * v, the sparsity bias of the paper's argument; a feature "survives" when its
effective weight stays above a threshold. Every experiment here trains many such models at once
as one batched tensor program, so a sweep over mixtures and seeds takes seconds on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import torch

from kit.experiments import toy_construction
from kit.experiments.toy_settings import SparseTrainingSettings
from kit.numerics.threads import one_thread
from kit.readout.progress import KeptBar, Stage

#: probe accuracy at which a component counts as solved
SOLVED = 0.95


# ---- Sampling and training -----------------------------------------------------------------


def sample(
    weights: torch.Tensor, n: int, noise: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """n noisy samples from each of R mixtures: inputs [R, n, 2] and labels [R, n]."""
    point = torch.multinomial(
        toy_construction.mixture_masses(weights), n, replacement=True, generator=generator
    )
    x = toy_construction.POINTS[point] + noise * torch.randn(*point.shape, 2, generator=generator)
    return x, toy_construction.LABELS[point]


@dataclass
class SparseModels:
    """R trained diagonal networks: gates u [R, 2], head v [R, 2], bias b [R]."""

    u: torch.Tensor
    v: torch.Tensor
    b: torch.Tensor
    keep_threshold: float

    @property
    def effective(self) -> torch.Tensor:
        return self.u * self.v

    @property
    def kept(self) -> torch.Tensor:
        return self.effective.abs() >= self.keep_threshold

    def representation_maps(self, pruned: bool = True) -> torch.Tensor:
        """Linear maps phi(x) -> z [R, 2, 2], with pruned features set to zero (or kept at
        their tiny gates, which a standardising probe scales back up)."""
        return torch.diag_embed(self.u * self.kept if pruned else self.u)

    def accuracy(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = (x * self.effective[:, None]).sum(-1) + self.b[:, None]
        return ((logits > 0).float() == y).float().mean(1)


def train_sparse(
    weights: torch.Tensor, config: SparseTrainingSettings, seed: int, sample_seed: int | None = None
) -> SparseModels:
    """Train one diagonal network per row of `weights` (component weights), all at once.

    Each row gets its own sample, initialisation and minibatch order, all drawn from one
    generator seeded by `seed`. With `sample_seed`, rows of the same mixture share one training
    sample (drawn from that seed) and differ only by initialisation and minibatch order, as the
    paper's differently seeded runs on one dataset do.
    """
    generator = torch.Generator().manual_seed(seed)
    runs = weights.shape[0]
    if sample_seed is None:
        x, y = sample(weights, config.n_train, config.noise, generator)
    else:
        mixtures, row_mixture = torch.unique(weights, dim=0, return_inverse=True)
        x, y = sample(
            mixtures, config.n_train, config.noise, torch.Generator().manual_seed(sample_seed)
        )
        x, y = x[row_mixture], y[row_mixture]
    u = torch.full((runs, 2), config.init_scale).requires_grad_()
    v = (config.init_scale * torch.randn(runs, 2, generator=generator)).requires_grad_()
    b = torch.zeros(runs, requires_grad=True)
    optimizer = torch.optim.SGD([u, v, b], lr=config.lr)
    rows = torch.arange(runs)[:, None]
    with one_thread():  # tensors of a few thousand elements: a thread join costs more
        for _ in KeptBar(
            range(config.steps),
            desc=f"training {runs} toy models",
            stage=f"training {runs} toy models",
            unit="step",
        ):
            batch = torch.randint(0, config.n_train, (runs, config.batch_size), generator=generator)
            logits = (x[rows, batch] * (u * v)[:, None]).sum(-1) + b[:, None]
            # per-run mean loss, summed over runs so that runs do not share a learning rate scale
            loss = (
                torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, y[rows, batch], reduction="none"
                )
                .mean(1)
                .sum()
            )
            loss = loss + config.weight_decay / 2 * (u.square().sum() + v.square().sum())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return SparseModels(u.detach(), v.detach(), b.detach(), config.keep_threshold)


def kept_label(kept: torch.Tensor) -> list[str]:
    """'phi1', 'phi2', 'both' or 'none' for each row of a [R, 2] boolean tensor."""
    names = {
        (True, False): "phi1",
        (False, True): "phi2",
        (True, True): "both",
        (False, False): "none",
    }
    return [names[(bool(a), bool(b))] for a, b in kept.tolist()]


# ---- Linear probes on learned representations ----------------------------------------------


def probe_components(
    maps: torch.Tensor, config: SparseTrainingSettings, seed: int, what: str = "representations"
) -> torch.Tensor:
    """Linear-probe accuracy on each component for R frozen representations (`what`, in the
    stage line `python -m kit run` prints): maps [R, F, 2] send phi(x) to an F-dimensional
    representation (a concatenation of several models is a taller map). For every
    representation and component, a logistic-regression head is fitted on fresh samples of
    the component and scored on other fresh samples. Returns accuracies [R, 4].
    """
    generator = torch.Generator().manual_seed(seed)
    runs, width = maps.shape[0], maps.shape[1]
    one_hot = torch.eye(len(toy_construction.COMPONENT_NAMES))
    # [R*4] problems: every representation against every component
    weights = one_hot.repeat(runs, 1)
    flat_maps = maps.repeat_interleave(len(toy_construction.COMPONENT_NAMES), dim=0)
    x_fit, y_fit = sample(weights, config.probe_samples, config.noise, generator)
    x_test, y_test = sample(weights, config.probe_samples, config.noise, generator)
    z_fit = torch.einsum("rfk,rnk->rnf", flat_maps, x_fit)
    z_test = torch.einsum("rfk,rnk->rnf", flat_maps, x_test)
    mean, std = z_fit.mean(1, keepdim=True), z_fit.std(1, keepdim=True)
    z_fit, z_test = (z_fit - mean) / (std + 1e-6), (z_test - mean) / (std + 1e-6)
    head = torch.zeros(runs * len(toy_construction.COMPONENT_NAMES), width, requires_grad=True)
    bias = torch.zeros(runs * len(toy_construction.COMPONENT_NAMES), requires_grad=True)
    optimizer = torch.optim.Adam([head, bias], lr=0.1)
    stage = Stage(
        "probes",
        config.probe_steps,
        "step",
        f"fitting {len(weights)} probes at once "
        f"({len(toy_construction.COMPONENT_NAMES)} components x {runs} {what})",
    )
    for _ in range(config.probe_steps):
        logits = (z_fit * head[:, None]).sum(-1) + bias[:, None]
        loss = (
            torch.nn.functional.binary_cross_entropy_with_logits(logits, y_fit, reduction="none")
            .mean(1)
            .sum()
            + 1e-4 * head.square().sum()
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        stage.advance()
    stage.finish(f"fitted {len(weights)} probes ({runs} {what})")
    with torch.no_grad():
        predictions = ((z_test * head[:, None]).sum(-1) + bias[:, None]) > 0
        accuracy = (predictions.float() == y_test).float().mean(1)
    return accuracy.reshape(runs, len(toy_construction.COMPONENT_NAMES))


def concatenate(maps: torch.Tensor, groups: list[list[int]]) -> torch.Tensor:
    """Stack the representation maps of each group of runs: [G, k*F, 2]."""
    return torch.stack([torch.cat([maps[i] for i in group], dim=0) for group in groups])


# ---- The experiments of notebook 01 --------------------------------------------------------


def mixture_sweep(
    shares: list[float],
    replicates: int,
    config: SparseTrainingSettings,
    seed: int,
    shared_sample: bool = False,
) -> tuple[pl.DataFrame, SparseModels]:
    """Train `replicates` sparse models on every dominated mixture and probe each component.

    One row per trained model: its mixture, the features that survived, its training accuracy
    on the mixture, its linear-probe accuracy on each component, and whether a probe of its
    unpruned representation solves every component. With `shared_sample`, the replicates of a
    mixture share one training sample (seed and batch order differ).
    """
    settings = [(d, s) for s in shares for d in range(len(toy_construction.COMPONENT_NAMES))]
    weights = torch.stack([toy_construction.dominated_weights(d, s) for d, s in settings])
    weights = weights.repeat_interleave(replicates, dim=0)
    models = train_sparse(weights, config, seed, sample_seed=seed + 3 if shared_sample else None)
    x, y = sample(weights, config.n_train, config.noise, torch.Generator().manual_seed(seed + 1))
    train_accuracy = models.accuracy(x, y)
    probe = probe_components(models.representation_maps(), config, seed + 2, "trained models")
    unpruned = probe_components(
        models.representation_maps(pruned=False), config, seed + 2, "trained models, unpruned"
    )
    rows = []
    for r, label in enumerate(kept_label(models.kept)):
        dominant, share = settings[r // replicates]
        rows.append(
            {
                "run": r,
                "replicate": r % replicates,
                "dominant": toy_construction.COMPONENT_NAMES[dominant],
                "share": share,
                **{
                    f"pi_{c}": float(weights[r, i])
                    for i, c in enumerate(toy_construction.COMPONENT_NAMES)
                },
                "w_phi1": float(models.effective[r, 0]),
                "w_phi2": float(models.effective[r, 1]),
                "kept": label,
                "predicted_by_optimum": toy_construction.optimal_mixture_classifier(weights[r])[
                    "features"
                ],
                "mixture_train_accuracy": float(train_accuracy[r]),
                **{
                    f"acc_{c}": float(probe[r, i])
                    for i, c in enumerate(toy_construction.COMPONENT_NAMES)
                },
                "unpruned_solves_all": bool((unpruned[r] >= SOLVED).all()),
            }
        )
    return pl.DataFrame(rows), models


def direct_training(replicates: int, config: SparseTrainingSettings, seed: int) -> pl.DataFrame:
    """Train the same sparse model on each component alone and probe it on that component."""
    weights = torch.eye(len(toy_construction.COMPONENT_NAMES)).repeat_interleave(replicates, dim=0)
    models = train_sparse(weights, config, seed)
    probe = probe_components(models.representation_maps(), config, seed + 2, "direct models")
    rows = []
    for r, label in enumerate(kept_label(models.kept)):
        c = r // replicates
        rows.append(
            {
                "component": toy_construction.COMPONENT_NAMES[c],
                "replicate": r % replicates,
                "kept": label,
                "accuracy": float(probe[r, c]),
            }
        )
    return pl.DataFrame(rows)


def concatenation_study(
    runs: pl.DataFrame,
    models: SparseModels,
    sizes: list[int],
    config: SparseTrainingSettings,
    seed: int,
    solved: float = SOLVED,
) -> pl.DataFrame:
    """Concatenate the representations of differently seeded runs trained on the same mixture.

    For every mixture in `runs` and every k in `sizes`, the replicates are split into disjoint
    groups of k; each group's concatenated representation is probed on every component.
    A component counts as solved when the probe reaches `solved` accuracy.
    """
    maps = models.representation_maps()
    groups, keys = [], []
    for (dominant, share), block in runs.group_by(["dominant", "share"], maintain_order=True):
        members = block.sort("replicate")["run"].to_list()
        for k in sizes:
            for start in range(0, len(members) - k + 1, k):
                groups.append(members[start : start + k])
                keys.append((dominant, share, k))
    accuracy = torch.empty(len(groups), len(toy_construction.COMPONENT_NAMES))
    for k in sizes:  # one batched probe per width
        index = [i for i, key in enumerate(keys) if key[2] == k]
        if index:
            accuracy[index] = probe_components(
                concatenate(maps, [groups[i] for i in index]),
                config,
                seed + k,
                f"concatenations of {k} reused trained model{'s' if k > 1 else ''}",
            )
    rows = []
    for (dominant, share, k), group, acc in zip(keys, groups, accuracy, strict=True):
        kept = models.kept[group].any(0)
        rows.append(
            {
                "dominant": dominant,
                "share": share,
                "k": k,
                "features_in_union": kept_label(kept[None])[0],
                **{
                    f"acc_{c}": float(acc[i])
                    for i, c in enumerate(toy_construction.COMPONENT_NAMES)
                },
                "components_solved": int((acc >= solved).sum()),
            }
        )
    return pl.DataFrame(rows)


def sparsity_sweep(
    weight_decays: list[float],
    weights: list[float],
    runs: int,
    config: SparseTrainingSettings,
    seed: int,
) -> pl.DataFrame:
    """Which features survive on one mixture in which both features carry signal, as the
    weight decay (the sparsity bias) grows: `runs` models per weight decay."""
    mixture = torch.tensor(weights) / sum(weights)
    rows = []
    for weight_decay in weight_decays:
        models = train_sparse(
            mixture.repeat(runs, 1), config.model_copy(update={"weight_decay": weight_decay}), seed
        )
        rows += [{"weight_decay": weight_decay, "kept": label} for label in kept_label(models.kept)]
    return pl.DataFrame(rows)


def all_solved_fraction(concat: pl.DataFrame) -> dict[str, float]:
    """Per group size k, the share of concatenated groups that solve every component."""
    return {
        str(k): frac
        for k, frac in concat.group_by("k")
        .agg((pl.col("components_solved") == len(toy_construction.COMPONENT_NAMES)).mean())
        .sort("k")
        .iter_rows()
    }


def all_solved_by_k(fresh: pl.DataFrame, shared: pl.DataFrame) -> pl.DataFrame:
    """Groups solving every component, by k: replicates with their own samples against
    replicates sharing one sample."""
    return pl.DataFrame(
        [
            {
                "k": int(k),
                "own samples": fresh_value,
                "one shared sample": all_solved_fraction(shared).get(k),
            }
            for k, fresh_value in all_solved_fraction(fresh).items()
        ]
    )


def accuracy_table(runs: pl.DataFrame, direct: pl.DataFrame) -> pl.DataFrame:
    """Probe accuracy per component: mixture-trained models by kept feature, and direct."""
    mixture = runs.unpivot(
        index=["kept"],
        on=[f"acc_{c}" for c in toy_construction.COMPONENT_NAMES],
        variable_name="component",
        value_name="accuracy",
    ).with_columns(
        pl.col("component").str.strip_prefix("acc_"),
        pl.format("mixture, kept {}", pl.col("kept")).alias("training"),
    )
    direct_rows = direct.select(
        pl.lit("direct on the component").alias("training"), "component", "accuracy"
    )
    both = pl.concat([mixture.select("training", "component", "accuracy"), direct_rows])
    return (
        both.group_by(["training", "component"])
        .agg(
            pl.len().alias("n"),
            pl.col("accuracy").mean().alias("mean"),
            pl.col("accuracy").std().alias("std"),
        )
        .sort(["training", "component"])
    )


def majority_accuracy() -> dict[str, float]:
    """What predicting each component's more frequent label scores: its chance level."""
    positive = toy_construction.COMPONENT_MASSES @ toy_construction.LABELS
    return {
        name: round(float(max(p, 1 - p)), 6)
        for name, p in zip(toy_construction.COMPONENT_NAMES, positive, strict=True)
    }
