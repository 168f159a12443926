"""Grading a run's items with its judge (the spec's ``[judge]``): one call per scored item, stored with the item,
never part of the method's own usage."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import dspy

from dspy_for.experiments.core.records import ItemResult
from dspy_for.judges import Judge
from dspy_for.lm.usage import track_usage
from dspy_for.secrets import redact

__all__ = ["judge_item", "judged_text", "needs_verdict"]


def judge_item(judge: Judge, judge_name: str, item: ItemResult, example: dspy.Example) -> ItemResult:
    """``item`` graded by ``judge`` (the method is not run again), unless it is failed or already holds a verdict
    of this judge. The verdict, and the judge's usage apart from the method's, go into the returned record; a
    failure of the judge's LM is kept as an error verdict (``method: error``), graded again on the next run."""
    if item.failed or not needs_verdict(item.judge, judge_name):
        return item
    with track_usage() as usage:
        try:
            verdict = judge(example, dspy.Prediction(**item.prediction), judged_text(item)).to_dict()
        except Exception as exc:  # the judge's LM failed: an error, graded again on the next run
            verdict = {"correct": None, "method": "error", "error": redact(f"{type(exc).__name__}: {exc}")}
    return replace(item, judge={**verdict, "lm": judge_name}, judge_usage=usage.to_dict())


def needs_verdict(verdict: dict[str, Any] | None, judge_name: str) -> bool:
    """No verdict yet, one of another judge (LM or grading prompt), or an error of the judge's LM."""
    return verdict is None or verdict.get("lm") != judge_name or verdict.get("method") == "error"


def judged_text(item: ItemResult) -> str:
    """What the judge reads of an item: the method's dialogue (FOR's turns, role by role) if it has one, else
    its reasoning, then its final answer."""
    lines = []
    for turn in item.trajectory or []:
        if isinstance(turn, dict) and "role" in turn and "fields" in turn:
            fields = {k: v for k, v in turn["fields"].items() if k not in ("violations", "attempt", "repeats")}
            body = "; ".join(f"{k}: {v}" for k, v in fields.items())
            lines.append(f"[{turn['role']}, round {turn.get('round', 0)}] {body}")
    if not lines and item.prediction.get("reasoning"):
        lines.append(str(item.prediction["reasoning"]))
    outputs = {k: v for k, v in item.prediction.items() if k != "reasoning"}
    lines.append("final: " + "; ".join(f"{k}: {v}" for k, v in outputs.items()))
    return "\n".join(lines)
