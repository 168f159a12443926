"""Experiments: the method registry, comparisons and sweeps (MLflow / Optuna live only here)."""

from __future__ import annotations

from dspy_for.experiments.methods import MethodSpec, build_method, get_method, list_methods, register_method

__all__ = ["MethodSpec", "build_method", "get_method", "list_methods", "register_method"]
