"""The spans inside one item's trace, built from its trajectory (no MLflow here: plain :class:`SpanSpec` values).

One span per LM call turn holding the turn's *parsed* fields — FOR: ``defender A0``, ``debater r1``,
``defender r1``, …, ``host``; ProRefine: ``verifier``, ``task step i``, ``feedback i``, ``optimizer i``; any other
method: one ``task`` span. Each span's weight is its share of the item's wall time (its tokens, when known).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dspy_for.compat.mlflow import CHAT_USAGE

if TYPE_CHECKING:
    from dspy_for.experiments.records import ItemResult

__all__ = ["SpanSpec", "item_spans", "jsonable", "usage_attribute"]


@dataclass
class SpanSpec:
    """One span inside an item's trace (one LM call turn): its name and what it holds."""

    name: str
    inputs: Any = None
    outputs: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0  # its share of the item's wall time (tokens, when known)
    error: str | None = None


def item_spans(item: ItemResult) -> list[SpanSpec]:
    """The spans of one item's trace, from its trajectory (FOR turns, ProRefine steps) or one ``task`` span."""
    traj = item.trajectory or []
    if traj and all(isinstance(t, Mapping) and "role" in t and "fields" in t for t in traj):
        return _for_spans(traj)
    if traj and all(isinstance(t, Mapping) and "step" in t for t in traj):
        return _prorefine_spans(traj, item)
    usage = item.usage.get("total", {})
    return [
        SpanSpec(
            "task",
            inputs={"question": item.question},
            outputs=item.prediction or None,
            attributes={
                "dspy_for.role": "task",
                "dspy_for.calls": int(usage.get("calls", 0)),
                **usage_attribute(usage),
            },
            weight=1.0,
            error=item.error,
        )
    ]


def _for_spans(traj: list[Any]) -> list[SpanSpec]:
    spans: list[SpanSpec] = []
    last_questions: list[str] = []
    last_answer: Any = None
    for t in traj:
        role, kind, rnd, fields = str(t["role"]), str(t.get("type", "")), int(t.get("round", 0)), t["fields"]
        inputs: Any = None
        if kind == "answer":
            name = f"{role} A{rnd}"
        elif kind == "synthesis":
            name, inputs = role, {"rounds": rnd}
        else:
            name = f"{role} r{rnd}"
        if kind == "questions":
            if fields.get("attempt"):
                name += " (re-ask)"
            inputs = {"answer": last_answer}
            last_questions = list(fields.get("questions") or [])
        elif kind == "revision":
            inputs = {"questions": last_questions}
        if kind in ("answer", "revision") and not fields.get("parse_error") and not fields.get("kept_previous"):
            last_answer = fields.get("answer", last_answer)
        attrs: dict[str, Any] = {"dspy_for.role": role, "dspy_for.turn": kind, "dspy_for.round": rnd}
        usage = t.get("usage")
        weight = 1.0
        if isinstance(usage, Mapping):
            prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
            attrs[CHAT_USAGE] = {
                "input_tokens": prompt,
                "output_tokens": completion,
                "total_tokens": prompt + completion,
            }
            attrs["dspy_for.cache_hit"] = bool(usage.get("cache_hit", False))
            weight = completion + 1.0
        spans.append(
            SpanSpec(
                name, inputs=inputs, outputs=fields, attributes=attrs, weight=weight, error=fields.get("parse_error")
            )
        )
    return spans


def _prorefine_spans(traj: list[Any], item: ItemResult) -> list[SpanSpec]:
    per_call = {r: _completion_per_call(u) for r, u in item.usage.items() if r != "total"}
    spans: list[SpanSpec] = []
    verifier_calls = int(item.usage.get("verifier", {}).get("calls", 0))
    if verifier_calls:
        refined = item.stats.get("refined")
        spans.append(
            SpanSpec(
                "verifier",
                outputs={"initial_answer_judged_correct": None if refined is None else not bool(refined)},
                attributes={"dspy_for.role": "verifier", **usage_attribute(item.usage["verifier"])},
                weight=per_call.get("verifier", 1.0),
            )
        )
    for s in traj:
        i = int(s.get("step", 0))
        completion = int(s.get("completion_tokens", 0))
        spans.append(
            SpanSpec(
                f"task step {i}",
                inputs={"prompt": s.get("prompt"), "max_tokens": s.get("max_tokens")},
                outputs={"output": s.get("output"), "finish_reason": s.get("finish_reason"), "eos": s.get("eos")},
                attributes={"dspy_for.role": "task", "dspy_for.step": i, "dspy_for.completion_tokens": completion},
                weight=completion + 1.0,
            )
        )
        spans.append(
            SpanSpec(
                f"feedback {i}",
                inputs={"partial_output": s.get("output")},
                outputs={"feedback": s.get("feedback"), "is_correct": s.get("is_correct")},
                attributes={"dspy_for.role": "feedback", "dspy_for.step": i},
                weight=per_call.get("feedback", 1.0),
            )
        )
        rejected = s.get("rejected_reason")
        spans.append(
            SpanSpec(
                f"optimizer {i}",
                inputs={"prompt": s.get("prompt"), "feedback": s.get("feedback")},
                outputs={
                    "improved_prompt": s.get("rejected_prompt") if rejected else s.get("new_prompt"),
                    "accepted": rejected is None,
                    "rejected_reason": rejected,
                },
                attributes={"dspy_for.role": "optimizer", "dspy_for.step": i},
                weight=per_call.get("optimizer", 1.0),
            )
        )
    return spans


def _completion_per_call(usage: Mapping[str, Any]) -> float:
    calls = float(usage.get("calls", 0) or 0)
    completion = float(usage.get("completion_tokens", 0) or 0) + float(usage.get("cached_completion_tokens", 0) or 0)
    return completion / calls + 1.0 if calls else 1.0


def usage_attribute(usage: Mapping[str, Any]) -> dict[str, Any]:
    """MLflow's token usage of a role (or the total): served tokens, i.e. spent plus served from cache."""
    if not usage:
        return {}
    prompt = int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("cached_prompt_tokens", 0) or 0)
    completion = int(usage.get("completion_tokens", 0) or 0) + int(usage.get("cached_completion_tokens", 0) or 0)
    return {CHAT_USAGE: {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}}


def jsonable(value: Any) -> Any:
    """``value`` if it is JSON-serializable, else the same structure with what is not turned into text."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, Mapping):
            return {str(k): jsonable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [jsonable(v) for v in value]
        return str(value)
