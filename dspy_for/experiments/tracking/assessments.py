"""The assessments on an item's trace: the gold answer, the metric's verdict, the served tokens.

Each trace carries the gold answer as the ``expected_response`` expectation and, for a scored item, the
``correct`` feedback (bool) from the dataset's metric and its ``total_tokens``. A failed item has no ``correct``
feedback (an error is not a score); with a ``[judge]``, its verdict and quality scores. More assessments plug in
as :data:`Assessor` functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dspy_for.compat.mlflow import ASSESSMENT_RUN
from dspy_for.jsonwalk import jsonable
from dspy_for.secrets import redact, redact_obj

if TYPE_CHECKING:
    from mlflow.entities import Assessment

    from dspy_for.experiments.core import ItemResult

__all__ = [
    "CORRECT",
    "DEFAULT_ASSESSORS",
    "EXPECTED",
    "JUDGED",
    "SCORE",
    "TOKENS",
    "Assessor",
    "TraceContext",
    "judge_assessments",
    "masked",
    "outcome",
    "outcome_assessments",
    "usage_assessments",
]

CORRECT = "correct"  # the metric's verdict on a scored item (bool)
EXPECTED = "expected_response"  # the gold answer (MLflow's name for a reference answer)
SCORE = "score"  # the metric's score, when it is not simply 0 or 1
JUDGED = "judged_correct"  # the LLM judge's verdict (the FOR paper's judged accuracy)
TOKENS = "total_tokens"  # the item's served tokens, as a feedback: the UI sorts and filters on feedback, not on Tokens


@dataclass(frozen=True)
class TraceContext:
    """What every trace of one run shares: the method, the dataset, the metric, the MLflow run (and the client of
    its tracking store that writes the traces)."""

    label: str
    method: str
    dataset: str  # "<dataset>/<split>"
    metric: str  # the metric's name: the source of the ``correct`` assessment
    run_id: str | None
    experiment_id: str | None
    tracking_uri: str | None = None  # the run's tracking store (a trace writer process makes its own client of it)
    client: Any = field(default=None, compare=False, repr=False)  # MLflow's TracingClient on the run's store


Assessor = Callable[[TraceContext, "ItemResult"], Iterable["Assessment"]]
"""Assessments for one item's trace: ``(context, item) -> [Feedback | Expectation, ...]``. A judge adds its
scores by returning ``mlflow.entities.Feedback(name=..., value=..., source=AssessmentSource("LLM_JUDGE", ...))``;
pass it in ``log_item_trace(ctx, landed, assessors=(*DEFAULT_ASSESSORS, judge))``."""


def outcome(item: ItemResult) -> str:
    """``failed`` (an error), ``unparsed`` (scored 0), ``correct`` or ``incorrect``."""
    if item.failed:
        return "failed"
    if item.unparsed:
        return "unparsed"
    return "correct" if item.score >= 1.0 else "incorrect"


def outcome_assessments(ctx: TraceContext, item: ItemResult) -> list[Assessment]:
    """The gold answer (expectation) and, for a scored item, the metric's verdict ``correct`` (feedback)."""
    from mlflow.entities import AssessmentSource, Expectation, Feedback

    meta = {ASSESSMENT_RUN: ctx.run_id} if ctx.run_id else None
    out: list[Assessment] = [
        Expectation(
            name=EXPECTED,
            value=jsonable(item.gold),
            metadata=meta,
            source=AssessmentSource(source_type="HUMAN", source_id=ctx.dataset),
        )
    ]
    if item.failed:  # an error is not a score
        return out
    source = AssessmentSource(source_type="CODE", source_id=ctx.metric)
    answer = item.prediction.get("answer")
    why = "the output could not be parsed (scored 0)" if item.unparsed else f"gold {item.gold!r}, answered {answer!r}"
    out.append(Feedback(name=CORRECT, value=item.score >= 1.0, source=source, rationale=why, metadata=meta))
    if item.score not in (0.0, 1.0):
        out.append(Feedback(name=SCORE, value=float(item.score), source=source, metadata=meta))
    return out


def usage_assessments(ctx: TraceContext, item: ItemResult) -> list[Assessment]:
    """A scored item's served tokens (spent plus served from cache) as the numeric feedback ``total_tokens`` (its
    mean over a run is the run's ``tokens_per_item``): MLflow's trace table sorts and filters on assessments, while
    its Tokens column (the trace's token usage) is display only."""
    from mlflow.entities import AssessmentSource, Feedback

    total = item.usage.get("total") or {}
    if item.failed or not total.get("calls"):  # like tokens/item: what the scored items cost
        return []
    spent, cached = int(total.get("tokens", 0) or 0), int(total.get("cached_tokens", 0) or 0)
    return [
        Feedback(
            name=TOKENS,
            value=spent + cached,
            source=AssessmentSource(source_type="CODE", source_id="usage"),
            rationale=f"{spent} spent + {cached} served from cache, {int(total['calls'])} LM call(s)",
            metadata={ASSESSMENT_RUN: ctx.run_id} if ctx.run_id else None,
        )
    ]


def judge_assessments(ctx: TraceContext, item: ItemResult) -> list[Assessment]:
    """A judge's verdict on a scored item (when the run has a ``[judge]``): ``judged_correct`` and the quality
    scores ``reasoning``, ``coherence``, ``holistic`` as LLM-judge feedback; a verdict the metric decided because
    the judge's output was unreadable is marked as the rule's; an item the judge's LM failed on gets none."""
    from mlflow.entities import AssessmentSource, Feedback

    verdict = item.judge
    if item.failed or verdict is None or verdict.get("method") == "error":
        return []
    meta = {ASSESSMENT_RUN: ctx.run_id} if ctx.run_id else None
    judge = AssessmentSource(source_type="LLM_JUDGE", source_id=str(verdict.get("lm", "judge")))
    rule = AssessmentSource(source_type="CODE", source_id=ctx.metric)
    by_rule = verdict.get("method") == "rule"
    out: list[Assessment] = [
        Feedback(
            name=JUDGED,
            value=bool(verdict.get("correct")),
            source=rule if by_rule else judge,
            metadata=meta,
            rationale=f"the judge's output was unreadable: {verdict.get('error')}" if by_rule else None,
        )
    ]
    for rubric in ("reasoning", "coherence", "holistic"):
        if verdict.get(rubric) is not None:
            out.append(Feedback(name=rubric, value=float(verdict[rubric]), source=judge, metadata=meta))
    return out


DEFAULT_ASSESSORS: tuple[Assessor, ...] = (outcome_assessments, usage_assessments, judge_assessments)


def masked(a: Assessment) -> Assessment:
    """An assessment with its texts masked (an assessor may quote an LM's output, which may echo a key)."""
    if a.rationale:
        a.rationale = redact(a.rationale)
    for value in (a.feedback, a.expectation):
        if value is not None:
            value.value = redact_obj(value.value)
    return a
