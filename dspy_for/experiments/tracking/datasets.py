"""A run's examples as an MLflow dataset input.

:func:`log_dataset` logs them with ``context="evaluation"`` (or the given one), named ``<dataset>/<split>`` with the
content hash of :func:`~dspy_for.datasets.data_hash` as its digest, so the Dataset column of the runs table and
"compare runs on the same data" work in the MLflow UI. A failure is only a warning: it never fails a comparison.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dspy_for.compat import mlflow as compat
from dspy_for.datasets import data_hash
from dspy_for.secrets import redact

if TYPE_CHECKING:
    from dspy_for.experiments.core import PreparedRun

__all__ = ["log_dataset"]

logger = logging.getLogger("dspy_for.tracing")


def log_dataset(run: PreparedRun, *, context: str = "evaluation", run_id: str | None = None) -> None:
    """Log ``run.examples`` as an MLflow dataset input of run ``run_id`` (default: the active run); a failure
    is only a warning."""
    try:
        compat.check_supported()
        _log_dataset(run, context, run_id)
    except Exception as exc:
        logger.warning(
            "could not log the dataset of %s on %s to MLflow: %s",
            run.method.label,
            run.dataset.name,
            redact(f"{type(exc).__name__}: {exc}"),
        )


def _log_dataset(run: PreparedRun, context: str, run_id: str | None) -> None:
    import mlflow
    import pandas as pd
    from mlflow.data.pandas_dataset import from_pandas

    d, examples = run.dataset, run.examples
    sources = sorted({str(ex.get("source")) for ex in examples if ex.get("source") is not None})
    frame = pd.DataFrame(
        {
            "id": [str(ex.get("id")) for ex in examples],
            "question": [str(ex.get("question", "")) for ex in examples],
            "answer": [str(ex.get("answer")) for ex in examples],
        },
        columns=["id", "question", "answer"],
    )
    source = compat.examples_source(redact(", ".join(sources) or "unknown"), d.name, d.split)
    dataset = from_pandas(
        frame, source=source, targets="answer", name=redact(f"{d.name}/{d.split}"), digest=data_hash(examples)
    )
    tags = {"dspy_for.n": str(len(examples))}
    if run_id is None:
        mlflow.log_input(dataset, context=context, tags=tags)
        return
    from mlflow.entities import DatasetInput, InputTag

    tags[compat.DATASET_CONTEXT] = context
    mlflow.tracking.MlflowClient().log_inputs(
        run_id, [DatasetInput(compat.dataset_entity(dataset), [InputTag(k, v) for k, v in tags.items()])]
    )
