"""Threads in the reproducible CPU numerics (kit.numerics.blocked, kit.numerics.threads): large
products and batches cut into blocks that the shapes fix, the blocks computed on the process's
threads, and the same bits at 1, 2 and (emulated on fewer cores) 4 threads for the fast probe's and
the L-BFGS probe's heads and extraction's features."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

from kit.files.paths import REPO_ROOT
from kit.numerics import blocked, numerics
from kit.numerics.threads import each_block, lent_threads, numerics_threads, one_thread
from kit.probes.rows import top_hits, topk_correct

X86 = platform.machine() in ("x86_64", "AMD64")


def test_blocks_are_fixed_by_the_shapes_on_multiples_of_the_alignment() -> None:
    for size, per_row in ((1024, 2048 * 100), (45_000, 2048 * 100), (10, 10), (5000, 3)):
        edges = blocked.bounds(size, per_row)
        assert edges[0] == 0 and edges[-1] == size and edges == sorted(set(edges))
        assert all(edge % blocked.ALIGN == 0 for edge in edges[:-1])
    rows, columns = blocked.tiles(512, 20_000, 10_240)  # an ImageNet grid's logits
    assert len(columns) > 2 and all(c % blocked.ALIGN == 0 for c in columns[:-1])
    assert rows[1] == blocked.ALIGN


def test_the_process_threads_are_lent_to_blocks_and_each_block_runs_on_one() -> None:
    """Inside numerics_threads the process's threads compute blocks side by side (a barrier
    two blocks must reach together), each block on one intra-op thread; one_thread lends
    nothing, and the process's setting is back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    seen: list[tuple[int, int]] = []
    barrier = threading.Barrier(2, timeout=60)

    def block(_: int) -> None:
        barrier.wait()
        seen.append((threading.get_ident(), torch.get_num_threads()))

    try:
        with numerics_threads():
            assert lent_threads() == 2 and torch.get_num_threads() == 1
            each_block(block, 4)
            with one_thread():  # nested: what was lent stays lent
                assert lent_threads() == 2
        assert torch.get_num_threads() == 2 and lent_threads() == 1
        assert len({ident for ident, _ in seen}) == 2 and {n for _, n in seen} == {1}
    finally:
        torch.set_num_threads(before)


def test_every_block_runs_and_the_first_blocks_error_is_raised() -> None:
    """On two lent threads (the calling one among them) every block runs even where some fail,
    and the error raised is that of the failing block with the lowest index."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    ran: list[int] = []

    def block(index: int) -> None:
        ran.append(index)
        if index in (3, 7):
            raise ValueError(f"block {index}")

    try:
        with numerics_threads(), pytest.raises(ValueError, match="block 3"):
            each_block(block, 10)
    finally:
        torch.set_num_threads(before)
    assert sorted(ran) == list(range(10))


def test_top_hits_counted_by_blocks_of_rows_are_the_uncut_counts() -> None:
    """Top-1 and top-5 hits counted by blocks of rows on one lent thread and on two equal the
    counts over the uncut logits, ties (logits rounded to a few values) included."""
    generator = torch.Generator().manual_seed(2)
    logits = (torch.randn(1500, 3, 60, generator=generator) * 2).round() / 2
    labels = torch.randint(0, 60, (1500,), generator=generator)
    assert len(blocked.logit_blocks(logits)) > 2
    uncut = torch.stack([topk_correct(logits, labels, k) for k in (1, 5)])
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with numerics_threads():
                assert torch.equal(top_hits(logits, labels), uncut)
    finally:
        torch.set_num_threads(before)


FORKED = """
import os, torch, kit
from kit.numerics.threads import each_block, numerics_threads
torch.set_num_threads(2)
done = []
with numerics_threads():
    each_block(done.append, 4)
if os.fork() == 0:
    with numerics_threads():
        each_block(done.append, 4)
    os._exit(0 if len(done) == 8 else 1)
