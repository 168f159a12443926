"""The registry of methods (:mod:`.entry`: :class:`MethodEntry`, :func:`register_method`, :func:`build_method`, the
one budget sizer :func:`budget_calls`) and the methods registered with it (:mod:`.builtin`)."""

from __future__ import annotations

import warnings
from typing import Any

from dspy_for.experiments.methods.builtin import module_method
from dspy_for.experiments.methods.entry import (
    BUDGET_UNIT,
    LM_OPTIONS,
    MethodEntry,
    Preset,
    Sized,
    budget_calls,
    build_method,
    get_method,
    list_methods,
    module_options,
    register_method,
)

__all__ = [
    "BUDGET_UNIT",
    "LM_OPTIONS",
    "MethodEntry",
    "Preset",
    "Sized",
    "budget_calls",
    "build_method",
    "get_method",
    "list_methods",
    "module_method",
    "module_options",
    "register_method",
]


def __getattr__(name: str) -> Any:
    if name == "MethodSpec":  # its name until the run spec, the sweep spec and LM spec strings took the word
        warnings.warn("MethodSpec is deprecated: use MethodEntry.", DeprecationWarning, stacklevel=2)
        return MethodEntry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
