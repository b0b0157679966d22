"""Linear probes and label-free diagnostics on synthetic features with known answers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import polars as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from kit.files.paths import REPO_ROOT
from kit.numerics.threads import lent_threads, numerics_threads
from kit.probes import lbfgs, parallel, registry
from kit.probes.faithful_training import faithful_probe
from kit.probes.fast import converged_heads, fast_probe
from kit.probes.lbfgs import convex_fit, lbfgs_probe
from kit.probes.rows import (
    FeatureRows,
    ProbeError,
    Split,
    check_splits,
    heldout_indices,
    read_rows,
    standardiser,
)
from kit.probes.selection import BOUNDED, RULES, select
from kit.probes.settings import (
    LBFGS_MAX_ITER,
    PAPER_WEIGHT_DECAYS,
    FaithfulProbeSettings,
    FastProbeSettings,
    LbfgsProbeSettings,
)
from kit.stats import diagnostics


def planted(n: int, dim: int, classes: int, seed: int, scale: float = 0.8) -> Split:
    """Gaussian classes around random means: a linear rule decides the label."""
    generator = torch.Generator().manual_seed(seed)
    means = torch.randn(classes, dim, generator=torch.Generator().manual_seed(99)) * scale
    labels = torch.randint(0, classes, (n,), generator=generator)
    return Split(means[labels] + torch.randn(n, dim, generator=generator), labels, "s")


def xor(n: int, seed: int) -> Split:
    generator = torch.Generator().manual_seed(seed)
    corners = torch.randint(0, 2, (n, 2), generator=generator).float() * 2 - 1
    labels = (corners[:, 0] * corners[:, 1] > 0).long()
    return Split(corners + 0.1 * torch.randn(n, 2, generator=generator), labels, "s")


FAST = FastProbeSettings(epochs=6, batch_size=256)


def test_fast_probe_recovers_a_planted_linear_rule() -> None:
    result = fast_probe(planted(3000, 32, 5, 0), planted(1000, 32, 5, 1), 5, FAST, progress=False)
    assert result.top1("paper") >= 0.97
    assert result.top1("heldout") >= 0.97
    assert set(result.selected["rule"]) == set(RULES)
    assert result.selected["top5"].null_count() == 2  # five classes: no top-5


def test_linear_probes_fail_on_xor() -> None:
    train, evaluation = xor(2000, 0), xor(1000, 1)
    assert fast_probe(train, evaluation, 2, FAST, progress=False).top1("paper") <= 0.8
    assert (
        lbfgs_probe(train, evaluation, 2, LbfgsProbeSettings(weight_decays=[1e-4])).top1("paper")
        <= 0.8
    )


def test_paper_rule_is_never_below_heldout_rule() -> None:
    result = fast_probe(
        planted(1500, 16, 12, 2, 0.4), planted(600, 16, 12, 3, 0.4), 12, FAST, progress=False
    )
    assert result.top1("paper") >= result.top1("heldout")
    assert result.history.height == FAST.epochs * len(FAST.lrs) * len(FAST.weight_decays)
    assert result.selected["top5"].null_count() == 0  # twelve classes: top-5 reported


def test_fast_and_lbfgs_agree_where_both_converge() -> None:
    train, evaluation = planted(3000, 20, 4, 4, 0.35), planted(1500, 20, 4, 5, 0.35)
    fast = fast_probe(train, evaluation, 4, FAST, progress=False).top1("heldout")
    exact = lbfgs_probe(train, evaluation, 4, LbfgsProbeSettings(weight_decays=[1e-4, 1e-3])).top1(
        "heldout"
    )
    assert fast == pytest.approx(exact, abs=0.03)


def teacher(n: int, dim: int, classes: int, seed: int, noise: float = 0.5) -> Split:
    """Labels of a planted linear rule with Gumbel noise: well conditioned, not separable."""
    generator = torch.Generator().manual_seed(seed)
    rule = torch.randn(dim, classes, generator=torch.Generator().manual_seed(7)) * 3 / dim**0.5
    x = torch.randn(n, dim, generator=generator)
    gumbel = -torch.log(-torch.log(torch.rand(n, classes, generator=generator)))
    return Split(x, (x @ rule + noise * gumbel).argmax(1), "s")


@pytest.mark.parametrize("dim", [8, 32, 128])
def test_fast_probe_run_long_enough_converges_to_lbfgs(dim: int) -> None:
    """A converged fast probe agrees with L-BFGS on the same features within half a
    point, per weight decay at its last epoch and under the held-out rule."""
    train, evaluation = teacher(4000, dim, 4, 0), teacher(4000, dim, 4, 1)
    decays = [1e-3, 1e-2]  # lists: the settings are strict pydantic models
    fast = fast_probe(
        train,
        evaluation,
        4,
        FastProbeSettings(
            lrs=[0.1], weight_decays=decays, epochs=40, batch_size=256, heldout_fraction=0.25
        ),
        progress=False,
    )
    exact = lbfgs_probe(
        train,
        evaluation,
        4,
        LbfgsProbeSettings(weight_decays=decays, max_iter=500, heldout_fraction=0.25),
    )
    last = fast.history.filter(fast.history["epoch"] == 40).sort("weight_decay")
    reference = exact.history.sort("weight_decay")
    assert last["train_loss"].to_list() == pytest.approx(
        reference["train_loss"].to_list(), rel=0.01
    )
    assert last["eval_top1"].to_list() == pytest.approx(reference["eval_top1"].to_list(), abs=0.005)
    assert fast.top1("heldout") == pytest.approx(exact.top1("heldout"), abs=0.005)


def skewed(n: int, seed: int, dim: int = 64, latent: int = 16, classes: int = 10) -> Split:
    """Features as a trained network's: few directions carry variance, spread over three
    decades (the cpu profile's standardised features have condition numbers near 10^4)."""
    generator = torch.Generator().manual_seed(seed)
    mix = torch.randn(latent, dim, generator=torch.Generator().manual_seed(11))
    rule = torch.randn(latent, classes, generator=torch.Generator().manual_seed(12))
    z = torch.randn(n, latent, generator=generator)
    gumbel = -torch.log(-torch.log(torch.rand(n, classes, generator=generator)))
    return Split(
        (z * 10 ** torch.linspace(0, -1.5, latent)) @ mix, (z @ rule + gumbel).argmax(1), "s"
    )


def test_fast_probe_selecting_converged_fits_agrees_with_lbfgs_on_ill_conditioned_features() -> (
    None
):
    """With `select_from: converged` the fast probe finishes each weight decay's
    lowest-objective head by L-BFGS and reports what L-BFGS from zero does, per weight decay and
    under both rules; its SGD heads alone, after the same 5 epochs, are far off, so the check
    can fail."""
    train, evaluation = skewed(1000, 0), skewed(2000, 1)
    decays = [1e-3, 1e-2]
    exact = lbfgs_probe(train, evaluation, 10, LbfgsProbeSettings(weight_decays=decays))
    result = fast_probe(
        train,
        evaluation,
        10,
        FastProbeSettings(
            lrs=[0.03, 0.1, 0.3],
            weight_decays=decays,
            epochs=5,
            batch_size=64,
            select_from="converged",
        ),
        progress=False,
    )
    sgd = result.history.filter(pl.col("iterations").is_null())
    assert sgd.height == 3 * 2 * 5  # every head, every epoch
    finished, reference = converged_heads(result.history), exact.history
    assert finished["weight_decay"].to_list() == decays
    assert (finished["iterations"] > 0).all()
    for decay in decays:
        started_from = converged_heads(sgd).filter(pl.col("weight_decay") == decay)
        fit = finished.filter(pl.col("weight_decay") == decay).row(0, named=True)
        assert fit["lr"] == started_from["lr"].item()  # finished from its lowest-loss head
        assert fit["train_loss"] < started_from["train_loss"].item() - 0.01
        cold = reference.filter(pl.col("weight_decay") == decay).row(0, named=True)
        assert fit["train_loss"] == pytest.approx(cold["train_loss"], abs=1e-6)
        assert fit["eval_top1"] == pytest.approx(cold["eval_top1"], abs=0.005)
        assert abs(started_from["eval_top1"].item() - cold["eval_top1"]) > 0.01  # 2x the bar
    for rule in RULES:
        assert result.top1(rule) == pytest.approx(exact.top1(rule), abs=0.005), rule


def test_converged_fast_probe_refuses_an_unpenalised_fit() -> None:
    with pytest.raises(ValueError, match="select_from converged needs every weight decay > 0"):
        FastProbeSettings(weight_decays=[0.0, 1e-3], select_from="converged")


def test_lbfgs_fits_from_different_starts_agree_to_the_image() -> None:
    """The reference is the optimum, not where an optimiser stopped: float64 fits from zero and
    from random weights reach the same objective and predict every evaluation row alike (a
    float32 fit stopped up to 1e-5 above the minimum, 0.59 point off on cpu features)."""
    train, evaluation = skewed(1000, 0), skewed(2000, 1)
    rows = convex_fit(train, evaluation, 10, 0.1, 0, torch.device("cpu"))
    fits = []
    for start in (None, 0):
        linear = torch.nn.Linear(64, 10).double()
        with torch.no_grad():
            if start is None:
                linear.weight.zero_()
                linear.bias.zero_()
            else:
                linear.weight.normal_(generator=torch.Generator().manual_seed(start))
        fits.append((rows.fit(linear, 1e-3, LBFGS_MAX_ITER), linear))
    (zero, zero_linear), (random, random_linear) = fits
    assert random["train_loss"] == pytest.approx(zero["train_loss"], abs=1e-7)
    predict = [
        linear(rows.standardised(evaluation.features)).argmax(1)
        for linear in (zero_linear, random_linear)
    ]
    assert torch.equal(*predict)


def test_fast_probe_reports_the_train_eval_gap() -> None:
    """Few rows, many features: the chosen head fits its training rows far better than it
    generalises, and the result says so."""
    result = fast_probe(teacher(300, 128, 4, 2), teacher(1000, 128, 4, 3), 4, FAST, progress=False)
    for row in result.selected.iter_rows(named=True):
        assert row["train_top1"] > row["top1"] + 0.1
    assert result.history["train_top1"].null_count() == 0


def test_memory_mapped_fp16_features_give_the_in_memory_result(tmp_path) -> None:
    """The probe reads a FeatureSet-style fp16 memory map in chunks; the result is the one it
    gives on the same values held in memory as float32."""
    train, evaluation = planted(1500, 16, 12, 2, 0.4), planted(600, 16, 12, 3, 0.4)
    for name, split in (("train", train), ("eval", evaluation)):
        np.save(tmp_path / f"{name}.npy", split.features.half().numpy())
    mapped = [
        Split(np.load(tmp_path / f"{name}.npy", mmap_mode="r"), split.labels.numpy(), name)
        for name, split in (("train", train), ("eval", evaluation))
    ]
    in_memory = [
        Split(
            torch.from_numpy(np.array(split.features)).float(),
            torch.from_numpy(split.labels),
            split.name,
        )
        for split in mapped
    ]
    streamed = fast_probe(*mapped, 12, FAST, progress=False)
    reference = fast_probe(*in_memory, 12, FAST, progress=False)
    assert streamed.selected.equals(reference.selected)
    assert streamed.history.drop("train_loss").equals(reference.history.drop("train_loss"))
    assert streamed.history["train_loss"].to_list() == pytest.approx(
        reference.history["train_loss"].to_list(), rel=1e-6
    )


class CountedRows(np.ndarray):
    """A feature array that records how many rows each read takes."""

    reads: list[int] = []

    def __getitem__(self, index: object) -> np.ndarray:
        rows = super().__getitem__(index)
        CountedRows.reads.append(len(rows) if np.ndim(rows) == 2 else 1)
        return rows


def test_fast_probe_reads_features_a_chunk_at_a_time(tmp_path) -> None:
    """Memory is bounded by construction: no read of the (memory-mapped) features takes more
    than a minibatch or a chunk of rows, far fewer than the split holds."""
    train, evaluation = planted(4000, 1024, 5, 0, 0.1), planted(500, 1024, 5, 1, 0.1)
    np.save(tmp_path / "train.npy", train.features.half().numpy())
    mapped = np.load(tmp_path / "train.npy", mmap_mode="r").view(CountedRows)
    CountedRows.reads = []
    fast_probe(
        Split(mapped, train.labels, "train"),
        evaluation,
        5,
        FastProbeSettings(epochs=1, batch_size=256),
        progress=False,
    )
    assert len(CountedRows.reads) > 10
    assert max(CountedRows.reads) <= 1024 < len(train.labels) // 3


def test_lbfgs_streams_features_too_large_to_copy_with_the_in_memory_result(
    tmp_path, monkeypatch
) -> None:
    """Above LBFGS_COPY_BYTES every evaluation reads the memory map a chunk at a time (as at
    ImageNet size); the converged fit is the one made from a float32 copy."""
    train, evaluation = planted(4000, 1024, 5, 0, 0.1), planted(500, 1024, 5, 1, 0.1)
    np.save(tmp_path / "train.npy", train.features.half().numpy())
    mapped = np.load(tmp_path / "train.npy", mmap_mode="r").view(CountedRows)
    settings = LbfgsProbeSettings(weight_decays=[1e-2])
    copied = lbfgs_probe(
        Split(torch.from_numpy(np.array(mapped)).float(), train.labels, "train"),
        evaluation,
        5,
        settings,
    )
    monkeypatch.setattr(lbfgs, "LBFGS_COPY_BYTES", 0)
    CountedRows.reads = []
    streamed = lbfgs_probe(Split(mapped, train.labels, "train"), evaluation, 5, settings)
    assert len(CountedRows.reads) > 10
    assert max(CountedRows.reads) <= 1024 < len(train.labels) // 3
    assert streamed.history["train_loss"][0] == pytest.approx(
        copied.history["train_loss"][0], rel=1e-5
    )
    assert streamed.top1("heldout") == pytest.approx(copied.top1("heldout"), abs=0.002)


def test_memory_benchmark_prints_the_ratio_on_a_small_proxy() -> None:
    script = REPO_ROOT / "benchmarks" / "probe_memory.py"
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            "--rows",
            "3000",
            "--eval",
            "500",
            "--dim",
            "64",
            "--classes",
            "5",
            "--baseline-rev",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ratio = re.search(
        r"new \(this tree\): peak extra memory +\d+ MiB = ([\d.]+) x fp16", result.stdout
    )
    assert ratio and float(ratio.group(1)) > 0, result.stdout


def test_agreement_benchmark_reads_a_feature_cache_and_prints_each_difference(tmp_path) -> None:
    """Two representations cached as notebook 03 writes them (record.json beside the arrays)."""
    for rep in range(2):
        for split_name, seed in (("train[balanced 64, seed 0]", 0), ("eval", 1)):
            planted_split = planted(400, 12, 4, seed + 2 * rep, 0.4)
            folder = tmp_path / f"{rep}-{seed}"
            folder.mkdir()
            np.save(folder / "features.npy", planted_split.features.half().numpy())
            np.save(folder / "labels.npy", planted_split.labels.numpy())
            (folder / "record.json").write_text(
                json.dumps(
                    {
                        "checkpoints": [{"name": "checkpoint.pt", "sha256": str(rep)}],
                        "dataset": "{}",
                        "split": split_name,
                    }
                )
            )
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "probe_agreement.py"),
            str(tmp_path),
            "--config",
            '{"epochs": 2, "batch_size": 64}',
            "--config",
            '{"epochs": 2, "batch_size": 64, "select_from": "converged"}',
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "2 cached representations" in result.stdout, result.stdout
    found = re.findall(
        r"(weight decay [\d.e-]+|held-out rule): max \|fast - L-BFGS\| "
        r"([\d.]+) points",
        result.stdout,
    )
    assert [which for which, _ in found] == [
        "weight decay 0.001",
        "weight decay 0.01",
        "held-out rule",
    ] * 2
    # the converged configuration's fits were finished by L-BFGS, and say so
    assert (
        len(
            re.findall(
                r"L-BFGS iterations \d+ finishing the fast probe, \d+ from zero", result.stdout
            )
        )
        == 2
    )
    assert all(float(points) <= 0.5 for _, points in found[3:])


