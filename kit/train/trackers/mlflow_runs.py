"""MLflow: one MLflow run per training run, in a store inside the run folder or the one
MLFLOW_TRACKING_URI names.

The store is SQLite (`<run folder>/mlflow.db`): MLflow 3 refuses its plain-file store
(`file:`) unless MLFLOW_ALLOW_FILE_STORE opts back into a backend it keeps in maintenance
mode, and SQLite needs only SQLAlchemy and Alembic beside mlflow-skinny, where the full
`mlflow` package adds a server, pandas and scikit-learn.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kit.train.trackers.base import Log, Tracker

#: the store MLflow's own clients use when set (a server, or a database the runs share)
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
#: the store in a run folder when MLFLOW_TRACKING_URI is not set
STORE = "mlflow.db"
#: the MLflow experiment the kit's runs are logged in
EXPERIMENT = "timecat-kit"
#: the tag that finds a run folder's MLflow run again when it resumes
FOLDER_TAG = "kit.run_folder"


def store_uri(out: Path) -> str:
    """Where the run in `out` logs: MLFLOW_TRACKING_URI, else the SQLite file in its folder."""
    return os.environ.get(TRACKING_URI_ENV) or f"sqlite:///{out / STORE}"


class MLflow(Tracker):
    """Metrics of an MLflow run named after its run folder (tagged with its path), in the
    experiment `timecat-kit`. A resumed run continues the same MLflow run; MLflow keeps every
    value a step was logged with, so the steps a killed run logged after its checkpoint show
    twice (the second is the one metrics.jsonl keeps)."""

    name = "mlflow"
    modules = ("mlflow", "sqlalchemy", "alembic")
    extra = "mlflow"
    requirements = "mlflow-skinny sqlalchemy alembic"

    def follow(self, folder: Path, *, one_run: bool) -> str:
        command = "mlflow ui --backend-store-uri"  # the full `mlflow` package serves the UI
        if one_run or os.environ.get(TRACKING_URI_ENV):
            return f"{command} {store_uri(folder)}"
        return (
            f"{command} sqlite:///{folder}/<run>/{STORE} (a store in each run folder; set "
            f"{TRACKING_URI_ENV} before starting, as sqlite:////path/to/{STORE}, to gather them)"
        )

    @contextlib.contextmanager
    def logging(self, out: Path, step: int) -> Iterator[Log]:
        from mlflow.entities import Metric  # imports mlflow: only when asked
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=store_uri(out))
        found = client.get_experiment_by_name(EXPERIMENT)
        experiment = found.experiment_id if found else client.create_experiment(EXPERIMENT)
        run_id = _run_of(client, experiment, out)
        if run_id is None:
            run_id = client.create_run(
                experiment, run_name=out.name, tags={FOLDER_TAG: str(out)}
            ).info.run_id
        else:
            client.update_run(run_id, status="RUNNING")

        def log(record: dict[str, Any]) -> None:
            now = int(time.time() * 1000)
            client.log_batch(
                run_id,
                metrics=[
                    Metric(key, float(value), now, record["step"])
                    for key, value in record.items()
                    if key != "step" and value is not None
                ],
            )

        status = "KILLED"
        try:
            yield log
            status = "FINISHED"
        finally:
            client.set_terminated(run_id, status)


def _run_of(client: Any, experiment: str, out: Path) -> str | None:
    """The MLflow run a previous start of the run in `out` logged to, if any."""
    token = None
    while True:
        page = client.search_runs([experiment], max_results=1000, page_token=token)
        for run in page:
            if run.data.tags.get(FOLDER_TAG) == str(out):
                return run.info.run_id
        token = page.token
        if not token:
            return None
