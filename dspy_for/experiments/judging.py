"""Grading a run's items with its judge (the spec's ``[judge]``): one call per scored item, stored with the item,
never part of the method's own usage."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import dspy

from dspy_for.datasets import content_key
from dspy_for.experiments.records import ItemResult, ResultStore
from dspy_for.lm.usage import track_usage
from dspy_for.secrets import redact

if TYPE_CHECKING:
    from dspy_for.experiments.run import PreparedRun

__all__ = ["judge_items", "judged_text"]

logger = logging.getLogger("dspy_for.experiments")


def judge_items(
    run: PreparedRun, items: list[ItemResult], store: ResultStore | None, progress: bool
) -> list[ItemResult]:
    """Grade every scored item that has no verdict of this judge yet (fresh ones, and reused ones judged by
    no or another judge) — the method is not run again; the verdict and the judge's usage go to the store."""
    assert run.judge is not None
    todo = [i for i, item in enumerate(items) if not item.failed and _needs_verdict(item.judge, run.judge_name)]
    examples = {content_key(ex.get("question"), ex.get("answer")): ex for ex in run.examples}
    for n, i in enumerate(todo, start=1):
        item = items[i]
        example = examples.get(item.key) or dspy.Example(question=item.question, answer=item.gold)
        with track_usage() as usage:
            try:
                verdict = run.judge(example, dspy.Prediction(**item.prediction), judged_text(item)).to_dict()
            except Exception as exc:  # the judge's LM failed: an error, graded again on the next run
                verdict = {"correct": None, "method": "error", "error": redact(f"{type(exc).__name__}: {exc}")}
        items[i] = replace(item, judge={**verdict, "lm": run.judge_name}, judge_usage=usage.to_dict())
        if store is not None:
            store.append(items[i])
        if progress and (n % 10 == 0 or n == len(todo)):
            logger.info("judged %d/%d items of %s", n, len(todo), run.method.label)
    return items


def _needs_verdict(verdict: dict[str, Any] | None, judge_name: str) -> bool:
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