def test_standardiser_in_chunks_matches_the_exact_statistics() -> None:
    generator = torch.Generator().manual_seed(4)  # 2000 wide: several chunks of rows
    features = torch.randn(3000, 2000, generator=generator, dtype=torch.float64) * 3 + 100
    rows = torch.arange(0, 3000, 2)
    mean, std = standardiser(features.half().numpy(), rows)
    exact = features.half().double()[rows]
    assert torch.allclose(mean.double(), exact.mean(0), rtol=1e-6)
    assert torch.allclose(std.double(), exact.std(0, unbiased=False), rtol=1e-4)


def test_the_standardiser_and_the_finite_check_have_the_same_bits_on_lent_threads() -> None:
    """Chunks read side by side on two lent threads, their sums added in the chunks' order: the
    same mean and deviation, bit for bit, as one chunk after the other; and the rows holding NaN
    or inf are counted whichever thread read them."""
    generator = torch.Generator().manual_seed(5)
    features = (torch.randn(5000, 2000, generator=generator) * 3 + 100).numpy()
    rows = torch.arange(0, 5000, 3)  # standardised: none of the three rows made non-finite
    features[[7, 2500, 4999], [0, 5, 1999]] = [np.nan, np.inf, -np.inf]
    splits = [Split(features, np.zeros(5000, dtype=np.int64), "train")]
    before = torch.get_num_threads()
    found = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with numerics_threads():
                assert lent_threads() == threads
                found.append(standardiser(features, rows))
                with pytest.raises(ProbeError, match="'train': NaN or inf in 3 feature rows"):
                    check_splits(splits, 1)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*found, strict=True))


