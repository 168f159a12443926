"""Compile-time prompt optimizers: a TextGrad-style Teleprompter and one helper that compiles any student with
TextGrad, GEPA, MIPROv2 or BootstrapFewShot on the same footing (:func:`compile_program`)."""

from __future__ import annotations

from dspy_for.optimizers.compiled import (
    COMPILERS,
    CompileResult,
    RoleLM,
    check_compile_options,
    compile_program,
    load_compiled,
    predictor_lms,
    route_as,
)
from dspy_for.optimizers.textgrad import TextGrad

__all__ = [
    "COMPILERS",
    "CompileResult",
    "RoleLM",
    "TextGrad",
    "check_compile_options",
    "compile_program",
    "load_compiled",
    "predictor_lms",
    "route_as",
]
