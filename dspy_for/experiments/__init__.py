"""Experiments: the one run path, the method registry, comparisons and sweeps (MLflow / Optuna live only
here, imported lazily).

``dspy_for.experiments.compare(config, **overrides)`` and ``dspy_for.experiments.sweep(config, **overrides)``
are the library calls behind ``dspy-for compare`` and ``dspy-for sweep``; both run every item through
:func:`~dspy_for.experiments.run.prepare_run` and :func:`~dspy_for.experiments.run.evaluate`.
"""

from __future__ import annotations

from dspy_for.experiments.comparison import ComparisonResult, compare
from dspy_for.experiments.config import load_spec
from dspy_for.experiments.methods import MethodSpec, build_method, get_method, list_methods, register_method
from dspy_for.experiments.records import ItemResult, MethodResult, ResultStore
from dspy_for.experiments.run import PreparedRun, evaluate, load_examples, prepare_run
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig, RunSpec
from dspy_for.experiments.sweep_spec import SweepSpec, load_sweep_spec
from dspy_for.experiments.sweeps import SweepResult, sweep

__all__ = [
    "ComparisonResult",
    "DatasetConfig",
    "ExperimentSpec",
    "ItemResult",
    "MethodConfig",
    "MethodResult",
    "MethodSpec",
    "PreparedRun",
    "ResultStore",
    "RunSpec",
    "SweepResult",
    "SweepSpec",
    "build_method",
    "compare",
    "evaluate",
    "get_method",
    "list_methods",
    "load_examples",
    "load_spec",
    "load_sweep_spec",
    "prepare_run",
    "register_method",
    "sweep",
]
