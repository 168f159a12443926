"""What a tracking store already holds of a comparison, read back (``load_results``): its latest MLflow parent run
for a spec (:func:`latest_comparison`) and the MLflow trace of each record in that run (:func:`record_traces`).
Only a local store that exists is read — a SQLite file or a folder — and nothing is created; a store that cannot
be read is a warning and an unknown, never a reason to stop."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from dspy_for.experiments.tracking.store import default_tracking_uri
from dspy_for.secrets import redact

__all__ = ["latest_comparison", "local_store", "record_traces"]

logger = logging.getLogger("dspy_for.experiments")

_PAGE = 1000


def local_store(uri: str | None) -> str | None:
    """``uri`` (else $MLFLOW_TRACKING_URI, else the default store) when it is a local store that exists: a SQLite
    file or a folder; None otherwise (a server is never asked: nothing waits on the network)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    if uri.startswith("sqlite:///"):
        return uri if Path(uri[len("sqlite:///") :].split("?", 1)[0]).is_file() else None
    path = uri[len("file://") :] if uri.startswith("file://") else uri
    return uri if "://" not in path and Path(path).is_dir() else None


def latest_comparison(uri: str | None, experiment: str, fingerprint: str) -> str | None:
    """The latest finished comparison parent run of ``experiment`` whose spec has ``fingerprint`` (what decides its
    results), in the local store ``uri``; None when there is none (or no such store)."""
    found = local_store(uri)
    if found is None:
        return None
    try:
        client = _client(found)
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            return None
        runs = client.search_runs(
            [exp.experiment_id],
            filter_string=f"tags.`dspy_for.kind` = 'comparison' and tags.`dspy_for.fingerprint` = '{fingerprint}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
    except Exception as exc:
        logger.warning("the comparison's MLflow run could not be looked up: %s", redact(f"{type(exc).__name__}: {exc}"))
        return None
    return str(runs[0].info.run_id) if runs else None


def record_traces(uri: str | None, parent: str) -> dict[tuple[str, str], dict[tuple[str, int], str]]:
    """Each cell's traces in the comparison ``parent``: ``{(dataset, label): {(item id, epoch): trace id}}``, read
    from its nested runs (empty when the store cannot be read)."""
    found = local_store(uri)
    if found is None:
        return {}
    out: dict[tuple[str, str], dict[tuple[str, int], str]] = {}
    try:
        client = _client(found)
        experiment = client.get_run(parent).info.experiment_id
        children = client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
        for child in children:
            params = child.data.params
            if "label" in params and "dataset" in params:
                out[(params["dataset"], params["label"])] = _traces(client, experiment, str(child.info.run_id))
    except Exception as exc:
        logger.warning("the comparison's MLflow traces could not be read: %s", redact(f"{type(exc).__name__}: {exc}"))
        return {}
    return out


def _traces(client: Any, experiment: str, run_id: str) -> dict[tuple[str, int], str]:
    """The trace of each (item id, epoch) written on ``run_id`` (of ``experiment``)."""
    out: dict[tuple[str, int], str] = {}
    token = None
    while True:
        page = client.search_traces(
            experiment_ids=[experiment], run_id=run_id, include_spans=False, max_results=_PAGE, page_token=token
        )
        for trace in page:
            meta = trace.info.trace_metadata
            if "dspy_for.item_id" in meta:
                out.setdefault((meta["dspy_for.item_id"], int(meta.get("dspy_for.epoch", 0))), trace.info.trace_id)
        token = page.token
        if not token:
            return out


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)
