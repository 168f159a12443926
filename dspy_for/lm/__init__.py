"""LM layer: building LMs from specs, the local model registry and server, usage accounting."""

from __future__ import annotations

from dspy_for.lm.factory import LM, LocalLM, configure_cache, describe_lm, make_lm, resolve_lm
from dspy_for.lm.usage import Usage, role, track_usage

__all__ = ["LM", "LocalLM", "Usage", "configure_cache", "describe_lm", "make_lm", "resolve_lm", "role", "track_usage"]
