"""MLflow tracking helpers. MLflow is imported only here (and lazily), never by modules or optimizers.

Default store: MLflow 3's recommended database backend, a SQLite file inside ``./mlruns/``
(``sqlite:///mlruns/mlflow.db``) with artifacts under ``./mlruns/artifacts``, created on first use;
overridable with ``--tracking-uri`` or ``$MLFLOW_TRACKING_URI``. A SQLite store is switched to SQLite's
write-ahead log (``PRAGMA journal_mode=WAL``, kept in the file; MLflow and its UI read it as before), which
makes each write a fraction of a millisecond instead of several (a run writes one trace per item).

Nothing secret is logged: :func:`safe_params` and :func:`redact` drop or mask API keys, tokens and any
value equal to a secret-looking environment variable, in params, tags and artifact text.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import platform
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

from dspy_for.compat.mlflow_schema import seed_sqlite_store
from dspy_for.errors import PathError, ServerError
from dspy_for.experiments.core.folders import writable_folder
from dspy_for.experiments.core.heap import importing
from dspy_for.experiments.core.sinks import critical
from dspy_for.jsonwalk import flat_items
from dspy_for.lm.llama_build import server_build
from dspy_for.secrets import is_secret_key, redact

__all__ = [
    "autolog",
    "client",
    "default_tracking_uri",
    "end_run",
    "end_stale_runs",
    "environment_params",
    "log_figure",
    "log_json",
    "log_metrics",
    "log_params",
    "log_table",
    "log_text",
    "redact",
    "safe_params",
    "set_tags",
    "setup_tracking",
    "start_run",
    "tracking_root",
]

_MAX_PARAM = 6000
logger = logging.getLogger("dspy_for.tracking")
_F = TypeVar("_F", bound=Callable[..., Any])


def critical_write(fn: _F) -> _F:
    """A write to the tracking store that a Ctrl-C or SIGTERM never cuts in two (it is raised after the write)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with critical():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def default_tracking_uri(root: str | os.PathLike[str] = ".") -> str:
    return f"sqlite:///{Path(root, 'mlruns', 'mlflow.db').as_posix()}"


def tracking_root(uri: str | None) -> Path:
    """The directory beside the store ``uri`` (or $MLFLOW_TRACKING_URI, or the default store) where dspy-for keeps
    its own files (``mlruns/`` by default); found, never created (:func:`setup_tracking` creates it)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    return Path(uri[len("sqlite:///") :]).parent if uri.startswith("sqlite:///") else Path("mlruns")


def setup_tracking(uri: str | None, experiment: str, *, traces: bool = False) -> Path:
    """Point MLflow at ``uri`` (or $MLFLOW_TRACKING_URI, or the default store) and experiment ``experiment``;
    return the directory beside the store where dspy-for keeps its own files (``mlruns/`` by default).

    The store is created (tables, experiment) under a file lock: two first runs at once on a fresh
    ``mlruns/`` both succeed instead of racing on MLflow's table creation. ``traces``: the run writes per-item
    traces, so the trace writer (:func:`~dspy_for.experiments.tracking.writer.trace_writer`) starts first: its own
    start-up, a process importing MLflow and its store, runs beside this process's.
    """
    if traces:
        from dspy_for.experiments.tracking.writer import trace_writer

        trace_writer()
    with importing():  # MLflow and its SQL store: the collector stays off while they load
        return _setup(uri, experiment)


def _setup(uri: str | None, experiment: str) -> Path:
    import mlflow

    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    artifact_root = None
    root = tracking_root(uri)
    if uri.startswith("sqlite:///"):
        artifact_root = (root / "artifacts").resolve().as_uri()
    _check_writable(root, uri)
    with FileLock(str(root / ".dspy_for_store.lock")):
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
    return root


def _check_writable(root: Path, uri: str) -> None:
    """The folder beside the store (created when missing) and a SQLite store's file can be written; else a
    :class:`~dspy_for.errors.PathError` naming them and the fix, before anything runs."""
    fix = "pass another store (`--tracking-uri sqlite:///DIR/mlflow.db`, the config's `tracking_uri`)"
    refused = writable_folder(root, "The MLflow store's folder", fix)
    where = root
    db = Path(uri[len("sqlite:///") :].split("?", 1)[0]) if uri.startswith("sqlite:///") else None
    if refused is None and db is not None and db.is_file() and not os.access(db, os.W_OK):  # (opening the file
        refused, where = PermissionError(errno.EACCES, os.strerror(errno.EACCES)), db  # would drop SQLite's locks)
    if refused is not None:
        raise PathError(f"The MLflow store {where} cannot be written ({refused.strerror}): make it writable, or {fix}.")


def _write_ahead_log(db: Path) -> None:
    """Switch the SQLite database ``db`` (created if missing) to write-ahead logging; a database that cannot be
    switched (read-only, in use by an older SQLite) keeps its journal."""
    import sqlite3

    try:
        with closing(sqlite3.connect(db, timeout=20)) as con:
            con.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        logger.debug("%s keeps its journal mode: %s", db, exc)


def experiment_id(experiment: str) -> str:
    import mlflow

    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        raise RuntimeError(f"experiment {experiment!r} does not exist: call setup_tracking first")
    return str(found.experiment_id)


def autolog() -> None:
    """DSPy autologging into MLflow traces (``--autolog``). Every span MLflow exports from then on is masked by
    :func:`redact` (inputs, outputs, attributes, events, status): a span processor, installed once per process and
    before ``mlflow.dspy.autolog()`` so that DSPy's first trace is masked too. Raises
    :class:`~dspy_for.errors.MissingDependencyError` on an MLflow without what the masking needs."""
    import mlflow

    from dspy_for.experiments.tracking.masking import install_span_masking

    install_span_masking()
    mlflow.dspy.autolog()


def safe_params(d: Mapping[str, Any]) -> dict[str, str]:
    """Flatten, drop secret keys, mask secret values, and truncate to MLflow's param limit."""
    out = {}
    for key, value in flat_items(d):
        if is_secret_key(key.rsplit(".", 1)[-1]):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[key[:250]] = redact(text)[:_MAX_PARAM]
    return out


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def build_label() -> str:
    """The local server's build as the serving identity names it (``llama.cpp b0-0c1e57098``), or ``not built``."""
    try:
        return server_build().label
    except ServerError:
        return "not built"


