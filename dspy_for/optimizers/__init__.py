"""Compile-time prompt optimizers: a TextGrad-style Teleprompter and one helper for compiled baselines."""

from __future__ import annotations

from dspy_for.optimizers.compiled import COMPILERS, CompileResult, compile_program
from dspy_for.optimizers.textgrad import TextGrad

__all__ = ["COMPILERS", "CompileResult", "TextGrad", "compile_program"]
