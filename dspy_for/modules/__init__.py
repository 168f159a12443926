"""The inference-time methods as DSPy modules."""

from __future__ import annotations

from dspy_for.modules.for_prompting import FORPrompting
from dspy_for.modules.prorefine import ProRefine, export_program
from dspy_for.modules.self_consistency import SelfConsistency

__all__ = ["FORPrompting", "ProRefine", "SelfConsistency", "export_program"]
