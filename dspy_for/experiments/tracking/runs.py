"""The tracking store's own calls: MLflow's runs, params, metrics, tags, artifacts and dataset inputs, made where the
store is served — in the run's process, or in the command line's tracking process (:mod:`.writer`), which imports
MLflow and opens its store beside the command's own start-up.

Everything here takes and returns plain data (ids, names, dicts of strings, paths, a plot's
:class:`~dspy_for.experiments.reports.sketch.Sketch`), already masked by its caller (:mod:`.store`, the one face the
rest of the package uses), and imports nothing of ``dspy_for`` beyond the ground floor and those sketches: the
tracking process never loads DSPy or litellm to serve it. It draws the plots (:func:`log_figure`), so the command's
own process never loads matplotlib.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from dspy_for.compat import mlflow as compat
from dspy_for.compat.mlflow_schema import seed_sqlite_store
from dspy_for.experiments.reports import sketch
from dspy_for.experiments.reports.sketch import Sketch

__all__ = [
    "PROCESS_TAG",
    "client",
    "end_run",
    "end_stale_runs",
    "experiment_id",
    "log_artifact",
    "log_dataset_input",
    "log_figure",
    "log_metrics",
    "log_params",
    "log_text",
    "open_store",
    "process_tag",
    "set_tags",
    "start_run",
    "use_store",
]

#: the tag naming the process a run runs in: ``<host>:<pid>:<the process's start time>`` (a pid used again by another
#: process has another start time)
PROCESS_TAG = "dspy_for.process"
logger = logging.getLogger("dspy_for.tracking")


def open_store(uri: str, experiment: str, root: str, artifact_root: str | None) -> None:
    """Create the store at ``uri`` when new (tables, the experiment ``experiment`` with ``artifact_root``) under a file
    lock in ``root``, and make it and the experiment MLflow's current ones in this process."""
    import mlflow

    with FileLock(str(Path(root) / ".dspy_for_store.lock")):
        if uri.startswith("sqlite:///"):
            db = Path(uri[len("sqlite:///") :].split("?", 1)[0])
            seed_sqlite_store(db)  # a new store: MLflow's empty schema copied, not its migrations run again
            _write_ahead_log(db)
        mlflow.set_tracking_uri(uri)
        found = mlflow.get_experiment_by_name(experiment)
        if found is not None:
            exp_id = found.experiment_id
        else:
            exp_id = mlflow.create_experiment(experiment, artifact_location=artifact_root)
    mlflow.set_experiment(experiment_id=exp_id)


def use_store(uri: str, experiment: str) -> None:
    """Make the store at ``uri`` (opened already, by :func:`open_store` here or in another process) and its experiment
    ``experiment`` MLflow's current ones in this process."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)


def _write_ahead_log(db: Path) -> None:
    """Switch the SQLite database ``db`` (created if missing) to write-ahead logging; a database that cannot be
    switched (read-only, in use by an older SQLite) keeps its journal."""
    import sqlite3
    from contextlib import closing

    try:
        with closing(sqlite3.connect(db, timeout=20)) as con:
            con.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        logger.debug("%s keeps its journal mode: %s", db, exc)


def client() -> Any:
    """An ``MlflowClient`` on the current tracking URI."""
    import mlflow
    from mlflow.tracking import MlflowClient

    return MlflowClient(mlflow.get_tracking_uri())


def experiment_id(experiment: str) -> str:
    import mlflow

    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        raise RuntimeError(f"experiment {experiment!r} does not exist: call setup_tracking first")
    return str(found.experiment_id)


def start_run(name: str, experiment: str, tags: Mapping[str, str]) -> str:
    """A new run in ``experiment`` tagged ``tags``; its id."""
    return str(client().create_run(experiment_id(experiment), run_name=name, tags=dict(tags)).info.run_id)


def process_tag(pid: int | None = None) -> str:
    """The :data:`PROCESS_TAG` of process ``pid`` (default: this one)."""
    import psutil

    proc = psutil.Process(pid)
    return f"{socket.gethostname()}:{proc.pid}:{proc.create_time():.2f}"


def _gone(process: str) -> bool:
    """Whether the process a :data:`PROCESS_TAG` names is gone (killed, crashed); a process on another machine is
    never known to be."""
    import psutil

    host, pid, _ = process.rsplit(":", 2)
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        return process_tag(int(pid)) != process or psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def end_stale_runs(experiment: str) -> dict[str, list[str]]:
    """End KILLED every run of ``experiment`` left RUNNING by a process of this machine that is gone, tagged
    ``dspy_for.ended_stale`` with why; the ended runs' ids by the pid that left them."""
    c = client()
    wanted = f"attributes.status = 'RUNNING' and tags.\"{PROCESS_TAG}\" LIKE '{socket.gethostname()}:%'"
    ended: dict[str, list[str]] = {}
    for run in c.search_runs([experiment_id(experiment)], filter_string=wanted, max_results=50_000):
        process = run.data.tags.get(PROCESS_TAG, "")
        if not _gone(process):
            continue
        pid = process.rsplit(":", 2)[1]
        c.set_tag(run.info.run_id, "dspy_for.ended_stale", f"left RUNNING by process {pid}, which was gone")
        c.set_terminated(run.info.run_id, status="KILLED")
        ended.setdefault(pid, []).append(run.info.run_id)
    return ended


def end_run(run_id: str, status: str) -> None:
    client().set_terminated(run_id, status=status)


def log_params(run_id: str, params: Mapping[str, str]) -> None:
    from mlflow.entities import Param

    client().log_batch(run_id, params=[Param(k, v) for k, v in params.items()])


def log_metrics(run_id: str, metrics: Mapping[str, float]) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    client().log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])


def set_tags(run_id: str, tags: Mapping[str, str]) -> None:
    from mlflow.entities import RunTag

    client().log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def log_text(run_id: str, text: str, name: str) -> None:
    client().log_text(run_id, text, name)


def log_artifact(run_id: str, path: str) -> None:
    client().log_artifact(run_id, path)


def log_figure(run_id: str | None, figure: Sketch, path: str) -> None:
    """Draw ``figure`` to ``path`` and log the file as an artifact of run ``run_id`` (None: the file only)."""
    sketch.save(figure, path)
    if run_id is not None:
        log_artifact(run_id, path)


def log_dataset_input(run_id: str | None, dataset: Mapping[str, Any]) -> None:
    """Log a dataset input (:func:`~.datasets.dataset_input`'s plain fields: its columns, source, name, digest,
    context and tags) on run ``run_id`` (None: the active run)."""
    import mlflow
    import pandas as pd
    from mlflow.data.pandas_dataset import from_pandas

    compat.check_supported()  # the dataset's source is a class of MLflow's internals
    frame = pd.DataFrame(dict(dataset["columns"]), columns=list(dataset["columns"]))
    source = compat.examples_source(dataset["source"], dataset["dataset"], dataset["split"])
    data = from_pandas(frame, source=source, targets="answer", name=dataset["name"], digest=dataset["digest"])
    tags = dict(dataset["tags"])
    if run_id is None:
        mlflow.log_input(data, context=dataset["context"], tags=tags)
        return
    from mlflow.entities import DatasetInput, InputTag

    tags[compat.DATASET_CONTEXT] = dataset["context"]
    inputs = [DatasetInput(compat.dataset_entity(data), [InputTag(k, v) for k, v in tags.items()])]
    mlflow.tracking.MlflowClient().log_inputs(run_id, inputs)
