"""DSPy internals dspy-for relies on, behind one small surface (DSPy >=3.4.1,<3.5).

- :func:`call_with_messages`: call an LM with adapter-formatted ``messages=`` through the adapter's own
  door (``dspy.clients._deprecation.adapter_message_call``), so DSPy 3.4 does not warn that the
  ``messages=`` path is deprecated. ProRefine needs it to send a step in the final answer's exact format.
  :func:`relayed_message_call` passes that door on from a wrapping LM to the LM it wraps (``RoleLM``).
- :class:`UsageKeepingCache`: DSPy's ``dspy.clients.cache.Cache`` whose private
  ``_prepare_cached_response`` (which clears ``usage`` on a hit) also stamps the original call's usage
  on the returned copy, read back with :func:`original_usage`. So a cache hit can report what the
  original call cost.
- :func:`call_once` / :func:`acall_once`: one attempt of an LM call without DSPy's callbacks (the body that
  ``with_callbacks`` keeps as ``__wrapped__``), so :mod:`dspy_for.lm.transport` can retry inside one recorded call.
- :func:`is_openai_reasoning_model`: DSPy's rule for the models that take only temperature 1.
- :func:`find_history_entry`: the history entry DSPy's ``finalize`` appended to ``lm.history`` for one
  call, found by the identity of the outputs the call returned (entry keys ``outputs``/``response``/``usage``).
- :func:`attribute_path`: where a module sits in the program being called (``solver.debate.debater``), read from the
  modules whose calls are running in this thread (DSPy's ``settings.caller_modules``, which ``Module.__call__``
  extends), to name a role by its place in a user's program.
- :func:`refine_hint`: ``dspy.Refine``'s advice for one predictor on a retry, read from the closure of the
  ``WrapperAdapter`` that ``Refine.forward`` installs (``adapter``, ``advice``, ``signature2name``). Refine finds a
  predictor by the identity of the signature it is called with, so a call with a signature of its own (ProRefine's
  refined instruction p*) gets no hint from it; :class:`RefineHint` applies the hint as ``WrapperAdapter`` does.

:func:`check_supported` fails loudly, naming the supported range, when the installed DSPy lacks any of it.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.clients.cache import Cache
from dspy.utils.callback import BaseCallback

try:
    from dspy.clients._deprecation import _adapter_call
    from dspy.clients._deprecation import adapter_message_call as _adapter_message_call
except ImportError:  # pragma: no cover - DSPy without the 3.4 migration shim
    _adapter_message_call = _adapter_call = None

__all__ = [
    "SUPPORTED_DSPY",
    "RefineHint",
    "UnsupportedDSPyError",
    "UsageKeepingCache",
    "acall_once",
    "attribute_path",
    "call_once",
    "call_with_messages",
    "check_supported",
    "find_history_entry",
    "gepa_auto_metric_calls",
    "is_openai_reasoning_model",
    "original_usage",
    "refine_hint",
    "relayed_message_call",
]

#: the DSPy versions dspy-for is tested with (pyproject's pin)
SUPPORTED_DSPY = ">=3.4.1,<3.5"

_ORIGINAL_USAGE_ATTR = "_dspy_for_original_usage"
_HISTORY_SCAN = 512  # recent entries scanned first (threads append concurrently); then the whole history


class UnsupportedDSPyError(RuntimeError):
    """The installed DSPy lacks an internal API dspy-for relies on."""


def call_with_messages(lm: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """``lm(messages=messages, **kwargs)`` as DSPy's adapters make it (no deprecation warning)."""
    if _adapter_message_call is None:  # pragma: no cover - DSPy without the 3.4 migration shim
        return lm(messages=messages, **kwargs)
    with _adapter_message_call(lm, messages):
        return lm(messages=messages, **kwargs)


@contextlib.contextmanager
def relayed_message_call(outer: Any, inner: Any, messages: Any) -> Any:
    """Inside a wrapping LM's ``__call__``/``acall``: if an adapter called ``outer`` with these ``messages``,
    the wrapped ``inner`` receives them through the adapter's door too; any other call still warns."""
    origin = _adapter_call.get() if _adapter_call is not None else None
    if _adapter_message_call is None or origin is None or origin[0] is not outer or origin[1] is not messages:
        yield
        return
    with _adapter_message_call(inner, messages):
        yield


def _plain_usage(usage: Any) -> dict[str, Any] | None:
    """``{"prompt_tokens", "completion_tokens", "total_tokens"}`` of a provider usage object, if it has any."""
    if not usage:
        return None
    out: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens"):
        val = usage.get(key) if isinstance(usage, Mapping) else getattr(usage, key, None)
        if isinstance(val, int | float) and not isinstance(val, bool):
            out[key] = int(val)
    details = usage.get("completion_tokens_details") if isinstance(usage, Mapping) else None
    details = details if details is not None else getattr(usage, "completion_tokens_details", None)
    reasoning = (
        details.get("reasoning_tokens") if isinstance(details, Mapping) else getattr(details, "reasoning_tokens", None)
    )
    if out and isinstance(reasoning, int) and not isinstance(reasoning, bool) and reasoning:
        out["reasoning_tokens"] = reasoning
    return out or None


