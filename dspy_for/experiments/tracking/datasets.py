"""A run's examples as an MLflow dataset input.

:func:`log_dataset` logs them with ``context="evaluation"`` (or the given one), named ``<dataset>/<split>`` with the
content hash of :func:`~dspy_for.datasets.data_hash` as its digest, so the Dataset column of the runs table and
"compare runs on the same data" work in the MLflow UI. A failure is only a warning: it never fails a comparison.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dspy_for.datasets import data_hash
from dspy_for.experiments.tracking import store
from dspy_for.secrets import redact

if TYPE_CHECKING:
    from dspy_for.experiments.core import PreparedRun

__all__ = ["dataset_input", "log_dataset"]

logger = logging.getLogger("dspy_for.tracing")


def log_dataset(run: PreparedRun, *, context: str = "evaluation", run_id: str | None = None) -> None:
    """Log ``run.examples`` as an MLflow dataset input of run ``run_id`` (default: the active run); a failure
    is only a warning."""
    try:
        store.log_dataset_input(run_id, dataset_input(run, context))
    except Exception as exc:
        logger.warning(
            "could not log the dataset of %s on %s to MLflow: %s",
            run.method.label,
            run.dataset.name,
            redact(f"{type(exc).__name__}: {exc}"),
        )


def dataset_input(run: PreparedRun, context: str) -> dict[str, Any]:
    """``run.examples`` as the plain fields of an MLflow dataset input (every text masked): its columns, where they
    were read, its name, content hash, context and tags (:func:`~.runs.log_dataset_input` logs them)."""
    d, examples = run.dataset, run.examples
    sources = sorted({str(ex.get("source")) for ex in examples if ex.get("source") is not None})
    return {
        "columns": {
            "id": [str(ex.get("id")) for ex in examples],
            "question": [str(ex.get("question", "")) for ex in examples],
            "answer": [str(ex.get("answer")) for ex in examples],
        },
        "source": redact(", ".join(sources) or "unknown"),
        "dataset": d.name,
        "split": d.split,
        "name": redact(f"{d.name}/{d.split}"),
        "digest": data_hash(examples),
        "context": context,
        "tags": {"dspy_for.n": str(len(examples))},
    }
