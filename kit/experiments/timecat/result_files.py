"""The result files notebooks 03 and 04 write into their output folder, named in one place: the
notebooks and the probe step write them, and notebook 03 (reading notebook 04's summary), the
sweep, the command line's figures and the tests read them by these names. The report finds the
tables among them by their endings (kit.report.page), so a new one keeps the
`<notebook's prefix>_<what>` form."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimeConcatFiles:
    """Notebook 03's result files."""

    #: every probe's accuracy (the notebook writes it, or a job's probe step: timecat.jobs)
    results: str = "time_concat_results.parquet"
    #: RankMe, alpha-ReQ and CKA of each representation
    diagnostics: str = "time_concat_diagnostics.parquet"
    #: every run's training curve
    training: str = "time_concat_training.parquet"
    #: every variant on every task, in the layout of the paper's Table 3
    table3: str = "time_concat_table3.parquet"
    vs_paper: str = "time_concat_vs_paper.parquet"
    verdicts: str = "time_concat_verdicts.parquet"
    gains: str = "time_concat_gains.parquet"
    summary: str = "time_concat_summary.json"


@dataclass(frozen=True)
class SweepFiles:
    """Notebook 04's result files (kit.experiments.timecat.sweep.run writes the tables)."""

    results: str = "sweep_results.parquet"
    #: each model's accuracy on its own data's evaluation split
    own_accuracy: str = "sweep_own_accuracy.parquet"
    verdicts: str = "sweep_verdicts.parquet"
    vs_paper: str = "sweep_vs_paper.parquet"
    summary: str = "sweep_summary.json"


TIME_CONCAT = TimeConcatFiles()
SWEEP = SweepFiles()