def test_the_finite_check_counts_rows_exactly_where_a_chunks_sum_overflows() -> None:
    """Finite float32 features whose chunk sums overflow pass the check, and so do finite fp16
    ones (summed in float32); among them, the rows holding inf or NaN are counted exactly, not
    the chunk's rows."""
    for dtype, big in ((torch.float32, 3e38), (torch.float16, 6e4)):
        features = torch.full((3000, 64), big, dtype=dtype)  # every chunk's sum is inf
        labels = torch.zeros(3000, dtype=torch.int64)
        check_splits([Split(features, labels, "train")], 1)
        features[[5, 2999], [0, 63]] = torch.tensor([float("inf"), float("nan")], dtype=dtype)
        with pytest.raises(ProbeError, match="'train': NaN or inf in 2 feature rows"):
            check_splits([Split(features.numpy(), labels.numpy(), "train")], 1)


def test_standardised_rows_have_the_same_bits_from_a_copy_or_read_by_read(tmp_path) -> None:
    """The fast probe's float32 standardisation (x - mean) * scale, on two lent threads, of
    float32 and fp16 tensors and an fp16 memory map: read block by block, or from a copy of
    every row in another order, the rows have the bits of the two operations on the gathered
    rows; rows the copy holds side by side are read as a view of it, not copied."""
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(3000, 384, generator=generator) * 2 + 1  # 1.15M elements: cut into blocks
    mean, scale = x.mean(0), 1 / x.std(0)
    np.save(tmp_path / "x.npy", x.half().numpy())
    sample = torch.randperm(3000, generator=generator)[:1000].sort().values
    rest = torch.ones(3000, dtype=torch.bool)
    rest[sample] = False
    order = torch.cat([sample, torch.arange(3000)[rest].flip(0)])
    index = torch.randperm(3000, generator=generator)[:2900].sort().values
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with numerics_threads():
            for features in (x, x.half(), np.load(tmp_path / "x.npy", mmap_mode="r")):
                expected = (read_rows(features, index).float() - mean) * scale
                reads = FeatureRows(features, torch.device("cpu"))
                copied = reads.standardised(mean, scale, order)
                assert torch.equal(reads.standardised(mean, scale, None)(index), expected)
                assert torch.equal(copied(index), expected)
                assert copied.copy is not None
                assert copied(sample).data_ptr() == copied.copy.data_ptr()
                in_sample = read_rows(features, sample).float()
                assert torch.equal(copied(sample), (in_sample - mean) * scale)
    finally:
        torch.set_num_threads(before)