class UsageKeepingCache(Cache):
    """DSPy's cache; a hit also carries the original call's usage (``original_usage(response)``).

    DSPy clears ``usage`` on the copy it returns for a hit (``Cache._prepare_cached_response``), because
    no tokens were billed. The stored response still has it, so the copy is stamped with it before
    DSPy clears it. Responses DSPy stores as plain records (its native lm15 path) keep their usage in
    the stored ``Response`` and need no stamp.
    """

    def _prepare_cached_response(self, response: Any) -> Any:
        original = _plain_usage(getattr(response, "usage", None)) if hasattr(response, "usage") else None
        prepared = super()._prepare_cached_response(response)
        if original is not None and prepared is not None:
            # like DSPy's own ``cache_hit`` marker: strict pydantic models reject undeclared attributes
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(prepared, _ORIGINAL_USAGE_ATTR, original)
        return prepared


def original_usage(response: Any) -> dict[str, Any] | None:
    """The usage a cached response had when it was stored (stamped by :class:`UsageKeepingCache`)."""
    if response is None:
        return None
    usage = getattr(response, _ORIGINAL_USAGE_ATTR, None)
    return dict(usage) if isinstance(usage, Mapping) else None


def find_history_entry(lm: Any, outputs: Any) -> dict[str, Any] | None:
    """The ``lm.history`` entry of the call that returned ``outputs`` (matched by identity), or None.

    DSPy appends one entry per call (``dspy.clients.execution.finalize``) whose ``outputs`` is the very
    list the call returns (``response`` for a typed ``Request`` call). Threads sharing one LM append
    concurrently, so identity, not position, finds the entry. None when history is disabled.
    """
    if outputs is None:
        return None
    history = getattr(lm, "history", None)
    if not isinstance(history, list) or not history:
        return None
    recent = history[-_HISTORY_SCAN:]  # a slice copy is atomic under the GIL
    for candidates in (recent, list(history) if len(history) > _HISTORY_SCAN else []):
        for entry in reversed(candidates):
            if isinstance(entry, dict) and (entry.get("outputs") is outputs or entry.get("response") is outputs):
                return entry
    return None


def attribute_path(module: Any) -> str | None:
    """Where ``module`` sits in the program being called (``solver.debate.debater``): its attribute path from the
    outermost module being called that holds it, through each module calling it; None outside such a call."""
    chain = list(getattr(dspy.settings, "caller_modules", None) or [])
    if not chain or chain[-1] is not module:
        chain.append(module)
    parts: list[str] = []
    for parent, child in reversed(list(itertools.pairwise(chain))):
        name = next((n for n, m in parent.named_sub_modules() if m is child and n != "self"), None)
        if name is None:  # a copy its caller made (dspy.BestOfN's attempts): the path starts below it
            break
        parts.insert(0, name.removeprefix("self."))
    return ".".join(parts) or None


def gepa_auto_metric_calls(auto: str, predictors: int, valset_size: int) -> int:
    """The metric calls ``dspy.GEPA(auto=...)`` budgets for a program of ``predictors`` predictors and a validation
    set of ``valset_size`` items, as its ``compile`` works them out (``auto_budget`` with ``AUTO_RUN_SETTINGS``'
    candidates; ``auto_budget`` reads nothing of the instance)."""
    from dspy.teleprompt.gepa.gepa import AUTO_RUN_SETTINGS

    budget: Any = dspy.GEPA.auto_budget
    return int(budget(None, max(predictors, 1), AUTO_RUN_SETTINGS[auto]["n"], valset_size))


def check_supported() -> None:
    """Raise :class:`UnsupportedDSPyError` (naming the supported range) if this DSPy lacks what dspy-for uses."""
    missing: list[str] = []
    prepare = getattr(Cache, "_prepare_cached_response", None)
    if not callable(prepare):
        missing.append("dspy.clients.cache.Cache._prepare_cached_response")
    for hook in ("on_lm_start", "on_lm_end"):
        if not callable(getattr(BaseCallback, hook, None)):
            missing.append(f"dspy.utils.callback.BaseCallback.{hook}")
    for name in ("context", "settings", "BaseLM"):
        if not hasattr(dspy, name):
            missing.append(f"dspy.{name}")
    if not hasattr(getattr(dspy, "BaseLM", None), "update_history"):
        missing.append("dspy.BaseLM.update_history")
    if _UNDECORATED_CALL is None or _UNDECORATED_ACALL is None:
        missing.append("dspy.BaseLM.__call__.__wrapped__ (DSPy's with_callbacks)")
    if _refine_wrapper_vars() != _REFINE_WRAPPER_VARS:
        missing.append(f"dspy.Refine.forward's WrapperAdapter.__call__ over {', '.join(_REFINE_WRAPPER_VARS)}")
    if missing:
        version = getattr(dspy, "__version__", "unknown")
        raise UnsupportedDSPyError(
            f"dspy-for supports DSPy {SUPPORTED_DSPY}, but the installed DSPy {version} lacks "
            f"{', '.join(f'`{m}`' for m in missing)}. Install a supported version: pip install 'dspy{SUPPORTED_DSPY}'."
        )