def environment_params() -> dict[str, str]:
    """Package versions, Python, platform and the git commit (if any) of the working directory."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    packages = ("dspy-for", "dspy", "litellm", "mlflow", "optuna")
    params = {f"version.{p}": _version(p) for p in packages}
    params["version.llama-server"] = build_label()  # the local server's build (its serving identity names it too)
    params.update(
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "git_commit": commit or "unknown",
            "git_dirty": str(bool(dirty.strip())),
        }
    )
    return params


def client() -> Any:
    """An ``MlflowClient`` on the current tracking URI (see :func:`setup_tracking`)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    return MlflowClient(mlflow.get_tracking_uri())


@critical_write
def start_run(
    name: str, experiment: str, *, parent_id: str | None = None, tags: Mapping[str, str] | None = None
) -> str:
    """A new run in ``experiment`` (nested under ``parent_id``), ended by :func:`end_run`; its id. It is tagged with
    the process that runs it (:data:`PROCESS_TAG`), so a later run can end it when that process is gone
    (:func:`end_stale_runs`)."""
    all_tags = {**(tags or {}), **({"mlflow.parentRunId": parent_id} if parent_id else {}), PROCESS_TAG: _process()}
    return str(client().create_run(experiment_id(experiment), run_name=name, tags=all_tags).info.run_id)


#: the tag naming the process a run runs in: ``<host>:<pid>:<the process's start time>`` (a pid used again by another
#: process has another start time)
PROCESS_TAG = "dspy_for.process"


def _process(pid: int | None = None) -> str:
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
        return _process(int(pid)) != process or psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


@critical_write
def end_stale_runs(experiment: str) -> dict[str, list[str]]:
    """End KILLED every run of ``experiment`` left RUNNING by a process of this machine that is gone (a run killed
    with SIGKILL, or a crash, cannot end its own runs), tagged ``dspy_for.ended_stale`` with why; returns the ended
    runs' ids by the pid that left them."""
    c = client()
    wanted = f"attributes.status = 'RUNNING' and tags.\"{PROCESS_TAG}\" LIKE '{socket.gethostname()}:%'"
    ended: dict[str, list[str]] = {}
    runs = c.search_runs([experiment_id(experiment)], filter_string=wanted, max_results=50_000)
    for run in runs:
        process = run.data.tags.get(PROCESS_TAG, "")
        if not _gone(process):
            continue
        pid = process.rsplit(":", 2)[1]
        c.set_tag(run.info.run_id, "dspy_for.ended_stale", f"left RUNNING by process {pid}, which was gone")
        c.set_terminated(run.info.run_id, status="KILLED")
        ended.setdefault(pid, []).append(run.info.run_id)
    return ended


@contextmanager
def active_run(run_id: str, enabled: bool = True) -> Iterator[None]:
    """Make ``run_id`` MLflow's active run inside the block (for ``mlflow.dspy.autolog``'s traces); its end status
    is then set by :func:`end_run`, not here."""
    if not enabled:
        yield
        return
    import mlflow

    with mlflow.start_run(run_id=run_id):
        yield


@critical_write
def end_run(run_id: str, status: str) -> None:
    client().set_terminated(run_id, status=status)


@critical_write
def log_params(run_id: str, params: Mapping[str, Any]) -> None:
    """``params`` flattened and made safe (:func:`safe_params`), in one call."""
    from mlflow.entities import Param

    client().log_batch(run_id, params=[Param(k, v) for k, v in safe_params(params).items()])


@critical_write
def log_metrics(run_id: str, metrics: Mapping[str, float]) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    client().log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])


@critical_write
def set_tags(run_id: str, tags: Mapping[str, str]) -> None:
    from mlflow.entities import RunTag

    client().log_batch(run_id, tags=[RunTag(k, redact(str(v))[:5000]) for k, v in tags.items()])


@critical_write
def log_text(run_id: str, text: str, name: str) -> None:
    """A text artifact, masked by :func:`redact`."""
    client().log_text(run_id, redact(text), name)


def log_json(run_id: str, obj: Any, name: str) -> None:
    log_text(run_id, json.dumps(obj, indent=2, default=str, ensure_ascii=False), name)


def log_table(run_id: str, rows: list[dict[str, Any]], name: str) -> None:
    """Rows as JSONL (one object per line): easy to load with pandas, greppable."""
    log_text(run_id, "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rows), name)


@critical_write
def log_figure(run_id: str, path: Path) -> None:
    """A plot already saved at ``path``, as the artifact ``path.name`` (the same file: not drawn a second time)."""
    client().log_artifact(run_id, str(path))
