"""The DSPy callback that records LM calls, and :func:`track_usage`, which opens a collector and installs it.

Per call (``on_lm_start`` → ``on_lm_end``) it finds the role, the call's start and end (Unix time, as it happens),
what it sent and returned, the billed usage (a per-call probe standing in for ``dspy.settings.usage_tracker``),
DSPy's history entry (finish reason; a cache hit's original tokens; what served the call:
:mod:`dspy_for.lm.serving`) and records one
:class:`~dspy_for.lm.usage_records.CallRecord` into every open collector. The full account is in
:mod:`dspy_for.lm.usage`.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from dspy_for.compat.dspy import find_history_entry, original_usage
from dspy_for.lm.pricing import call_cost
from dspy_for.lm.roles import current_role
from dspy_for.lm.serving import call_identity
from dspy_for.lm.usage_records import CONTENT_WINDOW, CallContent, CallRecord, Usage, UsageWarning

__all__ = ["finish_reason_of", "track_usage"]

_COLLECTORS_KEY = "dspy_for_usage_collectors"


class _Probe:
    """Stands in for ``dspy.settings.usage_tracker`` during one call: sees billed usage (never cache hits).

    Forwards to the tracker it replaced (e.g. ``dspy.track_usage()``), so DSPy's own accounting is unchanged.
    """

    def __init__(self, parent: Any) -> None:
        self.parent = parent
        self.billed: dict[str, Any] | None = None

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        usage = dict(usage_entry or {})
        if self.billed:  # several results (n > 1, or failed attempts): add them up
            for key in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens"):
                if isinstance(usage.get(key), int) or isinstance(self.billed.get(key), int):
                    usage[key] = int(usage.get(key) or 0) + int(self.billed.get(key) or 0)
        self.billed = usage
        if self.parent is not None:
            self.parent.add_usage(lm, usage_entry)

    def __bool__(self) -> bool:
        return True


@dataclass
class _Pending:
    lm: Any
    role: str
    collectors: tuple[Usage, ...]
    probe: _Probe
    context: AbstractContextManager[None]
    token: contextvars.Token[str | None]
    start: float  # time.perf_counter()
    started_at: float  # time.time()
    sent: dict[str, Any]


#: the id of the LM call being recorded in this context: LM calls nested inside it are not counted again
_ACTIVE_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar("dspy_for_active_lm_call", default=None)
_warned_models: set[str] = set()
_warned_lock = threading.Lock()


class _UsageRecorder(BaseCallback):
    """The DSPy callback that records every LM call into the open :func:`track_usage` collectors."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        collectors = dspy.settings.get(_COLLECTORS_KEY)
        if not collectors or _ACTIVE_CALL.get() is not None:
            return
        probe = _Probe(dspy.settings.get("usage_tracker"))
        # DSPy runs on_lm_start, the call and on_lm_end in the caller's context (thread or task): the
        # probe is visible to this call only and is removed in on_lm_end.
        context = dspy.context(usage_tracker=probe)
        context.__enter__()
        token = _ACTIVE_CALL.set(call_id)
        # what DSPy passed: prompt or messages, and the call's kwargs (references, not copies: DSPy builds them anew)
        sent = {k: v for k, v in inputs.items() if v is not None and not (k == "kwargs" and not v)}
        pending = _Pending(
            instance, current_role(), tuple(collectors), probe, context, token, time.perf_counter(), time.time(), sent
        )
        with self._lock:
            self._pending[call_id] = pending

    def on_lm_end(self, call_id: str, outputs: Any | None, exception: BaseException | None = None) -> None:
        with self._lock:
            pending = self._pending.pop(call_id, None)
        if pending is None:
            return
        wall, ended_at = time.perf_counter() - pending.start, time.time()
        # on_lm_end runs where on_lm_start ran (DSPy's wrapper calls both around the call), so these resets
        # cannot fail; if a caller ever drove them apart, recording the call still matters more
        with contextlib.suppress(ValueError, RuntimeError):
            _ACTIVE_CALL.reset(pending.token)
        with contextlib.suppress(ValueError, RuntimeError):
            pending.context.__exit__(None, None, None)
        call, missing = _call_record(pending, outputs, exception, wall, ended_at)
        for usage in pending.collectors:
            usage.record(call)
        if missing:
            _warn_once(call.model, missing)


_RECORDER = _UsageRecorder()


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _has_tokens(usage: Any) -> bool:
    return any(
        isinstance(_get(usage, k), int | float)
        for k in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
    )


def _tokens(usage: Any) -> tuple[int, int]:
    if not usage:
        return 0, 0
    p = _get(usage, "prompt_tokens") or _get(usage, "input_tokens") or 0
    c = _get(usage, "completion_tokens") or _get(usage, "output_tokens") or 0
    return int(p), int(c)


