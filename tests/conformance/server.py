"""The fault-injecting OpenAI-compatible test server, now :mod:`dspy_for.testing.server` (re-exported here)."""

from __future__ import annotations

from dspy_for.testing.server import (
    FAULTS,
    IDLE_SECONDS,
    STALL_SECONDS,
    FaultServer,
    OpenAICompatibleServer,
    Responder,
    format_fields,
)

__all__ = [
    "FAULTS",
    "IDLE_SECONDS",
    "STALL_SECONDS",
    "FaultServer",
    "OpenAICompatibleServer",
    "Responder",
    "format_fields",
]
