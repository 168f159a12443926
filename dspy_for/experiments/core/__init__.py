"""The run core: a spec becomes a prepared run (:mod:`.prepare`), items stream through the method
(:mod:`.evaluate`), and each finished record is handed, as it lands, to sinks (:mod:`.sinks`): the results store
(:mod:`.store`, resume), the progress bar, MLflow, the statistics — and an optional stop rule may end the run
early. :func:`~.summary.summarize` is the one record-to-summary function every report reads."""

from __future__ import annotations

from dspy_for.experiments.core.prepare import PreparedRun, build_lms, prepare_run, program_run, role_lm, with_options
from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.experiments.core.run import Evaluation, Feed, evaluate, feed_together
from dspy_for.experiments.core.sinks import Landed, RunInterrupted, RunStatus, Sink, StopRule
from dspy_for.experiments.core.spend import SpendLimit
from dspy_for.experiments.core.store import ResultStore
from dspy_for.experiments.spec.model import load_examples

__all__ = [
    "Evaluation",
    "Feed",
    "ItemResult",
    "Landed",
    "MethodResult",
    "PreparedRun",
    "ResultStore",
    "RunInterrupted",
    "RunStatus",
    "Sink",
    "SpendLimit",
    "StopRule",
    "build_lms",
    "evaluate",
    "feed_together",
    "load_examples",
    "prepare_run",
    "program_run",
    "role_lm",
    "with_options",
]
