"""`python -m kit check --numerics [--record]`: this CPU's numerics fingerprint, op by op, against
the fingerprints recorded on other CPUs (docs/data/cpus/).

A fingerprint is a SHA-256 (first 16 hex digits) of the bits each computation returns, under the
numerics the kit runs with (kit.numerics.numerics), on fixed seeded inputs. Two machines that give
the same hash for an operation computed it bit for bit alike; the first operation that differs
says where two machines' results part. The operations come in two groups:

- `basic`: single operations the kit's results rest on (matrix products, a convolution and its
  gradients through oneDNN and through ATen, batch norm, cross entropy, one step of the cpu
  profile's network, a float64 L-BFGS fit), with the names and inputs of the first records, so a
  machine recorded with only these still compares;
- `pipeline`: the main job's own stages at its shapes, each reading the previous one's output:
  the synthetic world's images, one training step in the memory format the trainer uses
  (channels-last), a short training run through the kit's trainer (schedule-free AdamW,
  BatchNorm recalibration, checkpoint), the features extraction reads from it (each batch norm
  folded into its convolution, as extraction does on the CPU), and the L-BFGS
  probe on them with the cpu profile's grid.

It takes well under a minute on one core. The hashes are compared, never the values: a fingerprint
says whether two machines agree, not by how much (docs/reproducibility.md has the measured moves).
"""

from __future__ import annotations

import hashlib
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from kit import models
from kit.data.synthetic import SyntheticWorld
from kit.experiments.timecat.settings import TimecatSettings
from kit.numerics import blocked, cpu_records, numerics
from kit.numerics.threads import numerics_threads, one_thread
from kit.params import params
from kit.probes import lbfgs
from kit.probes.rows import Split
from kit.probes.settings import LbfgsProbeSettings
from kit.readout.numbers import counted
from kit.runtime import provenance
from kit.train import backbones, trainer
from kit.train.run_files import RunFolder

#: the profile whose main job the pipeline group follows, and how far its short run trains
PROFILE, TRAIN_STEPS, ROWS = "cpu", 12, 256


def digest(tensor: torch.Tensor | np.ndarray) -> str:
    """The first 16 hex digits of the SHA-256 of a tensor's bits."""
    array = (
        tensor.detach().contiguous().cpu().numpy() if isinstance(tensor, torch.Tensor) else tensor
    )
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def digest_all(tensors: list[torch.Tensor]) -> str:
    """One digest of several tensors' digests, in order."""
    return hashlib.sha256(b"".join(bytes.fromhex(digest(t)) for t in tensors)).hexdigest()[:16]


def _randn(generator: torch.Generator) -> Callable[..., torch.Tensor]:
    return lambda *shape: torch.randn(*shape, generator=generator)


