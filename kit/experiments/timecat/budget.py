"""A budget split n ways: n runs sharing a total, each in a folder named by n and its seed.

`python -m kit launch run --config base.yaml --runs 4 --total 400000 --seeds 2 550 23 477`
trains such runs with a launch backend. Folder names depend only on n and the seed, and each run
resumes or skips itself, so repeating the same command continues the runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.params.params import ParameterError
from kit.train.settings import TrainSettings


@dataclass(frozen=True)
class PlannedRun:
    """One model of a concatenation: its seed, budget and output folder."""

    seed: int
    iterations: int
    output_dir: Path


def split(
    runs: int,
    seeds: list[int],
    root: str | Path,
    total: int | None = None,
    iterations: int | None = None,
) -> list[PlannedRun]:
    """n runs of total/n iterations (total must divide), or of explicit `iterations` each (the
    paper's 200k/100k/80k), which then must fit in the total when one is given."""
    if runs < 1:
        raise ParameterError(f"runs: {runs} must be at least 1")
    if iterations is None:
        if total is None:
            raise ParameterError("give the total budget or the iterations per run")
        if total % runs:
            raise ParameterError(
                f"total: {total} iterations do not split into {runs} equal runs; "
                "give iterations per run explicitly"
            )
        iterations = total // runs
    elif total is not None and iterations * runs > total:
        raise ParameterError(f"iterations: {runs} runs of {iterations} exceed the total {total}")
    if len(set(seeds)) != len(seeds) or len(seeds) < runs:
        raise ParameterError(f"seeds: need {runs} distinct seeds, got {seeds}")
    return [
        PlannedRun(seed, iterations, Path(root) / f"cat{runs}" / f"seed{seed}")
        for seed in seeds[:runs]
    ]


def configure(planned: PlannedRun, base: TrainSettings) -> TrainSettings:
    """The base configuration with the run's seed, budget and folder (validated again)."""
    return TrainSettings(
        **(
            base.model_dump()
            | {
                "seed": planned.seed,
                "iterations": planned.iterations,
                "output_dir": str(planned.output_dir),
            }
        )
    )
