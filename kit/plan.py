"""Time-concat plans: n runs sharing a total budget, each in a folder named by n and its seed.

`python -m kit.plan --config base.yaml --runs 4 --total 400000 --seeds 2 550 23 477` trains the
runs one after another (under torchrun too). Folder names depend only on n and the seed, and
each run resumes or skips itself, so restarting the same command continues the plan.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from kit import train
from kit.config import TrainConfig, load_train_config
from kit.params import ParameterError


@dataclass(frozen=True)
class PlannedRun:
    """One model of a concatenation: its seed, budget and output folder."""

    seed: int
    iterations: int
    output_dir: Path


def time_concat(runs: int, seeds: list[int], root: str | Path, total: int | None = None,
                iterations: int | None = None) -> list[PlannedRun]:
    """n runs of total/n iterations (total must divide), or of explicit `iterations` each (the
    paper's 200k/100k/80k), which then must fit in the total when one is given."""
    if runs < 1:
        raise ParameterError(f"runs: {runs} must be at least 1")
    if iterations is None:
        if total is None:
            raise ParameterError("give the total budget or the iterations per run")
        if total % runs:
            raise ParameterError(f"total: {total} iterations do not split into {runs} equal runs; "
                                 "give iterations per run explicitly")
        iterations = total // runs
    elif total is not None and iterations * runs > total:
        raise ParameterError(f"iterations: {runs} runs of {iterations} exceed the total {total}")
    if len(set(seeds)) != len(seeds) or len(seeds) < runs:
        raise ParameterError(f"seeds: need {runs} distinct seeds, got {seeds}")
    return [PlannedRun(seed, iterations, Path(root) / f"cat{runs}" / f"seed{seed}")
            for seed in seeds[:runs]]


def configure(planned: PlannedRun, base: TrainConfig) -> TrainConfig:
    """The base configuration with the run's seed, budget and folder (validated again)."""
    return TrainConfig(**(base.model_dump() | {"seed": planned.seed,
                                               "iterations": planned.iterations,
                                               "output_dir": str(planned.output_dir)}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.plan", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the base run's YAML file")
    parser.add_argument("--runs", type=int, required=True, help="n, the number of models")
    parser.add_argument("--total", type=int, help="total budget in iterations")
    parser.add_argument("--iterations", type=int, help="iterations per run (instead of total/n)")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--root", help="folder holding cat<n>/seed<s> (default: output_dir)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args(argv)

    def run_plan() -> None:
        base = load_train_config(args.config, args.overrides)
        for planned in time_concat(args.runs, args.seeds, args.root or base.output_dir,
                                   args.total, args.iterations):
            train.train(configure(planned, base))

    return train.exit_code(run_plan)


if __name__ == "__main__":
    sys.exit(main())
