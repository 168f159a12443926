"""dspy-for: FOR-Prompting and ProRefine as DSPy modules, compared with prompt optimizers.

Each public name is imported when it is first used (``import dspy_for`` alone loads neither DSPy nor litellm), so a
process that needs only part of the package — the command line before it knows its command, the tracking process of
a run — pays only for that part.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dspy_for import _offline  # noqa: F401  (first: sets LITELLM_LOCAL_MODEL_COST_MAP before dspy/litellm)
from dspy_for.errors import ConfigError, DatasetError, DspyForError, MissingDependencyError, PathError

if TYPE_CHECKING:
    from dspy_for.lm import make_lm, resolve_lm, role, track_usage
    from dspy_for.modules import FORPrompting, ProRefine, SelfConsistency
    from dspy_for.optimizers import TextGrad, compile_program

__version__ = "0.1.0"

#: each public name that is not loaded with the package, and the module it is imported from when first used
_WHERE = {
    **dict.fromkeys(["make_lm", "resolve_lm", "role", "track_usage"], "lm"),
    **dict.fromkeys(["FORPrompting", "ProRefine", "SelfConsistency"], "modules"),
    **dict.fromkeys(["TextGrad", "compile_program"], "optimizers"),
}

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


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
