"""What served an LM call: one readable, stable identity string per serving stack.

* **A hosted model or any OpenAI-compatible endpoint**: the response's ``model`` (a hosted model's dated snapshot,
  e.g. ``gpt-4.1-mini-2025-04-14``) and, when the endpoint returns one, its ``system_fingerprint`` (the backend
  configuration that produced it): ``gpt-4.1-mini-2025-04-14 fp_44709d6fcb``. A ``model`` that only echoes the
  name the LM asked for, with no fingerprint, says nothing about what served the call: no identity.
* **The embedded llama.cpp server** (``local/<name>``): the model, the first 12 hex digits of the model file's
  SHA-256, the server build (llama.cpp's ``b<build>-<commit>``, as its responses' ``system_fingerprint`` give it;
  ``own-build`` added for a ``llama-server`` of the user's own) and the parallel slots it serves with (a batch of
  requests can change an answer at the last bit), known before any call:
  ``qwen2.5-coder-1.5b sha256:cc324af070c2 llama.cpp b0-0c1e57098 slots=4``.
* **A cache hit** reports the identity of the call it replays: a hosted response is kept whole by DSPy's cache (its
  ``model`` and ``system_fingerprint`` with it); the embedded server's answers are cached under its identity (the
  LM's cache namespace, :mod:`dspy_for.lm.factory`), so a replayed local answer was served by the stack the LM
  talks to now, and an answer another stack made (an older build, other slots, llama-cpp-python's server) is never
  replayed as its.

:func:`call_identity` is what the usage recorder keeps with every call (``CallRecord.served_by``);
:func:`stack_identity` is what an LM is known to be served by before it makes a call (the embedded server only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dspy_for.lm.registry import get_model

__all__ = [
    "SERVING_ATTR",
    "call_identity",
    "embedded_identity",
    "local_identity",
    "response_identity",
    "served_set",
    "stack_identity",
]

#: the attribute of an LM object that holds the identity of the stack serving it, when known before any call
SERVING_ATTR = "dspy_for_serving"
_SHA_DIGITS = 12


def local_identity(name: str, sha256: str, build: str, slots: int) -> str:
    """The embedded server's identity: ``<name> sha256:<first 12 hex digits> <build> slots=<slots>`` (``build``: e.g.
    ``llama.cpp b0-0c1e57098``; ``llama.cpp unknown`` when it is not known)."""
    return f"{name} sha256:{sha256[:_SHA_DIGITS].lower()} {build or 'llama.cpp unknown'} slots={slots}"


def embedded_identity(name: str, build: str, slots: int) -> str:
    """The identity of the embedded server of registry model ``name``, known without any call: the model file's
    SHA-256 as the registry pins it (a pulled file is verified against it), the server ``build`` and its ``slots``
    (what the running server reports: :class:`dspy_for.lm.server.ServerInfo`)."""
    return local_identity(name, get_model(name).sha256, build, slots)


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return value if isinstance(value, str) and value.strip() else None


def _asked(lm: Any) -> str:
    """The model name ``lm`` asks for, without its provider prefix (``openai/gpt-4.1-mini`` -> ``gpt-4.1-mini``)."""
    model = str(getattr(lm, "model", "") or "")
    return model.split("/", 1)[1] if "/" in model else model


def response_identity(response: Any, asked: str = "") -> str | None:
    """The identity a provider response states: its ``model`` and ``system_fingerprint``; None when it has no
    fingerprint and its ``model`` is missing or only echoes ``asked`` (the name the request gave)."""
    # DSPy's native responses keep the provider's body beside what they map (``provider_data``); litellm's keep
    # ``system_fingerprint`` as an attribute
    body = getattr(response, "provider_data", None) if not isinstance(response, Mapping) else None
    model = _get(response, "model") or _get(body, "model")
    fingerprint = _get(response, "system_fingerprint") or _get(body, "system_fingerprint")
    if fingerprint is not None:
        return f"{model or asked or 'unknown'} {fingerprint.strip()}".strip()
    if model is None or asked in {model.strip(), model.strip().split("/", 1)[-1]}:
        return None
    return model.strip()


def stack_identity(lm: Any) -> str | None:
    """The identity of the stack serving ``lm``, when it is known before any call (the embedded server's); else
    None (an endpoint says what serves it only in its responses)."""
    value = getattr(lm, SERVING_ATTR, None)
    return value if isinstance(value, str) and value else None


def call_identity(lm: Any, response: Any, *, cache_hit: bool) -> str | None:
    """The identity of the stack that served one call of ``lm`` whose response (as DSPy recorded it) is
    ``response``: the embedded server's, for a call it answered now or one DSPy's cache replays (cached under that
    identity: see the module docstring), else what the response states. ``cache_hit`` is kept for callers that
    tell the two apart; it changes nothing here."""
    known = stack_identity(lm)
    if known is not None:
        return known
    return response_identity(response, _asked(lm))


def served_set(identities: Iterable[str | None]) -> list[str]:
    """The distinct identities among ``identities`` (None left out), sorted: a record's ``served_by``."""
    return sorted({i for i in identities if i})
