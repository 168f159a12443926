"""Experiments: the method registry, comparisons and sweeps (MLflow / Optuna live only here).

``dspy_for.experiments.compare(config, **overrides)`` and ``dspy_for.experiments.sweep(config, **overrides)``
are the library calls behind ``dspy-for compare`` and ``dspy-for sweep`` (modules ``comparison`` and
``sweeps``).
"""

from __future__ import annotations

from dspy_for.experiments.comparison import ComparisonResult, compare
from dspy_for.experiments.methods import MethodSpec, build_method, get_method, list_methods, register_method
from dspy_for.experiments.sweeps import SweepResult, sweep

__all__ = [
    "ComparisonResult",
    "MethodSpec",
    "SweepResult",
    "build_method",
    "compare",
    "get_method",
    "list_methods",
    "register_method",
    "sweep",
]
