"""Experiments: the one run path, the method registry, comparisons and sweeps (MLflow / Optuna live only
here, imported lazily).

``dspy_for.experiments.compare(config, **overrides)``, ``dspy_for.experiments.sweep(config, **overrides)`` and
``dspy_for.experiments.advise(lm=..., budget=..., dataset=... | data=...)`` are the library calls behind
``dspy-for compare``, ``dspy-for sweep`` and ``dspy-for advise``; ``load_results(config)`` rebuilds a comparison's
result from its stored records (no LM call; ``dspy-for export``; several configs: one :class:`ComparisonResults`),
and every result has ``to_pandas(level=...)``.
All three — and ``ask``, the sweep's final test and the measurement scripts — prepare each method with
:func:`prepare_run` and stream its items through the run core (:func:`evaluate` / :class:`Evaluation`), whose
records land in sinks as they finish; :func:`summarize` is the one record-to-summary function every table, MLflow
run and sweep objective reads; every number it holds is declared once, where :class:`Summary` holds it
(:mod:`.spec.measures`).

What they return shares one shape (:class:`RunOutcome`: items scored, failed, unparsed, what was spent, whether
``max_cost`` stopped it, ok). Layout: :mod:`.spec` (the typed run specification, config parsing and the run
settings, each declared once in :mod:`.spec.settings`) · :mod:`.methods` (the registry) ·
:mod:`.core` (prepare, evaluate, records, results store, summary) · :mod:`.tracking` (MLflow runs, traces, UI) ·
:mod:`.reports` (tables and plots, pure functions of results) · :mod:`.comparison` · :mod:`.sweeps` · :mod:`.advise`.

Each name is imported when it is first used (``from dspy_for.experiments import compare`` loads the comparison, not
the sweeps or advise), so a command pays only for what it runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dspy_for.experiments.advisor import Advice, advise
    from dspy_for.experiments.comparison import ComparisonResult, compare
    from dspy_for.experiments.core import (
        Evaluation,
        ItemResult,
        MethodResult,
        PreparedRun,
        ResultStore,
        evaluate,
        load_examples,
        prepare_run,
    )
    from dspy_for.experiments.core.outcome import ComparisonResults, RunOutcome
    from dspy_for.experiments.core.plan import RunPlan
    from dspy_for.experiments.core.recheck import Recheck
    from dspy_for.experiments.core.summarize import summarize
    from dspy_for.experiments.core.summary import Summary
    from dspy_for.experiments.methods import MethodEntry, build_method, get_method, list_methods, register_method
    from dspy_for.experiments.results import load_results
    from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig, RunSpec, load_spec
    from dspy_for.experiments.sweeps import SweepResult, SweepSpec, load_sweep_spec, sweep

#: each public name and the module it is imported from when first used
_WHERE = {
    "Advice": "advisor",
    "advise": "advisor",
    "ComparisonResult": "comparison",
    "compare": "comparison",
    **dict.fromkeys(
        [
            "Evaluation",
            "ItemResult",
            "MethodResult",
            "PreparedRun",
            "ResultStore",
            "evaluate",
            "load_examples",
            "prepare_run",
        ],
        "core",
    ),
    "ComparisonResults": "core.outcome",
    "RunOutcome": "core.outcome",
    "RunPlan": "core.plan",
    "Recheck": "core.recheck",
    "Summary": "core.summary",
    "summarize": "core.summarize",
    **dict.fromkeys(["MethodEntry", "build_method", "get_method", "list_methods", "register_method"], "methods"),
    "load_results": "results",
    **dict.fromkeys(["DatasetConfig", "ExperimentSpec", "MethodConfig", "RunSpec", "load_spec"], "spec"),
    **dict.fromkeys(["SweepResult", "SweepSpec", "load_sweep_spec", "sweep"], "sweeps"),
}

__all__ = [
    "Advice",
    "ComparisonResult",
    "ComparisonResults",
    "DatasetConfig",
    "Evaluation",
    "ExperimentSpec",
    "ItemResult",
    "MethodConfig",
    "MethodEntry",
    "MethodResult",
    "PreparedRun",
    "Recheck",
    "ResultStore",
    "RunOutcome",
    "RunPlan",
    "RunSpec",
    "Summary",
    "SweepResult",
    "SweepSpec",
    "advise",
    "build_method",
    "compare",
    "evaluate",
    "get_method",
    "list_methods",
    "load_examples",
    "load_results",
    "load_spec",
    "load_sweep_spec",
    "prepare_run",
    "register_method",
    "summarize",
    "sweep",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value  # looked up once
        return value
    if name == "MethodSpec":  # deprecated: the registry entry is a MethodEntry ("spec" is the run's)
        from dspy_for.experiments import methods

        return methods.MethodSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