class Flatten(torch.nn.Module):
    """A 'backbone' whose features are its inputs."""

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_faithful_and_fast_agree_where_both_converge() -> None:
    train, evaluation = planted(2000, 20, 4, 6, 0.35), planted(1000, 20, 4, 7, 0.35)
    kept, held_out = heldout_indices(len(train.labels), 0.1, seed=0)  # the fast probe's
    fit, held = (
        Split(train.features[rows], train.labels[rows], name)
        for rows, name in ((kept, "train"), (held_out, "heldout"))
    )

    def loader(split: Split, shuffle: bool) -> DataLoader:
        return DataLoader(
            TensorDataset(split.features, split.labels), batch_size=128, shuffle=shuffle
        )

    settings = FaithfulProbeSettings(
        epochs=6, milestones=[4], lr=0.05, bn_batch=None, processes=1, workers=0, precision="fp32"
    )
    faithful = faithful_probe(
        [Flatten()],
        loader(fit, True),
        loader(held, False),
        loader(evaluation, False),
        4,
        settings,
        PAPER_WEIGHT_DECAYS["imagenet"],
        progress=False,
    )
    fast = fast_probe(train, evaluation, 4, FAST, progress=False)
    assert faithful.top1("heldout") == pytest.approx(fast.top1("heldout"), abs=0.03)
    assert faithful.history["weight_decay"].unique().sort().to_list() == [1e-4, 5e-4]


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda t, e: (
                Split(
                    t.features.clone().index_fill_(0, torch.tensor([3]), float("nan")),
                    t.labels,
                    "train",
                ),
                e,
            ),
            "NaN",
        ),
        (lambda t, e: (t, Split(e.features[:, :-1], e.labels, "eval")), "dimension"),
        (lambda t, e: (Split(t.features, t.labels + 10, "train"), e), "outside"),
        (lambda t, e: (t, Split(e.features[:0], e.labels[:0], "eval")), "non-empty"),
        (lambda t, e: (Split(t.features, t.labels[:-1], "train"), e), "labels of shape"),
    ],
)
def test_bad_features_are_refused_before_training(make, message: str) -> None:
    train, evaluation = make(planted(200, 8, 3, 0), planted(100, 8, 3, 1))
    with pytest.raises(ProbeError, match=message):
        fast_probe(train, evaluation, 3, FAST, progress=False)


