"""ProRefine's task role as DSPy sees it: the capped steps o_i, and the one answer an item ends on.

* A capped step (:func:`capped_step`) is one call of the task LM in the exact message format of the final answer —
  the task predictor's demos, the adapter in force, ``dspy.Refine``'s hint on a retry — cut at i·k tokens. It is an
  LM call (callbacks, history, usage), never a ``Predict`` call: a partial output is not an answer.
* The answer an item ends on is always one call of the task predictor (:func:`answer`), so it enters
  ``dspy.settings.trace`` and the callbacks as DSPy records a ``Predict`` call, and optimizers bootstrap task demos
  from it: the task predictor at full length with the refined prompt p*, or, when the last step ended with
  end-of-sequence, that step's own reply served to the predictor again (:class:`_Replay`: no second LM call, no
  usage counted twice). ProRefine keeps every other task call (an initial answer it refined) out of the trace.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from dataclasses import dataclass
from typing import Any, TypedDict

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_for.compat.dspy import call_with_messages, refine_hint
from dspy_for.errors import ConfigError
from dspy_for.lm.usage import role, track_usage
from dspy_for.modules import trajectory as T
from dspy_for.modules.role_predict import RolePredict, lm_in_use, naming_errors

__all__ = ["TaskOutput", "answer", "capped_step", "parses"]


class TaskOutput(TypedDict):
    """One capped task step: the text, how it ended, and the signature its messages were formatted with."""

    text: str
    finish_reason: str | None
    completion_tokens: int
    eos: bool
    messages_signature: type[dspy.Signature]


@dataclass(frozen=True)
class _Request:
    """A call of the task predictor with instruction p*: the adapter, signature and inputs it is formatted with."""

    adapter: Any
    signature: type[dspy.Signature]
    inputs: dict[str, Any]


def _request(task: dspy.Predict, prompt: str, inputs: dict[str, Any]) -> _Request:
    """The task predictor's call with instruction ``prompt``, as the adapter in force formats it; on a
    ``dspy.Refine`` retry, with the hint Refine gives the task predictor (its signature is not Refine's to name)."""
    signature = task.signature.with_instructions(prompt)
    hint = refine_hint(task.signature)
    if hint is None:
        return _Request(_adapter(task), signature, dict(inputs))
    hinted, hinted_inputs = hint.apply(signature, inputs)
    return _Request(hint.adapter, hinted, hinted_inputs)


def _adapter(task: dspy.Predict) -> Any:
    """The adapter a call of the task predictor formats and parses with (on a Refine retry: the one Refine wraps)."""
    hint = refine_hint(task.signature)
    return hint.adapter if hint is not None else dspy.settings.adapter or dspy.ChatAdapter()


def capped_step(task: dspy.Predict, prompt: str, inputs: dict[str, Any], max_tokens: int | None) -> TaskOutput:
    """One task-LM call in the exact message format of the final answer, capped at ``max_tokens``."""
    request = _request(task, prompt, inputs)
    messages = request.adapter.format(request.signature, task.demos, request.inputs)
    lm = lm_in_use(task) or dspy.settings.lm
    if lm is None:
        raise ConfigError("No LM for the `task` role: pass `task_lm=` or call dspy.configure(lm=...).")
    kwargs = {"max_tokens": max_tokens} if max_tokens else {}
    _install_step_filter()
    token = _CAPPED_STEP.set(True)
    try:
        with track_usage() as usage, role("task"), _named(task, lm):
            outputs = call_with_messages(lm, messages, **kwargs)
    finally:
        _CAPPED_STEP.reset(token)
    first = outputs[0] if outputs else ""
    text = first.get("text", "") if isinstance(first, dict) else str(first)
    call = usage.calls[-1] if usage.calls else None
    tokens = call.completion_tokens if call else len(text.split())
    reason = call.finish_reason if call else None
    # end-of-sequence: the server says "stop" AND the cap was not reached (some servers misreport)
    eos = reason == "stop" and (max_tokens is None or tokens < max_tokens)
    return {
        "text": text,
        "finish_reason": reason,
        "completion_tokens": tokens,
        "eos": eos,
        "messages_signature": request.signature,
    }


async def answer(
    calls: T.Calls, task: dspy.Predict, prompt: str, inputs: dict[str, Any], *, replay: str | None = None
) -> dspy.Prediction:
    """One call of the task predictor with instruction ``prompt``: at full length, or serving ``replay`` (a capped
    step's reply that ended with end-of-sequence) as the LM's reply."""
    request = _request(task, prompt, inputs)
    kwargs: dict[str, Any] = {**request.inputs, "signature": request.signature}
    if replay is not None:
        kwargs["lm"] = _Replay(replay, lm_in_use(task) or dspy.settings.lm)
    with dspy.context(adapter=request.adapter), role("task"):
        return await calls.predict(task, kwargs)


def _named(task: dspy.Predict, lm: Any) -> Any:
    """A capped step's LM error names the task role as the task predictor's own calls do."""
    return naming_errors(task, lm) if isinstance(task, RolePredict) else contextlib.nullcontext()


def parses(task: dspy.Predict, step: TaskOutput) -> bool:
    """Whether the adapter in force reads the task's outputs from a step's text."""
    try:
        _adapter(task).parse(step["messages_signature"], step["text"])
    except (AdapterParseError, ValueError):
        return False
    return True


class _Replay(dspy.BaseLM):
    """Answers a call with a reply the task LM already gave (a capped step's, ended with end-of-sequence): it calls
    no LM and records nothing (that step's own call was recorded), so the answer it holds is one ``Predict`` call."""

    def __init__(self, text: str, lm: Any) -> None:
        super().__init__(model=str(getattr(lm, "model", None) or "replay"), cache=False)
        self.text = text

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> list[str]:
        return [self.text]

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> list[str]:
        return [self.text]


_CAPPED_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("dspy_for_prorefine_capped_step", default=False)


class _CappedStepFilter(logging.Filter):
    """Drops DSPy's "LM response was truncated" warning for ProRefine's own capped step calls: being cut at
    i·k tokens is what a step asks for. Other calls (and other threads) keep the warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_CAPPED_STEP.get() and "truncated" in record.getMessage())


def _install_step_filter() -> None:
    logger = logging.getLogger("dspy.clients.lm")
    if not any(isinstance(f, _CappedStepFilter) for f in logger.filters):
        logger.addFilter(_CappedStepFilter())