def basic() -> dict[str, str]:
    """The single operations, named and seeded as in the first recorded fingerprints."""
    generator = torch.Generator().manual_seed(0)
    r = _randn(generator)
    out = {}
    a, b = r(256, 512), r(512, 384)
    out["matmul f32 256x512x384"] = digest(a @ b)
    out["matmul f64 256x512x384"] = digest(a.double() @ b.double())
    x, w = r(16, 32, 24, 24).requires_grad_(), r(64, 32, 3, 3).requires_grad_()
    for onednn in (True, False):
        with torch.backends.mkldnn.flags(enabled=onednn):
            y = F.conv2d(x, w, padding=1)
            gx, gw = torch.autograd.grad(y.square().sum(), (x, w))
        tag = "onednn" if onednn else "aten"
        out[f"conv3x3 fwd {tag}"] = digest(y)
        out[f"conv3x3 grad input {tag}"] = digest(gx)
        out[f"conv3x3 grad weight {tag}"] = digest(gw)
    xb = r(64, 32, 12, 12).requires_grad_()
    yb = F.batch_norm(xb, None, None, training=True)
    out["batch_norm fwd"] = digest(yb)
    out["batch_norm grad"] = digest(torch.autograd.grad(yb.square().sum(), xb)[0])
    logits, targets = r(256, 100), torch.randint(0, 100, (256,), generator=generator)
    out["log_softmax + nll"] = digest(F.cross_entropy(logits, targets, reduction="none"))
    for onednn in (True, False):
        tag = "onednn" if onednn else "aten"
        loss, grads = _network_step(torch.contiguous_format, onednn)
        out[f"kit resnet10 w0.25 24px loss {tag}"] = loss
        out[f"kit resnet10 w0.25 24px grads {tag}"] = grads
    rows, labels = r(2048, 512).double(), torch.randint(0, 10, (2048,), generator=generator)
    head = torch.zeros(512, 10, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [head],
        max_iter=50,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-10,
        tolerance_change=1e-12,
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        value = F.cross_entropy(rows @ head, labels) + 1e-3 * head.square().sum()
        value.backward()
        return value

    optimizer.step(closure)
    out["L-BFGS f64 2048x512 10 classes 50 it"] = digest(head)
    return out


def _network_step(memory_format: torch.memory_format, onednn: bool = True) -> tuple[str, str]:
    """The loss and gradients of one step of the cpu profile's network (resnet10 at width 0.25,
    24 px, 32 images of seeded noise)."""
    torch.manual_seed(0)
    net = models.build("resnet10", 10, width=0.25, image_size=24).to(memory_format=memory_format)
    images = torch.randn(32, 3, 24, 24, generator=torch.Generator().manual_seed(1))
    with torch.backends.mkldnn.flags(enabled=onednn):
        loss = F.cross_entropy(net(images.to(memory_format=memory_format)), torch.arange(32) % 10)
        grads = torch.autograd.grad(loss, list(net.parameters()))
    return digest(loss), digest_all(list(grads))


def pipeline(folder: Path) -> dict[str, str]:
    """The main job's stages at its shapes, each from the previous one's output: the cpu
    profile's world, a channels-last step, a short run of its cat1 model through the trainer,
    the features of that run and an L-BFGS probe of them."""
    settings, _ = params.load("03_time_concat", PROFILE)
    assert isinstance(settings, TimecatSettings) and settings.train is not None
    data = settings.train.data
    assert data.synthetic is not None
    out = {}
    world = [
        SyntheticWorld(data.synthetic, settings.train.num_classes, data.image_size, split)
        for split in ("train", "eval")
    ]
    images = {split.split: torch.stack([split[i][0] for i in range(ROWS)]) for split in world}
    labels = {split.split: torch.tensor([split[i][1] for i in range(ROWS)]) for split in world}
    out[f"synthetic world {ROWS} train + {ROWS} eval images ({PROFILE} profile)"] = digest_all(
        [images[0], images[1]]
    )
    loss, grads = _network_step(torch.channels_last)
    out["kit resnet10 w0.25 24px loss channels_last onednn"] = loss
    out["kit resnet10 w0.25 24px grads channels_last onednn"] = grads
    run = settings.run_config(settings.variants[0], 0, str(folder / "run")).model_copy(
        update={"iterations": TRAIN_STEPS, "log_every": TRAIN_STEPS, "checkpoint_every": 0}
    )
    model = backbones.load_backbone(RunFolder(trainer.train(run)).checkpoint)
    out[f"trainer: {TRAIN_STEPS} steps of the {PROFILE} profile's first variant (weights)"] = (
        digest_all(list(model.state_dict().values()))
    )
    models.fold_batch_norms(model.eval()).to(memory_format=torch.channels_last)
    with torch.no_grad():
        extracted = {
            split: model.features(images[split].to(memory_format=torch.channels_last))
            for split in images
        }
    out[f"extraction: features of the {2 * ROWS} images (channels-last, batch norm folded)"] = (
        digest_all([extracted[0], extracted[1]])
    )
    probe = lbfgs.lbfgs_probe(
        Split(extracted[0], labels[0], "train"),
        Split(extracted[1], labels[1], "eval"),
        settings.train.num_classes,
        LbfgsProbeSettings(weight_decays=[1e-2, 1.0], heldout_fraction=0.1),
    )
    out["L-BFGS probe of those features (2 weight decays)"] = digest(
        probe.history.select("train_top1", "heldout_top1", "eval_top1").to_numpy()
    )
    out.update(_large_product())
    return out


def _large_product() -> dict[str, str]:
    """A product as large as the fast probe's on ImageNet-sized features (1,024 rows of 2,048
    features into 100 classes) and its weight's gradient, cut into tiles (kit.numerics.blocked)."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(1024, 2048, generator=generator)
    weight = torch.randn(2048, 100, generator=generator, requires_grad=True)
    with numerics_threads():
        product = blocked.matmul(rows, weight)
        product.square().sum().backward()
    assert weight.grad is not None
    return {
        "large product 1024x2048 @ 2048x100 and its gradient (blocked)": digest_all(
            [product.detach(), weight.grad]
        )
    }


def fingerprint() -> dict[str, Any]:
    """This machine's fingerprint record: the CPU, what the numerics were, and every hash."""
    numerics.apply()
    with one_thread(), tempfile.TemporaryDirectory(prefix="kit-fingerprint-") as folder:
        ops = {"basic": basic(), "pipeline": pipeline(Path(folder))}
    return {
        **cpu_records.identity(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "kit_commit": provenance.commit(),
        "numerics": numerics.VERSION,
        "in_effect": {k: v for k, v in numerics.in_effect()["variables"].items()},
        "ops": ops,
    }


def compare(mine: dict[str, Any], recorded: list[dict[str, Any]]) -> list[list[str]]:
    """One row per operation: its name, then for each recorded CPU `same`, `differs` or `not
    recorded` against this machine's hash."""
    rows = []
    for group, ops in mine["ops"].items():
        for name, value in ops.items():
            cells = []
            for record in recorded:
                theirs = record["ops"].get(group, {}).get(name)
                cells.append(
                    "not recorded" if theirs is None else "same" if theirs == value else "differs"
                )
            rows.append([f"{group}: {name}", *cells])
    return rows


def command(record: bool) -> int:
    """Print this CPU's fingerprint against every recorded CPU's; with `record`, keep it as this
    CPU model's record in docs/data/cpus/. Exit 1 when an operation differs from the record of
    this very CPU model under the same numerics version (the kit's numerics would then depend on
    something beyond the CPU model)."""
    mine = fingerprint()
    recorded = cpu_records.fingerprints()
    print(f"this CPU: {cpu_records.describe(mine)}; {numerics.describe()}")
    header = [
        "operation",
        *(f"{cpu_records.describe(r)}, numerics v{cpu_records.version(r)}" for r in recorded),
    ]
    rows = compare(mine, recorded)
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(row))
    for column, theirs in enumerate(recorded, start=1):
        differ = [row[0] for row in rows if row[column] == "differs"]
        print(
            f"against {header[column]} (kit {theirs['kit_commit'][:7]}): "
            + (
                f"differing: {counted(len(differ), 'operation')}, the first: {differ[0]}"
                if differ
                else "no recorded operation differs"
            )
        )
    if record:
        print(f"recorded in {cpu_records.write_fingerprint(mine)}")
        return 0
    own = [
        column
        for column, theirs in enumerate(recorded, start=1)
        if theirs["cpu_id"] == mine["cpu_id"] and cpu_records.version(theirs) == numerics.VERSION
    ]
    if own and any(row[own[0]] == "differs" for row in rows):
        print(f"error: this CPU model's own record differs ({header[own[0]]})")
        return 1
    return 0