def test_rankme_of_a_rank_r_matrix_is_about_r() -> None:
    generator = torch.Generator().manual_seed(0)
    for rank in (3, 10):
        q, _ = torch.linalg.qr(torch.randn(64, rank, generator=generator))
        coefficients = torch.linalg.qr(torch.randn(2000, rank, generator=generator))[0]
        features = coefficients @ q.T  # equal singular values: exp(entropy) is exactly r
        assert diagnostics.rankme(features) == pytest.approx(rank, rel=0.02)


def test_alpha_req_recovers_a_planted_power_law() -> None:
    generator = torch.Generator().manual_seed(1)
    scales = torch.arange(1, 65, dtype=torch.float64).pow(-0.75)  # eigenvalues ~ k^-1.5
    features = torch.randn(20000, 64, generator=generator, dtype=torch.float64) * scales
    assert diagnostics.alpha_req(features) == pytest.approx(1.5, abs=0.15)


def test_cka_is_one_on_itself_and_invariant_to_rotation_and_scale() -> None:
    generator = torch.Generator().manual_seed(2)
    features = torch.randn(500, 30, generator=generator)
    rotation, _ = torch.linalg.qr(torch.randn(30, 30, generator=generator))
    assert diagnostics.linear_cka(features, features) == pytest.approx(1.0)
    assert diagnostics.linear_cka(features, 3.5 * features @ rotation) == pytest.approx(1.0)
    unrelated = torch.randn(500, 30, generator=generator)
    assert diagnostics.linear_cka(features, unrelated) < 0.2


