"""What served an LM call: one readable, stable identity string per serving stack.

* **A hosted model or any OpenAI-compatible endpoint**: the response's ``model`` (a hosted model's dated snapshot,
  e.g. ``gpt-4.1-mini-2025-04-14``) and, when the endpoint returns one, its ``system_fingerprint`` (the backend
  configuration that produced it): ``gpt-4.1-mini-2025-04-14 fp_44709d6fcb``. A ``model`` that only echoes the
  name the LM asked for, with no fingerprint, says nothing about what served the call: no identity.
* **The embedded llama.cpp server** (``local/<name>``): the model, the first 12 hex digits of the model file's
  SHA-256 and the llama-cpp-python version the server runs, known before any call:
  ``qwen2.5-coder-1.5b sha256:cc324af070c2 llama-cpp-python 0.3.36``.
* **A cache hit** reports the identity of the call it replays when DSPy's cache kept it: a hosted response is kept
  whole (its ``model`` and ``system_fingerprint`` with it). The embedded server's answers are kept without the
  llama-cpp-python build that produced them, so a replayed local answer reports none.

:func:`call_identity` is what the usage recorder keeps with every call (``CallRecord.served_by``);
:func:`stack_identity` is what an LM is known to be served by before it makes a call (the embedded server only).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping
from typing import Any

from dspy_for.lm.registry import get_model

__all__ = [
    "SERVING_ATTR",
    "call_identity",
    "embedded_identity",
    "llama_cpp_version",
    "local_identity",
    "response_identity",
    "served_set",
    "stack_identity",
]

#: the attribute of an LM object that holds the identity of the stack serving it, when known before any call
SERVING_ATTR = "dspy_for_serving"
_SHA_DIGITS = 12


def llama_cpp_version() -> str | None:
    """The installed llama-cpp-python's version (what ``dspy_for.lm.server`` starts the embedded server with)."""
    try:
        return importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return None


def local_identity(name: str, sha256: str, version: str | None) -> str:
    """The embedded server's identity: ``<name> sha256:<first 12 hex digits> llama-cpp-python <version>``
    (``unknown`` for a version that is not known)."""
    return f"{name} sha256:{sha256[:_SHA_DIGITS].lower()} llama-cpp-python {version or 'unknown'}"


def embedded_identity(name: str, version: str | None = None) -> str:
    """The identity of the embedded server of registry model ``name``, known without any call: the model file's
    SHA-256 as the registry pins it (a pulled file is verified against it) and ``version``, the llama-cpp-python
    the server runs (default: the one installed here, which :mod:`dspy_for.lm.server` starts it with)."""
    return local_identity(name, get_model(name).sha256, version or llama_cpp_version())


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
    ``response``: the embedded server's for a call it answered now (none for one DSPy's cache replays: see the
    module docstring), else what the response states."""
    known = stack_identity(lm)
    if known is not None:
        return None if cache_hit else known
    return response_identity(response, _asked(lm))


def served_set(identities: Iterable[str | None]) -> list[str]:
    """The distinct identities among ``identities`` (None left out), sorted: a record's ``served_by``."""
    return sorted({i for i in identities if i})
