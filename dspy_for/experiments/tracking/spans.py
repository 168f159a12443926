"""The LM-call spans inside one item's trace (no MLflow here: plain :class:`CallSpan` values).

One span per LM call the item made, in order, with the call's own start and end, what it sent and returned, its
model, tokens, cache hit, finish reason and outcome (:func:`call_spans`). A span is named after the call's role,
and after its turn where the method's trajectory says reliably which call made which turn:

* FOR-Prompting — ``defender A0``, ``debater r1`` (``debater r1 (re-ask)``), ``defender r1``, …, ``host``: when the
  roles of the calls, in order, are exactly those of the turns (one call per turn);
* ProRefine — ``task (initial answer)``, ``verifier``, ``task step i``, ``feedback i``, ``optimizer i``,
  ``task (final answer)``: when the calls' roles match the one sequence Algorithm 1 makes for the recorded steps
  (and each step's call asked for the step's ``max_tokens``, when that is known);
* otherwise (another method, an adapter's retry, a call the trajectory does not show) — the role, with the call's
  number within its role when the role made several: ``task``, ``task call 2``, ``judge``.

Nothing is guessed: a name from the trajectory is used only when every call lines up with it, and times are the
calls' own (no time is ever shared out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspy_for.compat.mlflow import CHAT_USAGE, LLM_MODEL
from dspy_for.jsonwalk import jsonable

if TYPE_CHECKING:
    from dspy_for.experiments.core import ItemResult
    from dspy_for.lm.usage import CallRecord

__all__ = ["CallSpan", "call_spans", "usage_attribute"]


@dataclass(frozen=True)
class CallSpan:
    """One LM call as a span: its name, the call (times, tokens, content), and what the trajectory adds."""

    name: str
    call: CallRecord
    turn: Mapping[str, Any]  # dspy_for.* attributes from the trajectory (turn, round, step, parsed fields)

    @property
    def start_ns(self) -> int | None:
        return None if self.call.started_at is None else int(self.call.started_at * 1e9)

    @property
    def end_ns(self) -> int | None:
        return None if self.call.ended_at is None else int(self.call.ended_at * 1e9)

    @property
    def chat(self) -> bool:
        """Whether the call sent chat messages (an MLflow ``CHAT_MODEL`` span) rather than a prompt (``LLM``)."""
        content = self.call.content
        return content is not None and "messages" in content.sent

    @property
    def inputs(self) -> Any:
        content = self.call.content
        return None if content is None else jsonable(content.sent)

    @property
    def outputs(self) -> Any:
        content = self.call.content
        return None if content is None else jsonable(content.returned)

    @property
    def error(self) -> str | None:
        """``Class: message`` of a failed call (the class alone when its message was not kept)."""
        c = self.call
        if c.ok:
            return None
        message = c.content.error if c.content is not None else None
        return f"{c.error or 'Error'}: {message}" if message else (c.error or "Error")

    @property
    def attributes(self) -> dict[str, Any]:
        c = self.call
        attrs: dict[str, Any] = {
            "dspy_for.role": c.role,
            "dspy_for.model": c.model,
            # MLflow prices a span that names its model: only a call that reached the LM spent anything
            **({} if c.cache_hit else {LLM_MODEL: c.model}),
            CHAT_USAGE: {
                "input_tokens": c.prompt_tokens,
                "output_tokens": c.completion_tokens,
                "total_tokens": c.prompt_tokens + c.completion_tokens,
            },
            "dspy_for.cache_hit": c.cache_hit,  # a cache hit's tokens are the original call's (served, not spent)
            "dspy_for.finish_reason": c.finish_reason,
            "dspy_for.ok": c.ok,
            "dspy_for.wall_time": c.wall_time,
            **({"dspy_for.error": c.error} if c.error else {}),
            **({} if c.content is not None else {"dspy_for.content": "not kept (the call's record has none)"}),
            **self.turn,
        }
        return jsonable(attrs)  # type: ignore[no-any-return]


def call_spans(item: ItemResult, calls: Sequence[CallRecord]) -> list[CallSpan]:
    """The spans of an item's LM calls, in order: the method's calls (the first ``usage.total.calls``), named by
    its trajectory when it lines up with them, then the judge's (see the module docstring)."""
    n_method = int((item.usage.get("total") or {}).get("calls", 0) or 0)
    method, judge = list(calls[:n_method]), list(calls[n_method:])
    traj = item.trajectory or []
    named: list[tuple[str, dict[str, Any]]] | None = None
    if traj and all(isinstance(t, Mapping) and "role" in t and "fields" in t for t in traj):
        named = _for_names(traj, method)
    elif traj and all(isinstance(t, Mapping) and "step" in t for t in traj):
        named = _prorefine_names(traj, method)
    named = named or _role_names(method)
    spans = [CallSpan(name, call, turn) for (name, turn), call in zip(named, method, strict=True)]
    return spans + [CallSpan(name, call, turn) for (name, turn), call in zip(_role_names(judge), judge, strict=True)]


