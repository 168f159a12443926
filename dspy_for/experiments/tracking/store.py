"""MLflow tracking helpers: the one face the package writes to its tracking store through. MLflow is imported lazily,
in the tracking package only, never by modules or optimizers; the store's own calls (:mod:`.runs`) are made where the
store is served (:mod:`.served`: this process, or the command line's tracking process).

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
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from dspy_for.errors import PathError, ServerError
from dspy_for.experiments.core.folders import writable_folder
from dspy_for.experiments.core.heap import importing
from dspy_for.experiments.core.sinks import critical
from dspy_for.experiments.reports.sketch import Sketch
from dspy_for.experiments.tracking import runs, served
from dspy_for.experiments.tracking.runs import PROCESS_TAG
from dspy_for.jsonwalk import flat_items
from dspy_for.lm.llama_build import server_build
from dspy_for.secrets import is_secret_key, redact

__all__ = [
    "PROCESS_TAG",
    "autolog",
    "client",
    "default_tracking_uri",
    "end_run",
    "end_stale_runs",
    "environment_params",
    "experiment_id",
    "log_artifact",
    "log_dataset_input",
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
    start-up, a process importing MLflow and its store, runs beside this process's. Where the command line's
    tracking process serves the store (:func:`~dspy_for.experiments.tracking.writer.start_tracking_process`), the
    store is opened there and this process never imports MLflow for it.
    """
    if traces:
        from dspy_for.experiments.tracking.writer import trace_writer

        trace_writer()
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    root = tracking_root(uri)
    artifact_root = (root / "artifacts").resolve().as_uri() if uri.startswith("sqlite:///") else None
    _check_writable(root, uri)
    served.STORE.update(uri=uri, experiment=experiment, here=False)
    with importing():  # MLflow and its SQL store, when they load here: the collector stays off while they do
        served.write("open_store", uri, experiment, str(root), artifact_root)
    return root


def current_uri() -> str | None:
    """The URI of the store :func:`setup_tracking` opened last (None before it did)."""
    uri = served.STORE.get("uri")
    return str(uri) if uri is not None else None


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


def autolog() -> None:
    """DSPy autologging into MLflow traces (``--autolog``). Every span MLflow exports from then on is masked by
    :func:`redact` (inputs, outputs, attributes, events, status): a span processor, installed once per process and
    before ``mlflow.dspy.autolog()`` so that DSPy's first trace is masked too. Raises
    :class:`~dspy_for.errors.MissingDependencyError` on an MLflow without what the masking needs."""
    import mlflow

    from dspy_for.experiments.tracking.masking import install_span_masking

    served.here()
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
    """An ``MlflowClient`` on the current tracking URI (see :func:`setup_tracking`), in this process."""
    served.here()
    return runs.client()


def experiment_id(experiment: str) -> str:
    """The id of ``experiment`` in the store :func:`setup_tracking` opened."""
    return str(served.call("experiment_id", experiment))


@critical_write
def start_run(
    name: str, experiment: str, *, parent_id: str | None = None, tags: Mapping[str, str] | None = None
) -> str:
    """A new run in ``experiment`` (nested under ``parent_id``), ended by :func:`end_run`; its id. It is tagged with
    the process that runs it (:data:`PROCESS_TAG`), so a later run can end it when that process is gone
    (:func:`end_stale_runs`)."""
    parent = {"mlflow.parentRunId": parent_id} if parent_id else {}
    return served.start_run(name, experiment, {**(tags or {}), **parent, PROCESS_TAG: runs.process_tag()})


@critical_write
def end_stale_runs(experiment: str, then: Callable[[dict[str, list[str]]], None]) -> None:
    """End KILLED every run of ``experiment`` left RUNNING by a process of this machine that is gone (a run killed
    with SIGKILL, or a crash, cannot end its own runs), tagged ``dspy_for.ended_stale`` with why; ``then`` gets the
    ended runs' ids by the pid that left them (once the tracking process answered, where it serves the store)."""
    served.call("end_stale_runs", experiment, then=then, left=True)


@contextmanager
def active_run(run_id: str, enabled: bool = True) -> Iterator[None]:
    """Make ``run_id`` MLflow's active run inside the block (for ``mlflow.dspy.autolog``'s traces); its end status
    is then set by :func:`end_run`, not here."""
    if not enabled:
        yield
        return
    import mlflow

    served.here()
    with mlflow.start_run(run_id=served.run_id(run_id)):
        yield


@critical_write
def end_run(run_id: str, status: str) -> None:
    served.write("end_run", run_id, status)


@critical_write
def log_params(run_id: str, params: Mapping[str, Any]) -> None:
    """``params`` flattened and made safe (:func:`safe_params`), in one call."""
    served.write("log_params", run_id, safe_params(params))


@critical_write
def log_metrics(run_id: str, metrics: Mapping[str, float]) -> None:
    served.write("log_metrics", run_id, {k: float(v) for k, v in metrics.items()})


@critical_write
def set_tags(run_id: str, tags: Mapping[str, str]) -> None:
    served.write("set_tags", run_id, {k: redact(str(v))[:5000] for k, v in tags.items()})


@critical_write
def log_text(run_id: str, text: str, name: str) -> None:
    """A text artifact, masked by :func:`redact`."""
    served.write("log_text", run_id, redact(text), name)


def log_json(run_id: str, obj: Any, name: str) -> None:
    log_text(run_id, json.dumps(obj, indent=2, default=str, ensure_ascii=False), name)


def log_table(run_id: str, rows: list[dict[str, Any]], name: str) -> None:
    """Rows as JSONL (one object per line): easy to load with pandas, greppable."""
    log_text(run_id, "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rows), name)


@critical_write
def log_artifact(run_id: str, path: Path) -> None:
    """A file already saved at ``path`` (a plot, a program), as the artifact ``path.name`` (the same file: not drawn or
    written a second time)."""
    served.write("log_artifact", run_id, str(path))


def log_figure(run_id: str | None, figure: Sketch, path: Path) -> None:
    """A plot drawn to ``path`` where the store is served and logged as an artifact of run ``run_id`` (None: the file
    only), waited for: the command line's tracking process, which imports matplotlib while the items run, draws it."""
    served.call("log_figure", run_id, figure, str(path))


def log_dataset_input(run_id: str | None, dataset: Mapping[str, Any]) -> None:
    """A dataset input (:func:`~dspy_for.experiments.tracking.datasets.dataset_input`'s fields) of run ``run_id``
    (None: the active run, in this process)."""
    if run_id is None:
        served.here()
        runs.log_dataset_input(None, dataset)
    else:
        served.write("log_dataset_input", run_id, dataset)