def test_lbfgs_runs_to_its_tolerance_and_refuses_a_fit_cut_short() -> None:
    """The L-BFGS reference is converged, not stopped by an iteration count."""
    train, evaluation = teacher(2000, 64, 4, 0), teacher(1000, 64, 4, 1)
    result = lbfgs_probe(train, evaluation, 4, LbfgsProbeSettings(weight_decays=[1e-3]))
    assert 0 < result.history["iterations"][0] < 2000
    with pytest.raises(ProbeError, match="did not converge in 3 iterations"):
        lbfgs_probe(train, evaluation, 4, LbfgsProbeSettings(weight_decays=[1e-3], max_iter=3))


def test_bounded_rule_keeps_the_heldout_choice_within_the_gap_and_says_when_none_is() -> None:
    """A planted history: the best held-out head fits its rows 30 points above its held-out
    rows; `bounded` takes the best head within 15 points, and with no head within the bound
    the one that fits its rows least above its held-out rows."""
    history = pl.DataFrame(
        {
            "weight_decay": [1e-3, 1e-2, 1e-1],
            "epoch": [1, 1, 1],
            "train_top1": [0.70, 0.50, 0.40],
            "heldout_top1": [0.40, 0.38, 0.33],
            "eval_top1": [0.41, 0.37, 0.32],
            "eval_top5": [None] * 3,
        }
    )
    chosen = {
        row["rule"]: row["weight_decay"]
        for row in select(history, ["weight_decay"], 10, max_gap=15).iter_rows(named=True)
    }
    assert chosen == {"paper": 1e-3, "heldout": 1e-3, "bounded": 1e-2}
    assert set(select(history, ["weight_decay"], 10)["rule"]) == set(RULES)
    tight = select(history, ["weight_decay"], 10, max_gap=5).filter(pl.col("rule") == BOUNDED)
    assert tight["weight_decay"].to_list() == [1e-1]  # 7 points: the smallest gap, not within