# ------------------------------------------------------------------------------------- one attempt of a call


def call_once(lm: Any, prompt: Any, messages: Any, kwargs: dict[str, Any]) -> Any:
    """One attempt of ``lm(prompt, messages=messages, **kwargs)`` without DSPy's callbacks: the body of
    ``dspy.BaseLM.__call__`` (``with_callbacks`` keeps it as ``__wrapped__``). A transport that retries a call
    runs each attempt through this, inside one callback-wrapped call, so a retried call is recorded once."""
    return _UNDECORATED_CALL(lm, prompt, messages=messages, **kwargs)


async def acall_once(lm: Any, prompt: Any, messages: Any, kwargs: dict[str, Any]) -> Any:
    """The async :func:`call_once` (the body of ``dspy.BaseLM.acall``)."""
    return await _UNDECORATED_ACALL(lm, prompt, messages=messages, **kwargs)


_UNDECORATED_CALL: Any = getattr(dspy.BaseLM.__call__, "__wrapped__", None)
_UNDECORATED_ACALL: Any = getattr(dspy.BaseLM.acall, "__wrapped__", None)


def is_openai_reasoning_model(model: str) -> bool:
    """Whether DSPy treats ``model`` as an OpenAI reasoning model (o1/o3/o4/o5 families, every gpt-5 but -chat):
    temperature 1.0 or None and a completion budget of at least 16,000 tokens."""
    from dspy.clients import lm as dspy_lm

    check = getattr(dspy_lm, "_is_openai_reasoning_model", None)
    if callable(check):
        return bool(check(model))
    family = model.split("/")[-1].lower()  # pragma: no cover - the rule as DSPy 3.4.1 writes it
    return re.match(_REASONING_FAMILY, family) is not None


_REASONING_FAMILY = r"^(?:o[1345](?:-(?:mini|nano|pro))?(?:-\d{4}-\d{2}-\d{2})?|gpt-5(?:\.\d+)*(?!-chat)(?:-.*)?)$"


# ------------------------------------------------------------------------------------- dspy.Refine's hint

_REFINE_WRAPPER = "Refine.forward.<locals>.WrapperAdapter"
_REFINE_WRAPPER_VARS = ("adapter", "advice", "signature2name")
_REFINE_HINT_FIELD = "hint_"
_REFINE_HINT_DESC = "A hint to the module from an earlier run"


@dataclass(frozen=True)
class RefineHint:
    """``dspy.Refine``'s hint for one predictor on a retry with advice, and the adapter Refine wrapped."""

    adapter: Any
    text: str

    def apply(self, signature: Any, inputs: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``signature`` and ``inputs`` as Refine's ``WrapperAdapter`` hands them to the adapter it wraps."""
        hinted = signature.append(_REFINE_HINT_FIELD, dspy.InputField(desc=_REFINE_HINT_DESC))
        return hinted, {**inputs, _REFINE_HINT_FIELD: self.text}


def refine_hint(own_signature: Any) -> RefineHint | None:
    """The hint ``dspy.Refine`` gives the predictor whose own signature is ``own_signature`` ("N/A" when its advice
    names no such predictor), when the adapter in force is the ``WrapperAdapter`` of a Refine retry; else None."""
    adapter = dspy.settings.adapter
    call: Any = vars(type(adapter)).get("__call__")
    code = getattr(call, "__code__", None)
    if (
        type(adapter).__qualname__ != _REFINE_WRAPPER
        or code is None
        or tuple(sorted(code.co_freevars)) != (_REFINE_WRAPPER_VARS)
    ):
        return None
    cells = {name: cell.cell_contents for name, cell in zip(code.co_freevars, call.__closure__, strict=True)}
    text = cells["advice"].get(cells["signature2name"].get(own_signature), "N/A")
    return RefineHint(cells["adapter"], str(text))


def _refine_wrapper_vars() -> tuple[str, ...] | None:
    """The free variables of ``WrapperAdapter.__call__`` as ``Refine.forward`` defines it (None: no such class)."""
    from dspy.predict.refine import Refine

    stack = [Refine.forward.__code__]
    while stack:
        code = stack.pop()
        if code.co_qualname == f"{_REFINE_WRAPPER}.__call__":
            return tuple(sorted(code.co_freevars))
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return None
