"""DSPy internals dspy-for relies on, behind one small surface (DSPy 3.4.x).

- :func:`call_with_messages`: call an LM with adapter-formatted ``messages=`` through the adapter's own
  door (``dspy.clients._deprecation.adapter_message_call``), so DSPy 3.4 does not warn that the
  ``messages=`` path is deprecated. ProRefine needs it to send a step in the final answer's exact format.
"""

from __future__ import annotations

from typing import Any

__all__ = ["call_with_messages"]


def call_with_messages(lm: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """``lm(messages=messages, **kwargs)`` as DSPy's adapters make it (no deprecation warning)."""
    try:
        from dspy.clients._deprecation import adapter_message_call
    except ImportError:  # pragma: no cover - DSPy without the 3.4 migration shim
        return lm(messages=messages, **kwargs)
    with adapter_message_call(lm, messages):
        return lm(messages=messages, **kwargs)
