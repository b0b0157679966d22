"""Writes the figure of sample images of the synthetic world that docs/world.md shows: the
chart notebook 03 displays (kit.experiments.timecat.figures.world_samples) for a profile's world,
one row per pretraining component and per synthetic probe task, one column per class.

    .venv/bin/python benchmarks/world_samples.py --profile cpu docs/images/world_samples.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kit.experiments.timecat import figures
from kit.params import params
from kit.report import charts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="the image to write (.png or .svg)")
    parser.add_argument("--profile", default="cpu", help="whose notebook 03 world (default cpu)")
    args = parser.parse_args()
    settings, _ = params.load("03_time_concat", args.profile)
    if settings.train is None or settings.train.data.synthetic is None:
        raise SystemExit(f"profile {args.profile}: notebook 03 pretrains on no synthetic world")
    fmt = args.path.suffix.removeprefix(".")
    if fmt not in ("png", "svg"):
        raise SystemExit(f"{args.path}: give a .png or .svg file")
    (written,) = charts.save_chart(
        figures.world_samples(settings), args.path.parent, args.path.stem, [fmt]
    )
    print(f"wrote {written}")


if __name__ == "__main__":
    main()
