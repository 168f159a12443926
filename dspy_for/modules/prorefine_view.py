"""How a ProRefine trajectory reads outside the module (:data:`PROREFINE_VIEW`): the step behind each LM call and the
refinement as ``dspy-for ask`` shows it."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from dspy_for.lm.usage import CallRecord
from dspy_for.modules.trajectory import CallName, ProRefineStep, Shown, TrajectoryView

__all__ = ["PROREFINE_VIEW", "prorefine_call_names", "prorefine_shown"]

_STEP_ROLES = ("task", "feedback", "optimizer")


def prorefine_call_names(steps: Sequence[Any], calls: Sequence[CallRecord]) -> list[CallName] | None:
    """``task (initial answer)``, ``verifier``, ``task step i``, ``feedback i``, ``optimizer i``, ``task (final
    answer)``: when the calls' roles match exactly one sequence Algorithm 1 makes for these steps — [initial answer
    [, verifier]], (task, feedback, optimizer) per step, [final answer] — and each step's call asked for the step's
    ``max_tokens`` (when that is known); else None."""
    if not steps or not all(isinstance(t, Mapping) and "step" in t for t in steps):
        return None
    roles = [c.role for c in calls]
    body = [r for _ in steps for r in _STEP_ROLES]
    fits = [
        (prefix, suffix)
        for prefix in ((), ("task",), ("task", "verifier"))
        for suffix in ((), ("task",))  # a final answer follows refinement only
        if [*prefix, *body, *suffix] == roles
    ]
    if len(fits) != 1:
        return None
    prefix, suffix = fits[0]
    out: list[CallName] = []
    if prefix:
        out.append(("task (initial answer)", {"dspy_for.turn": "initial answer"}))
    if "verifier" in prefix:
        parsed = {"initial_answer_judged_correct": not steps}  # judged wrong = refined
        out.append(("verifier", {"dspy_for.turn": "verifier", "dspy_for.parsed": parsed}))
    for s in steps:
        i = int(s.get("step", 0))
        rejected = s.get("rejected_reason")
        out += [
            (
                f"task step {i}",
                {
                    "dspy_for.turn": "task step",
                    "dspy_for.step": i,
                    "dspy_for.parsed": {"eos": s.get("eos"), "completion_tokens": s.get("completion_tokens")},
                },
            ),
            (
                f"feedback {i}",
                {
                    "dspy_for.turn": "feedback",
                    "dspy_for.step": i,
                    "dspy_for.parsed": {"feedback": s.get("feedback"), "is_correct": s.get("is_correct")},
                },
            ),
            (
                f"optimizer {i}",
                {
                    "dspy_for.turn": "optimizer",
                    "dspy_for.step": i,
                    "dspy_for.parsed": {
                        "improved_prompt": s.get("rejected_prompt") if rejected else s.get("new_prompt"),
                        "accepted": rejected is None,
                        "rejected_reason": rejected,
                    },
                },
            ),
        ]
    if suffix:
        out.append(("task (final answer)", {"dspy_for.turn": "final answer"}))
    step_calls = [c for c, (_, turn) in zip(calls, out, strict=True) if turn.get("dspy_for.turn") == "task step"]
    if any(_asked_other_tokens(c, s) for c, s in zip(step_calls, steps, strict=True)):
        return None
    return out


def _asked_other_tokens(call: CallRecord, step: Mapping[str, Any]) -> bool:
    """Whether a task-step call is known to have asked for another ``max_tokens`` than its step's."""
    if call.content is None:
        return False
    asked = (call.content.sent.get("kwargs") or {}).get("max_tokens")
    return asked is not None and step.get("max_tokens") is not None and asked != step["max_tokens"]


def prorefine_shown(pred: Mapping[str, Any]) -> list[Shown]:
    """Each step (tokens so far, partial output, feedback, the prompt's diff), whether it refined, the prompt p*."""
    out: list[Shown] = []
    previous = None
    steps: list[ProRefineStep] = pred.get("trajectory") or []
    for step in steps:
        prompt = step.get("prompt", "")
        diff = ""
        if previous is not None and step.get("new_prompt") is not None:
            diff = "\n".join(
                difflib.unified_diff(prompt.splitlines(), step["new_prompt"].splitlines(), lineterm="", n=0)
            )
        body = (
            f"[bold]tokens so far:[/] {step.get('completion_tokens')} ({step.get('finish_reason')})\n"
            f"[bold]partial output:[/] {step.get('output', '')}\n[bold]feedback:[/] {step.get('feedback', '')}"
        )
        if diff:
            body += f"\n[bold]prompt diff:[/]\n{diff}"
        out.append((f"step {step.get('step')}", body))
        previous = prompt
    stats = pred.get("stats") or {}
    out.append((None, f"refined: {stats.get('refined')}, steps used: {stats.get('steps_used')}"))
    if pred.get("refined_prompt"):
        out.append(("refined prompt p*", str(pred.get("refined_prompt"))))
    return out


PROREFINE_VIEW = TrajectoryView(call_names=prorefine_call_names, shown=prorefine_shown)
