"""The registry of methods (:mod:`.entry`: :class:`MethodEntry`, :func:`register_method`, :func:`build_method`, the
one budget sizer :func:`budget_calls`), the methods registered with it (:mod:`.builtin`) and which of them a
``compile`` table can compile, with the one check of that table (:mod:`.compiling`)."""

from __future__ import annotations

import warnings
from typing import Any

from dspy_for.experiments.methods import builtin, compiling, entry
from dspy_for.experiments.methods.builtin import *  # noqa: F403  (registers the built-in methods)
from dspy_for.experiments.methods.compiling import *  # noqa: F403
from dspy_for.experiments.methods.entry import *  # noqa: F403

__all__ = [*entry.__all__, *builtin.__all__, *compiling.__all__]


def __getattr__(name: str) -> Any:
    if name == "MethodSpec":  # its name until the run spec, the sweep spec and LM spec strings took the word
        warnings.warn("MethodSpec is deprecated: use MethodEntry.", DeprecationWarning, stacklevel=2)
        return entry.MethodEntry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