def test_bounded_rule_regularises_a_probe_with_few_rows_per_feature() -> None:
    """128 features, 270 fit rows: the held-out choice fits its rows far above the evaluation
    split; the bounded choice, from the same fits, stays within the bound on held-out rows."""
    settings = LbfgsProbeSettings(weight_decays=[1e-3, 1e-1, 1.0, 10.0], max_gap=15)
    result = lbfgs_probe(teacher(300, 128, 4, 2), teacher(1000, 128, 4, 3), 4, settings)
    rows = {row["rule"]: row for row in result.selected.iter_rows(named=True)}
    assert rows["heldout"]["train_top1"] - rows["heldout"]["top1"] > 0.15
    bounded = result.history.filter(pl.col("weight_decay") == rows["bounded"]["weight_decay"])
    assert (bounded["train_top1"] - bounded["heldout_top1"]).item() <= 0.15
    assert rows["bounded"]["weight_decay"] > rows["heldout"]["weight_decay"]


def test_lbfgs_regularisation_path_reaches_the_fits_from_zero() -> None:
    """Warm starts from the next stronger weight decay change where L-BFGS stops only within
    its tolerance: the objective of each fit from zero, and every evaluation prediction's
    accuracy to the image."""
    train, evaluation = skewed(1000, 0), skewed(2000, 1)
    decays = [1e-3, 1e-2, 1e-1]
    path = lbfgs_probe(train, evaluation, 10, LbfgsProbeSettings(weight_decays=decays))
    for decay in decays:
        alone = lbfgs_probe(train, evaluation, 10, LbfgsProbeSettings(weight_decays=[decay]))
        fitted = path.history.filter(pl.col("weight_decay") == decay)
        assert fitted["train_loss"].item() == pytest.approx(
            alone.history["train_loss"].item(), abs=1e-7
        )
        assert fitted["eval_top1"].item() == alone.history["eval_top1"].item()
    assert path.history["weight_decay"].to_list() == decays  # the settings' order