def _role_names(calls: Sequence[CallRecord]) -> list[tuple[str, dict[str, Any]]]:
    """``role`` for a role's only call, ``role call k`` for the k-th of several."""
    totals: dict[str, int] = {}
    for c in calls:
        totals[c.role] = totals.get(c.role, 0) + 1
    seen: dict[str, int] = {}
    out: list[tuple[str, dict[str, Any]]] = []
    for c in calls:
        seen[c.role] = k = seen.get(c.role, 0) + 1
        out.append((c.role if totals[c.role] == 1 else f"{c.role} call {k}", {}))
    return out


def _for_names(
    traj: Sequence[Mapping[str, Any]], calls: Sequence[CallRecord]
) -> list[tuple[str, dict[str, Any]]] | None:
    """FOR turn names, when the calls' roles are exactly the turns' roles, in order (else None)."""
    if [c.role for c in calls] != [str(t["role"]) for t in traj]:
        return None
    out: list[tuple[str, dict[str, Any]]] = []
    for t in traj:
        role, kind, rnd, fields = str(t["role"]), str(t.get("type", "")), int(t.get("round", 0)), t["fields"]
        if kind == "answer":
            name = f"{role} A{rnd}"
        elif kind == "synthesis":
            name = role
        else:
            name = f"{role} r{rnd}"
            if kind == "questions" and fields.get("attempt"):
                name += " (re-ask)"
        turn: dict[str, Any] = {"dspy_for.turn": kind, "dspy_for.round": rnd, "dspy_for.parsed": fields}
        if fields.get("parse_error"):
            turn["dspy_for.parse_error"] = fields["parse_error"]
        out.append((name, turn))
    return out


_STEP_ROLES = ("task", "feedback", "optimizer")


def _prorefine_names(
    steps: Sequence[Mapping[str, Any]], calls: Sequence[CallRecord]
) -> list[tuple[str, dict[str, Any]]] | None:
    """ProRefine names, when the calls' roles match exactly one sequence Algorithm 1 makes for these steps:
    [initial answer [, verifier]], (task, feedback, optimizer) per step, [final answer] (else None)."""
    roles = [c.role for c in calls]
    body = [r for _ in steps for r in _STEP_ROLES]
    fits = [
        (prefix, suffix)
        for prefix in ((), ("task",), ("task", "verifier"))
        for suffix in (((), ("task",)) if steps else ((),))  # a final answer follows refinement only
        if [*prefix, *body, *suffix] == roles
    ]
    if len(fits) != 1:
        return None
    prefix, suffix = fits[0]
    out: list[tuple[str, dict[str, Any]]] = []
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


def usage_attribute(usage: Mapping[str, Any]) -> dict[str, Any]:
    """MLflow's token usage of a role (or the total): served tokens, i.e. spent plus served from cache."""
    if not usage:
        return {}
    prompt = int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("cached_prompt_tokens", 0) or 0)
    completion = int(usage.get("completion_tokens", 0) or 0) + int(usage.get("cached_completion_tokens", 0) or 0)
    return {CHAT_USAGE: {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}}
