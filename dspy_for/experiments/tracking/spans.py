"""The LM-call spans inside one item's trace (no MLflow here: plain :class:`CallSpan` values).

One span per LM call the item made, in order, with the call's own start and end, what it sent and returned, its
model, tokens, cache hit, finish reason and outcome (:func:`call_spans`). A span is named after the call's turn
where the method's trajectory says reliably which call made which turn — the method's registry entry declares how
(its :class:`~dspy_for.modules.trajectory.TrajectoryView`: e.g. ``defender A0``, ``debater r1``, ``host``; ``task
step i``, ``feedback i``, ``optimizer i``) — and otherwise (a method without one, an adapter's retry, a call the
trajectory does not show) after its role, with the call's number within its role when the role made several:
``task``, ``task call 2``, ``judge``. A method built on a module with roles names the module first, as DSPy's
traces name each role's predictor (``FORPrompting.debater r1``, ``ProRefine.task step 2``; the module also as
``dspy_for.module``); a judge's calls are the judge's.

Nothing is guessed: a name from the trajectory is used only when every call lines up with it, and times are the
calls' own (no time is ever shared out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspy_for.compat.mlflow import CHAT_USAGE, LLM_COST, LLM_MODEL
from dspy_for.experiments.methods import get_method, list_methods
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
            # a call that reached the LM and was priced: MLflow's model and cost are the run's own. A call nobody
            # priced names its model as dspy_for.model only: MLflow would look a price up for a span that names
            # it (a provider's price for a model the user serves) where the run reports none
            **(
                {LLM_MODEL: c.model, LLM_COST: {"total_cost": c.cost}} if c.cost is not None and not c.cache_hit else {}
            ),
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


def call_spans(item: ItemResult, calls: Sequence[CallRecord], method: str | None = None) -> list[CallSpan]:
    """The spans of an item's LM calls, in order: the method's calls (the first ``usage.total.calls``), named by
    its trajectory when it lines up with them, then the judge's (see the module docstring). ``method``: the registry
    name whose trajectory view names the calls (None: the first registered view they line up with)."""
    n_method = int((item.usage.get("total") or {}).get("calls", 0) or 0)
    own, judge = list(calls[:n_method]), list(calls[n_method:])
    traj = item.trajectory or []
    views = [get_method(method).view] if method is not None else [m.view for m in list_methods()]
    named = None
    for view in dict.fromkeys(v for v in views if v is not None):
        named = named or view.call_names(traj, own)
    module = getattr(get_method(method).module, "__name__", None) if method is not None else None
    spans = [
        CallSpan(
            f"{module}.{name}" if module else name, call, {**turn, **({"dspy_for.module": module} if module else {})}
        )
        for (name, turn), call in zip(named or _role_names(own), own, strict=True)
    ]
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


def usage_attribute(usage: Mapping[str, Any]) -> dict[str, Any]:
    """MLflow's token usage of a role (or the total): served tokens, i.e. spent plus served from cache."""
    if not usage:
        return {}
    prompt = int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("cached_prompt_tokens", 0) or 0)
    completion = int(usage.get("completion_tokens", 0) or 0) + int(usage.get("cached_completion_tokens", 0) or 0)
    return {CHAT_USAGE: {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}}