def _reasoning_tokens(usage: Any) -> int:
    """Reasoning tokens in a usage report: OpenAI's ``completion_tokens_details.reasoning_tokens`` or a flat
    ``reasoning_tokens`` (DSPy's native responses); 0 when the LM reports none."""
    if not usage:
        return 0
    value = _get(usage, "reasoning_tokens")
    if value is None:
        value = _get(_get(usage, "completion_tokens_details"), "reasoning_tokens")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _first_response(entry: Mapping[str, Any] | None) -> Any:
    if not entry:
        return None
    resp = entry.get("response")
    if isinstance(resp, list | tuple):
        return resp[0] if resp else None
    return resp


def finish_reason_of(response: Any) -> str | None:
    """Finish reason of a provider response, whichever shape DSPy stored it in."""
    if response is None:
        return None
    reason = _get(response, "finish_reason")
    if reason is None:
        choices = _get(response, "choices")
        if choices:
            reason = _get(choices[0], "finish_reason")
    if reason is None:
        return None
    return str(getattr(reason, "value", reason))


def _call_record(
    pending: _Pending, outputs: Any, exception: BaseException | None, wall: float, ended_at: float
) -> tuple[CallRecord, list[str]]:
    """The record of one finished call, and what the LM failed to report (for the once-per-model warning)."""
    lm = pending.lm
    ok = exception is None
    billed = pending.probe.billed
    try:
        entry = find_history_entry(lm, outputs) if ok else None
    except Exception:  # a history a custom LM keeps in another shape: billed usage only
        entry = None
    response = _first_response(entry)
    # DSPy reports billed usage for every call that was not served from its cache
    cache_hit = ok and (
        bool(getattr(response, "cache_hit", False))
        or (billed is None and (entry is not None or bool(getattr(lm, "cache", False))))
    )
    if cache_hit:
        sources: tuple[Any, ...] = ((entry or {}).get("usage"), original_usage(response), _get(response, "usage"))
    else:  # the entry's usage is this call's own; billed usage also has that of LM calls nested in it
        sources = ((entry or {}).get("usage"), billed, _get(response, "usage"))
    reported = next((s for s in sources if _has_tokens(s)), None)
    prompt_tokens, completion_tokens = _tokens(reported)
    reasoning = next((r for r in map(_reasoning_tokens, sources) if r), 0)
    finish = finish_reason_of(response)
    missing: list[str] = []
    if ok and not cache_hit:
        if reported is None:
            missing.append("token usage")
        if entry is not None and finish is None:
            missing.append("finish reason")
    call = CallRecord(
        role=pending.role,
        model=str(getattr(lm, "model", None) or type(lm).__name__),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cache_hit=cache_hit,
        finish_reason=finish,
        wall_time=wall,
        ok=ok,
        error=None if exception is None else type(exception).__name__,
        started_at=pending.started_at,
        ended_at=ended_at,
        reasoning_tokens=reasoning,
        cost=call_cost(lm, entry, prompt_tokens, completion_tokens) if ok else None,
        served_by=call_identity(lm, response, cache_hit=cache_hit) if ok else None,
        content=CallContent(
            sent=pending.sent,
            returned=outputs if ok else None,
            error=None if exception is None else str(exception),
        ),
    )
    return call, missing


def _warn_once(model: str, missing: list[str]) -> None:
    with _warned_lock:
        if model in _warned_models:
            return
        _warned_models.add(model)
    warnings.warn(
        f"LM `{model}` reports no {' and no '.join(missing)} for its calls. dspy-for needs them: ProRefine "
        "stops a step at end-of-sequence only when the LM reports finish_reason='stop', FOR-Prompting's "
        "`token_budget` counts reported tokens, and the token columns of reports stay 0 without usage. "
        "Return `usage` (prompt_tokens, completion_tokens) and `finish_reason` from the LM (an OpenAI-shaped "
        "response, or an lm15 Response from a custom engine). This warning is shown once per model.",
        UsageWarning,
        stacklevel=2,
    )


# ------------------------------------------------------------------------------------ public API


@contextmanager
def track_usage(*, content_window: int | None = CONTENT_WINDOW) -> Iterator[Usage]:
    """Collect every LM call made inside the block (and in DSPy worker threads it starts).

    ``content_window``: how many of the most recent calls keep what they sent and returned (``CallRecord.content``;
    None: every call, 0: none) — see :class:`~dspy_for.lm.usage_records.Usage`."""
    usage = Usage(content_window=content_window)
    collectors = (*(dspy.settings.get(_COLLECTORS_KEY) or ()), usage)
    callbacks = list(dspy.settings.get("callbacks") or [])
    if not any(cb is _RECORDER for cb in callbacks):
        callbacks.append(_RECORDER)
    with dspy.context(**{_COLLECTORS_KEY: collectors, "callbacks": callbacks}):
        yield usage