def test_probes_fitted_side_by_side_equal_those_fitted_one_by_one() -> None:
    """kit.probes.parallel: fits on two threads are the same fits, in order, and the process
    keeps its intra-op threads afterwards."""
    jobs = [(skewed(600, seed), skewed(200, seed + 50), {}) for seed in range(4)]
    settings = LbfgsProbeSettings(weight_decays=[1e-2, 1.0], max_gap=15)
    probe = registry.get("lbfgs")
    threads = torch.get_num_threads()
    alone = list(parallel.fit_many(probe, jobs, 10, settings, workers=1))
    together = list(parallel.fit_many(probe, jobs, 10, settings, workers=2))
    assert torch.get_num_threads() == threads
    for one, other in zip(alone, together, strict=True):
        assert one.history.equals(other.history)
        assert one.selected.equals(other.selected)


def one_hot_rows(labels: torch.Tensor, classes: int, seed: int, distractors=None) -> torch.Tensor:
    """Features that name each row's class (3 in its own dimension, small noise), and with
    `distractors` twice as strongly another class."""
    generator = torch.Generator().manual_seed(seed)
    rows = 0.1 * torch.randn(len(labels), classes, generator=generator)
    rows[torch.arange(len(labels)), labels] += 3.0
    if distractors is not None:
        rows[torch.arange(len(labels)), distractors] += 6.0
    return rows


@pytest.mark.parametrize("probe", ["fast", "lbfgs"])
def test_extra_evaluation_splits_are_scored_among_their_classes(probe: str) -> None:
    """A head that is perfect on its classes, scored on an ImageNet-R-like split of three of
    its ten classes whose every other row points twice as strongly at a class outside them:
    taken among the three classes every prediction is right; over all ten, half are."""
    classes, subset = 10, (2, 5, 7)
    labels = torch.arange(600) % classes
    train = Split(one_hot_rows(labels, classes, 0), labels, "train")
    evaluation = Split(one_hot_rows(labels[:200], classes, 1), labels[:200], "eval")
    shifted = torch.tensor(subset).repeat(40)
    distractors = torch.where(torch.arange(120) % 2 == 0, (shifted + 1) % classes, shifted)
    rows = one_hot_rows(shifted, classes, 2, distractors)
    extra = {
        "r": Split(rows, shifted, "r", subset),
        "r_all": Split(rows, shifted, "r_all"),
        "same": evaluation,
    }
    settings = FAST if probe == "fast" else LbfgsProbeSettings(weight_decays=[1e-3])
    result = registry.get(probe).fit(train, evaluation, classes, settings, False, extra)
    for rule in RULES:
        chosen = result.selected.filter(pl.col("rule") == rule).row(0, named=True)
        assert chosen["top1"] == 1.0 and chosen["extra_same_top1"] == chosen["top1"]
        assert chosen["extra_r_top1"] == 1.0
        assert chosen["extra_r_all_top1"] == 0.5
    assert {"extra_r_top1", "extra_r_all_top1"} <= set(result.history.columns)
    with pytest.raises(ProbeError, match="split 'bad': labels outside the classes"):
        registry.get(probe).fit(
            train, evaluation, classes, settings, False, {"bad": Split(rows, shifted, "bad", (2,))}
        )
