"""dspy-for: FOR-Prompting and ProRefine as DSPy modules, compared with prompt optimizers."""

from __future__ import annotations

from dspy_for import _offline  # noqa: F401  (first: sets LITELLM_LOCAL_MODEL_COST_MAP before dspy/litellm)
from dspy_for.errors import ConfigError, DatasetError, DspyForError, MissingDependencyError, PathError
from dspy_for.lm import make_lm, resolve_lm, role, track_usage
from dspy_for.modules import FORPrompting, ProRefine, SelfConsistency
from dspy_for.optimizers import TextGrad, compile_program

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DatasetError",
    "DspyForError",
    "FORPrompting",
    "MissingDependencyError",
    "PathError",
    "ProRefine",
    "SelfConsistency",
    "TextGrad",
    "__version__",
    "compile_program",
    "make_lm",
    "resolve_lm",
    "role",
    "track_usage",
]
