"""The authors' probe as a step of its own: in this process or under torchrun, resumable.

    python -m kit.probes.faithful --checkpoints a.pt b.pt --data data.yaml --num-classes N \\
        --output DIR

runs the probe of `kit.probes.faithful_training` on a dataset, one process per device under
torchrun, and writes `history.csv`, `selected.csv` and `finished.json` to DIR; a finished probe
is read back, not run again, and an interrupted one resumes from `DIR/probe_state.pt`.
`python -m kit.probes.faithful --jobs probes.json` runs several probes in turn, each given by an
argument list of that JSON list, in one process group: a notebook's probes of the same process
count start their processes once (`kit.probes.faithful_launch`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import torch
import torch.distributed as dist
from pydantic import ValidationError
from torch.utils.data import DataLoader, Dataset

from kit.data import kinds, pipeline
from kit.data import workers as worker_start
from kit.data.kinds.base import split_size
from kit.data.settings import DataSettings
from kit.files import locks
from kit.files.files import atomic_write, file_hash
from kit.numerics.threads import numerics_threads
from kit.params.param_errors import describe_errors
from kit.params.params import ParameterError, read_yaml
from kit.probes.faithful_training import GlobalBatches, faithful_probe
from kit.probes.rows import ProbeError, heldout_indices
from kit.probes.selection import ProbeResult
from kit.probes.settings import PAPER_WEIGHT_DECAYS, FaithfulProbeSettings
from kit.runtime import distributed
from kit.runtime.distributed import Process, start_process
from kit.train.backbones import load_backbone
from kit.train.command import exit_code

#: written last by a finished probe: its identity and epochs, so a rerun skips it
FINISHED = "finished.json"
#: the settings that make two probes the same, beside checkpoints, data and weight decays;
#: epochs, device, processes and workers are left out, so more epochs extend a finished probe
IDENTITY = (
    "milestones",
    "lr",
    "momentum",
    "batch_size",
    "bn_batch",
    "heldout_fraction",
    "seed",
    "precision",
)
#: settings the command line takes as --name value, beside the weight decays and milestones
OPTIONS = (
    "epochs",
    "batch_size",
    "lr",
    "momentum",
    "heldout_fraction",
    "seed",
    "group_timeout_s",
    "loader_timeout_s",
)


def load_data_config(path: Path) -> DataSettings:
    """A dataset description (a `data:` section of a training configuration) from YAML."""
    if not path.is_file():
        raise ParameterError(f"{path}: dataset description not found")
    try:
        return DataSettings(**read_yaml(path))
    except ValidationError as error:
        raise ParameterError(
            describe_errors(
                f"invalid dataset description {path}:", DataSettings, error, {}, str(path)
            )
        ) from None


def faithful_identity(
    checkpoints: Sequence[Path],
    data_config: DataSettings,
    num_classes: int,
    settings: FaithfulProbeSettings,
    weight_decays: Sequence[float],
) -> dict[str, Any]:
    """What makes two probes the same (their checkpoints by content): a saved state or a
    finished result is reused only for the same identity."""
    return json.loads(
        json.dumps(
            {
                "checkpoints": [file_hash(Path(p)) for p in checkpoints],
                "num_classes": num_classes,
                "data": data_config.model_dump(mode="json"),
                "weight_decays": list(weight_decays),
                **{key: getattr(settings, key) for key in IDENTITY},
            }
        )
    )


def finished_result(output: Path, identity: Mapping[str, Any], epochs: int) -> ProbeResult | None:
    """The result a previous run of this very probe wrote to `output`, or None."""
    record = Path(output) / FINISHED
    if not record.is_file():
        return None
    done = json.loads(record.read_text())
    if done.get("identity") != dict(identity) or done.get("epochs") != epochs:
        return None
    history = pl.read_csv(Path(output) / "history.csv")
    selected = pl.read_csv(Path(output) / "selected.csv", schema_overrides={"top5": pl.Float64})
    return ProbeResult(history, selected)


def _loaders(
    data_config: DataSettings, num_classes: int, settings: FaithfulProbeSettings
) -> tuple[DataLoader, DataLoader, DataLoader]:
    """This process's training (augmented), held-out and evaluation loaders (evaluation
    transforms); the held-out images are a seeded part of the training split."""
    train_base, eval_base = pipeline.datasets_for(data_config, num_classes)
    from_images = kinds.get(data_config.kind).reads_disk
    augment = pipeline.resolved_augment(data_config)
    augmented = pipeline.augmentation(augment, data_config.image_size, True, from_images)
    plain = pipeline.augmentation(augment, data_config.image_size, False, from_images)
    kept, held = heldout_indices(split_size(train_base), settings.heldout_fraction, settings.seed)
    rank, world = distributed.rank_and_world()
    workers, pin = settings.workers, torch.device(settings.device).type == "cuda"

    def loader(dataset: Dataset, **how: Any) -> DataLoader:
        return DataLoader(
            dataset,
            num_workers=workers,
            pin_memory=pin,
            persistent_workers=workers > 0,
            multiprocessing_context=worker_start.context() if workers else None,
            timeout=settings.loader_timeout_s if workers else 0,
            **how,
        )

    local = settings.batch_size // world
    if settings.bn_batch is not None and (settings.batch_size % world or local % settings.bn_batch):
        raise ProbeError(
            f"the global batch {settings.batch_size} over {world} process(es) must "
            f"give each a multiple of bn_batch {settings.bn_batch}"
        )
    return (
        loader(
            pipeline.Samples(train_base, augmented, settings.seed),
            batch_sampler=GlobalBatches(kept, settings.batch_size, settings.seed),
        ),
        loader(
            pipeline.Samples(train_base, plain, settings.seed),
            batch_size=local,
            sampler=[(0, int(i)) for i in held[rank::world]],
        ),
        loader(
            pipeline.Samples(eval_base, plain, settings.seed),
            batch_size=local,
            sampler=[(0, i) for i in range(rank, split_size(eval_base), world)],
        ),
    )


def run_faithful(
    checkpoints: Sequence[Path],
    data_config: DataSettings,
    num_classes: int,
    output: Path,
    settings: FaithfulProbeSettings,
    weight_decays: Sequence[float],
    progress: bool = True,
) -> ProbeResult:
    """The authors' probe of the concatenated backbones on a dataset, one head per weight
    decay: augmented training images (the kit's pipeline for the dataset kind), held-out part
    of train and evaluation split with evaluation transforms. Writes `history.csv`,
    `selected.csv` and `finished.json` to `output`; a finished probe is read back, not run
    again, an interrupted one resumes from `output/probe_state.pt`; each process of a torchrun
    reads its shard."""
    missing = [str(p) for p in checkpoints if not Path(p).is_file()]
    if not checkpoints or missing:
        raise ProbeError(
            f"checkpoints not found: {', '.join(missing)}" if missing else "no checkpoints given"
        )
    output = Path(output)
    identity = faithful_identity(checkpoints, data_config, num_classes, settings, weight_decays)
    finished = finished_result(output, identity, settings.epochs)
    if finished is not None:
        return finished
    backbones = [load_backbone(Path(p)) for p in checkpoints]
    train_loader, held_loader, eval_loader = _loaders(data_config, num_classes, settings)
    main_process = distributed.rank_and_world()[0] == 0
    waited = worker_start.loader_failures(
        lambda error: (
            f"{output}: the faithful probe of {', '.join(map(str, checkpoints))}: {error} "
            f"(faithful.loader_timeout_s: {settings.loader_timeout_s}): a loader worker is stuck "
            "or died. Its finished epochs are kept; run it again to resume"
        )
    )
    with (
        locks.hold(output, "faithful probe") if main_process else contextlib.nullcontext(),
        waited,
        numerics_threads(torch.device(settings.device).type == "cpu"),
    ):
        result = faithful_probe(
            backbones,
            train_loader,
            held_loader,
            eval_loader,
            num_classes,
            settings,
            weight_decays,
            progress,
            output / "probe_state.pt",
            identity,
        )
        if main_process:
            for name, table in (("history", result.history), ("selected", result.selected)):
                with atomic_write(output / f"{name}.csv") as handle:
                    table.write_csv(handle)
            with atomic_write(output / FINISHED) as handle:
                handle.write(
                    json.dumps({"identity": identity, "epochs": settings.epochs}, indent=1).encode()
                )
    return result


def _default(name: str) -> Any:
    return FaithfulProbeSettings.model_fields[name].get_default(call_default_factory=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kit.probes.faithful",
        description="The authors' probe as a step of its own (run it under torchrun for "
        "several processes).",
        epilog="--jobs FILE alone instead: run in turn the probes of FILE, a JSON list of "
        "argument lists.",
    )
    parser.add_argument(
        "--checkpoints",
        type=Path,
        nargs="+",
        required=True,
        help="backbones (kit or AlgoPerf checkpoints), concatenated in order",
    )
    parser.add_argument(
        "--data",
        type=Path,
        required=True,
        help="YAML dataset description: kind, root, image_size (a data: section)",
    )
    parser.add_argument("--num-classes", type=int, required=True)
    parser.add_argument(
        "--output",
        type=Path,
        required=True,
        help="folder for history.csv, selected.csv and the resumable state",
    )
    parser.add_argument(
        "--grid",
        choices=sorted(PAPER_WEIGHT_DECAYS),
        help="the authors' weight-decay grid (default: by the data kind)",
    )
    parser.add_argument(
        "--weight-decays", type=float, nargs="+", help="a grid of your own instead of the authors'"
    )
    for name in OPTIONS:
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=type(_default(name)), default=_default(name)
        )
    parser.add_argument(
        "--milestones",
        type=int,
        nargs="*",
        default=_default("milestones"),
        help="epochs after which the learning rate is multiplied by 0.1",
    )
    parser.add_argument(
        "--bn-batch",
        type=int,
        default=_default("bn_batch"),
        help="rows per BN statistics group, as the authors' per-GPU batch "
        "(0: the whole global batch)",
    )
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16 runs the frozen backbones under autocast",
    )
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers per process")
    return parser


def _settings(args: argparse.Namespace, process: Process) -> FaithfulProbeSettings:
    """The command line's settings for this process, its world size the processes."""
    try:
        return FaithfulProbeSettings(
            **{name: getattr(args, name) for name in OPTIONS},
            milestones=list(args.milestones),
            bn_batch=args.bn_batch or None,
            processes=process.world_size,
            workers=args.workers,
            precision=args.precision,
            device=str(process.device),
        )
    except ValidationError as error:
        raise ParameterError(
            describe_errors(
                "invalid faithful probe settings:",
                FaithfulProbeSettings,
                error,
                {},
                "the command line",
            )
        ) from None


def _requested(argv: list[str]) -> list[argparse.Namespace]:
    """The probes a command line asks for: its options, or with `--jobs FILE` each argument
    list of that JSON file (as `faithful_launch.launch_faithful_all` writes it)."""
    if argv[:1] != ["--jobs"]:
        return [_parser().parse_args(argv)]
    listing = Path(argv[1]) if len(argv) == 2 else None
    try:
        lists = json.loads(listing.read_text()) if listing else None
    except (OSError, ValueError) as error:
        raise ParameterError(f"{listing}: not a readable list of probes ({error})") from None
    if not lists or not all(isinstance(item, list) for item in lists):
        raise ParameterError(
            f"--jobs: {listing or ' '.join(argv[1:])} must be one JSON file "
            "holding a non-empty list of argument lists"
        )
    return [_parser().parse_args([str(item) for item in arguments]) for arguments in lists]


def main(argv: list[str] | None = None) -> int:
    """Run the probes the command line describes, in turn in one process group; 2 (and a
    message) for bad input, found in every probe's dataset description before any starts."""
    arguments = sys.argv[1:] if argv is None else argv

    def run() -> None:
        probes = [(args, load_data_config(args.data)) for args in _requested(arguments)]
        if len({args.device for args, _ in probes}) > 1:
            raise ParameterError("--jobs: probes run in turn in one process share its device")
        process = start_process(
            probes[0][0].device, max(args.group_timeout_s for args, _ in probes)
        )
        try:
            for index, (args, data_config) in enumerate(probes, 1):
                if process.main:  # which probe the log's lines below belong to
                    print(f"probe {index}/{len(probes)}: {args.output}", flush=True)
                grid = (
                    list(args.weight_decays)
                    if args.weight_decays
                    else list(
                        PAPER_WEIGHT_DECAYS[args.grid or kinds.get(data_config.kind).probe_grid]
                    )
                )
                result = run_faithful(
                    args.checkpoints,
                    data_config,
                    args.num_classes,
                    args.output,
                    _settings(args, process),
                    grid,
                    progress=True,
                )
                if process.main:
                    print(result.selected)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    try:
        return exit_code(run)
    except ProbeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
