"""Images/s of the kit trainer's step against a bare PyTorch loop on the same model and input.

Both train the same network (same initialisation, memory format, precision, schedule-free AdamW
settings and label-smoothed loss) on one fixed device-resident batch, so the ratio measures what
the kit adds to a step (on-device loss and NaN bookkeeping, its synchronisation every
`--log-every` steps), not data loading. Repeats alternate between the two and the medians are
compared. The bar for the CPU profile is a ratio of at least 0.97.

    .venv/bin/python benchmarks/train_throughput.py                      # resnet18, 32 px, CPU
    .venv/bin/python benchmarks/train_throughput.py --arch resnet50 --image-size 224 --batch 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import schedulefree
import torch
from torch import nn

from kit import models
from kit.runtime import distributed
from kit.train.settings import TrainSettings
from kit.train.step import Replica, warmup_steps


def kit_config(args: argparse.Namespace) -> TrainSettings:
    return TrainSettings(
        model=args.arch,
        width=args.width,
        num_classes=args.classes,
        seed=0,
        data={
            "kind": "synthetic",
            "image_size": args.image_size,
            "synthetic": {
                "num_train": 1,
                "num_eval": 1,
                "components": [{"weight": 1.0, "cues": ["colour"]}],
            },
        },
        batch_size=args.batch,
        iterations=10**6,
        output_dir="unused",
        device=args.device,
        precision=args.precision,
        channels_last=not args.no_channels_last,
        compile=args.compile,
        log_every=args.log_every,
    )


class BareLoop:
    """The textbook loop: zero_grad, forward, loss, backward, step."""

    def __init__(
        self, cfg: TrainSettings, device: torch.device, autocast_dtype: torch.dtype | None
    ) -> None:
        torch.manual_seed(cfg.seed)
        memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.model = models.build(
            cfg.model, cfg.num_classes, cfg.width, cfg.stem, cfg.data.image_size
        ).to(device, memory_format=memory_format)
        self.forward = torch.compile(self.model) if cfg.compile else self.model
        self.optimizer = schedulefree.AdamWScheduleFree(
            self.model.parameters(),
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            warmup_steps=warmup_steps(cfg),
            r=cfg.r,
            weight_lr_power=cfg.weight_lr_power,
        )
        self.criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        self.device, self.autocast_dtype = device, autocast_dtype
        self.model.train()
        self.optimizer.train()

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(
            self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None
        ):
            loss = self.criterion(self.forward(images), labels)
        loss.backward()
        self.optimizer.step()


def images_per_second(
    step, images: torch.Tensor, labels: torch.Tensor, steps: int, finish
) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step(images, labels)
    finish()
    return steps * images.shape[0] / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--log-every",
        type=int,
        default=10,
        help="the kit's loss read-out interval (one host sync each)",
    )
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    parser.add_argument("--no-channels-last", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = kit_config(args)
    process = distributed.start_process(cfg.device)
    kit = Replica(settings=cfg, process=process)
    bare = BareLoop(cfg, process.device, kit.autocast_dtype)
    pixels = torch.randint(
        0, 256, (args.batch, 3, args.image_size, args.image_size), dtype=torch.uint8
    )
    ((images, labels),) = kit.on_device([(pixels, torch.randint(0, args.classes, (args.batch,)))])
    synchronize = torch.cuda.synchronize if process.device.type == "cuda" else (lambda: None)
    kit_steps_since_read = 0

    def kit_step(x: torch.Tensor, y: torch.Tensor) -> None:
        nonlocal kit_steps_since_read
        kit.step(x, y)
        kit_steps_since_read += 1
        if kit_steps_since_read == cfg.log_every:  # what the run loop does at a log point
            kit.take_window(kit_steps_since_read)
            kit_steps_since_read = 0

    for step in (kit_step, bare.step):
        images_per_second(step, images, labels, args.warmup, synchronize)
    kit_rates, bare_rates = [], []
    for repeat in range(args.repeats):
        pairs = [(kit_step, kit_rates), (bare.step, bare_rates)]
        for step, rates in pairs if repeat % 2 == 0 else pairs[::-1]:
            rates.append(images_per_second(step, images, labels, args.steps, synchronize))
    kit_median, bare_median = statistics.median(kit_rates), statistics.median(bare_rates)
    print(
        f"device {process.device}, threads {torch.get_num_threads()}, {args.arch} width "
        f"{args.width}, {args.image_size} px, batch {args.batch}, precision "
        f"{'bf16' if kit.autocast_dtype else 'fp32'}, channels_last {cfg.channels_last}, "
        f"compile {cfg.compile}; {args.repeats} repeats x {args.steps} steps"
    )
    print(
        f"kit trainer: {kit_median:8.1f} img/s  (repeats: "
        f"{', '.join(f'{r:.0f}' for r in kit_rates)})"
    )
    print(
        f"bare loop:   {bare_median:8.1f} img/s  (repeats: "
        f"{', '.join(f'{r:.0f}' for r in bare_rates)})"
    )
    print(f"ratio kit/bare: {kit_median / bare_median:.3f}")


if __name__ == "__main__":
    main()
