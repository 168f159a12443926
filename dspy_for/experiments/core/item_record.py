"""One item's record made from what running it produced: its prediction, score or error, usage and trajectory."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import dspy

from dspy_for.experiments.core.prepare import Metric
from dspy_for.experiments.core.records import ItemResult

__all__ = ["Outcome", "item_record"]


@dataclass
class Outcome:
    """What running one item produced besides its prediction."""

    usage: dict[str, dict[str, float]] | None = None
    wall_time: float = 0.0
    error: str | None = None
    error_class: str | None = None
    unparsed: bool = False


_SKIP_FIELDS = {"trajectory", "usage", "stats", "answers_by_round"}


def item_record(example: dspy.Example, pred: dspy.Prediction, outcome: Outcome, metric: Metric) -> ItemResult:
    error, error_class, score = outcome.error, outcome.error_class, 0.0
    if error is None and not outcome.unparsed:
        try:
            score = float(metric(example, pred))
        except Exception as exc:  # a metric that cannot read the answer: a bug to see, not a wrong answer
            error, error_class = f"metric failed: {type(exc).__name__}: {exc}", type(exc).__name__
    stats = pred.get("stats") if error is None else None
    return ItemResult(
        id=str(example.get("id")),
        question=str(example.get("question", "")),
        gold=example.get("answer"),
        prediction=_jsonable_fields(pred),
        score=score,
        error=error,
        usage=outcome.usage or {},
        trajectory=pred.get("trajectory"),
        answers_by_round=pred.get("answers_by_round"),
        stats={k: float(v) for k, v in (stats or {}).items()},
        wall_time=outcome.wall_time,
        error_class=error_class,
        unparsed=outcome.unparsed,
    )


def _jsonable_fields(pred: dspy.Prediction) -> dict[str, Any]:
    out = {}
    for k, v in pred.items():
        if k in _SKIP_FIELDS or k.startswith("_"):
            continue
        try:
            json.dumps(v)
            out[k] = v
        except TypeError:
            out[k] = str(v)
    return out
