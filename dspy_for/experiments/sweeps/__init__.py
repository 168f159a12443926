"""``dspy-for sweep``: Optuna searches over a method's options through the one run path (see :mod:`.sweep`)."""

from __future__ import annotations

from dspy_for.experiments.sweeps.spec import SweepSpec, load_sweep_spec
from dspy_for.experiments.sweeps.storage import make_storage, open_study
from dspy_for.experiments.sweeps.sweep import SweepResult, sweep
from dspy_for.experiments.sweeps.workers import SweepError, run_study

__all__ = [
    "SweepError",
    "SweepResult",
    "SweepSpec",
    "load_sweep_spec",
    "make_storage",
    "open_study",
    "run_study",
    "sweep",
]