raise SystemExit(os.waitstatus_to_exitcode(os.wait()[1]))
"""


@pytest.mark.environment
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_forked_child_computes_its_blocks_on_threads_of_its_own() -> None:
    """A child forked after its parent's blocks ran (a loader or a launch worker) has none of
    the parent's pool threads; its blocks still run rather than wait forever."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED],
        env=os.environ | {"PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.environment
def test_blocked_products_are_torchs_to_rounding_with_the_same_bits_on_one_thread_or_two() -> None:
    """The tiles of a product and of its gradients, on one lent thread and on two: the same
    bits (the tiles are fixed by the shapes), and torch's uncut values to within float rounding
    (the library differs, so the last bits may)."""
    generator = torch.Generator().manual_seed(0)
    before = torch.get_num_threads()
    try:
        for dtype, tolerance in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
            x = torch.randn(700, 1536, generator=generator, dtype=dtype)
            y = torch.randint(0, 200, (700,), generator=generator)
            head = torch.nn.Linear(1536, 200).to(dtype)
            weight = torch.randn(1536, 200, generator=generator, dtype=dtype, requires_grad=True)
            found = []
            for threads, mm, lin in (
                (1, torch.matmul, F.linear),
                (1, blocked.matmul, blocked.linear),
                (2, blocked.matmul, blocked.linear),
            ):
                torch.set_num_threads(threads)
                with numerics_threads():
                    F.cross_entropy(mm(x, weight), y).backward()
                    F.cross_entropy(lin(x, head.weight, head.bias), y).backward()
                found.append([t.clone() for t in (weight.grad, head.weight.grad, head.bias.grad)])
                weight.grad = None
                head.zero_grad()
            torchs, one, two = found
            assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
            for a, b in zip(torchs, one, strict=True):
                assert (a - b).abs().max() <= tolerance * a.abs().max()
    finally:
        torch.set_num_threads(before)


def test_a_blocked_log_softmax_has_the_uncut_bits_and_gradient_on_one_thread_or_two() -> None:
    """The fast probe's cross-entropy with its log-softmax cut into blocks of rows: the loss and
    the logits' gradient are those of torch's uncut F.cross_entropy bit for bit, on one lent
    thread and on two, for logits [B, H, C] of one head and of many (the loss is over C, a
    dimension other than the last once permuted, as the probes lay it out)."""
    generator = torch.Generator().manual_seed(1)
    before = torch.get_num_threads()
    try:
        for rows, heads, classes in ((1024, 1, 100), (1000, 5, 37), (700, 20, 10)):
            logits = torch.randn(rows, heads, classes, generator=generator, requires_grad=True)
            target = torch.randint(0, classes, (rows, 1), generator=generator).expand(-1, heads)
            assert len(blocked.logit_blocks(logits)) > 2
            found = []
            for threads, cut in ((1, False), (1, True), (2, True)):
                torch.set_num_threads(threads)
                with numerics_threads():
                    permuted = logits.permute(0, 2, 1)
                    loss = (
                        F.nll_loss(blocked.log_softmax(permuted, 1), target, reduction="none")
                        if cut
                        else F.cross_entropy(permuted, target, reduction="none")
                    )
                    loss.mean(0).sum().backward()
                assert logits.grad is not None
                found.append((loss.detach(), logits.grad))
                logits.grad = None
            uncut, one, two = found
            for a, b, c in zip(uncut, one, two, strict=True):
                assert torch.equal(a, b) and torch.equal(a, c)
    finally:
        torch.set_num_threads(before)


#: in a fresh process at the threads given: the fast probe's head and history, the L-BFGS
#: probe's head and history, and extraction's features, each as a hash of its bits, and how
#: many threads computed blocks
BITS = """
import hashlib, json, sys, threading
from pathlib import Path
import kit, torch
sys.path.insert(0, sys.argv[2])
from test_features import tiny_checkpoint
from kit import features
from kit.numerics import threads
from kit.probes import fast, lbfgs
from kit.probes.rows import Split
from kit.probes.settings import FastProbeSettings, LbfgsProbeSettings
from torch.utils.data import TensorDataset
torch.set_num_threads(int(sys.argv[1]))
workers = set()
run = threads._without_grad
def spy(work, index):
    workers.add(threading.get_ident())
    run(work, index)
threads._without_grad = spy
def digest(*tensors):
    return hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in tensors)).hexdigest()
def planted(n, d, classes, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return Split(x, (x @ torch.randn(d, classes, generator=g)).argmax(1), str(seed))
out, made = {}, []
class Recorded(fast.SpreadHeads):
    def __init__(self, *args):
        super().__init__(*args)
        made.append(self)
fast.SpreadHeads = Recorded
zero_head = lbfgs.zero_head
lbfgs.zero_head = lambda *args: made.append(zero_head(*args)) or made[-1]
train, held = planted(3000, 1024, 128, 0), planted(600, 1024, 128, 1)
settings = FastProbeSettings(lrs=[0.1], weight_decays=[1e-3, 1e-2], epochs=2, batch_size=512)
out["fast history"] = repr(fast.fast_probe(train, held, 128, settings, False).history.rows())
group = made[0].groups[0]
out["fast heads"] = digest(group.weight, group.bias)
train, held = planted(9000, 1024, 10, 2), planted(500, 1024, 10, 3)
result = lbfgs.lbfgs_probe(train, held, 10, LbfgsProbeSettings(weight_decays=[0.1]))
out["lbfgs history"] = repr(result.history.rows())
out["lbfgs head"] = digest(made[1].weight, made[1].bias)
folder = Path.cwd()
g = torch.Generator().manual_seed(4)
images = TensorDataset(torch.randn(600, 3, 16, 16, generator=g), torch.zeros(600).long())
extracted = features.extract(
    [tiny_checkpoint(folder, "net", 1)], images, "noise", "test", "none", folder / "cache",
    batch_size=600, progress=False,
)
out["features"] = hashlib.sha256(extracted.features.tobytes()).hexdigest()
out["block threads"] = len(workers)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_heads_and_features_have_the_same_bits_at_1_2_and_4_threads(tmp_path) -> None:
    """The default (reproducible) mode on 1, 2 and 4 threads, and 8 threads pinned to one core
    (taskset): the fast probe's heads and history, the L-BFGS probe's head and history and
    extraction's features are the same bits, while 2 and more threads computed the blocks.
    With the blocks on torch's own threads instead, the L-BFGS head differs."""
    runs = {}
    for name, threads, cores in (("1", 1, None), ("2", 2, None), ("4", 4, None), ("8@1", 8, "0")):
        folder = tmp_path / name.replace("@", "-on-")
        folder.mkdir()
        command = [sys.executable, "-c", BITS, str(threads), str(REPO_ROOT / "tests")]
        if cores is not None and X86:
            command = ["taskset", "-c", cores, *command]
        done = subprocess.run(
            command,
            cwd=folder,
            env=numerics.without_variables() | {"PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert runs["1"]["block threads"] == 1
    assert all(runs[name]["block threads"] >= 2 for name in ("2", "4"))
    for key in ("fast heads", "fast history", "lbfgs head", "lbfgs history", "features"):
        assert len({run[key] for run in runs.values()}) == 1, key


def test_extractions_features_are_the_same_bits_in_blocks_of_any_aligned_size(monkeypatch) -> None:
    """A folded cpu-profile network's features of a batch of 256 images of 24 px are the same bits
    in blocks of 16, 32, 64 and 112 images as in one call, so BLOCK_PIXELS is a matter of speed
    alone (kit.numerics.blocked: each image's result is its own)."""
    if not numerics.reproducible():
        pytest.skip("the reproducible numerics are off")
    from kit.models import build, fold_batch_norms

    torch.manual_seed(0)
    model = fold_batch_norms(build("resnet10", 10, 0.25, image_size=24).eval())
    model = model.to(memory_format=torch.channels_last)
    images = torch.randn(256, 3, 24, 24).contiguous(memory_format=torch.channels_last)
    with one_thread(), torch.no_grad():
        whole = model.features(images)
        for per in (16, 32, 64, 112):
            monkeypatch.setattr(blocked, "BLOCK_PIXELS", per * 24 * 24)
            assert blocked.bounds(256, 24 * 24, blocked.IMAGE_ALIGN, blocked.BLOCK_PIXELS)[1] == per
            assert torch.equal(blocked.images(model.features, images), whole), per


def test_a_small_product_is_one_openblas_call_in_the_reproducible_numerics() -> None:
    """Numerics 3: a product far under BLOCKED_WORK (the L-BFGS probes' 1,843 x 128 into 10) is
    OpenBLAS's, bit for bit, not torch's (MKL's COMPATIBLE branch gives other last bits), with
    the weight's gradient as OpenBLAS computes it too."""
    if not numerics.reproducible():
        pytest.skip("the reproducible numerics are off")
    from kit.numerics import openblas

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1843, 128, dtype=torch.float64, generator=generator)
    weight = torch.randn(10, 128, dtype=torch.float64, generator=generator, requires_grad=True)
    bias = torch.zeros(10, dtype=torch.float64, requires_grad=True)
    assert x.shape[0] * x.shape[1] * 10 < blocked.BLOCKED_WORK
    with one_thread():
        out = blocked.linear(x, weight, bias)
        grad = torch.randn(out.shape, dtype=torch.float64, generator=generator)
        out.backward(grad)
    expected = x.new_empty(1843, 10)
    openblas.gemm(x, weight.detach().t(), expected)
    expected_grad = x.new_empty(10, 128)
    openblas.gemm(grad.t(), x, expected_grad)
    assert torch.equal(out.detach(), expected)
    assert weight.grad is not None and torch.equal(weight.grad, expected_grad)
