"""The inference-time methods as DSPy modules."""

from __future__ import annotations

from dspy_for.modules.for_prompting import FORPrompting

__all__ = ["FORPrompting"]
