"""Compiled baselines on one footing: any student with predictors (CoT, FOR-Prompting, ProRefine, the cascade,
``defender_sc``, ...), the same trainset/valset, seed and metric for every optimizer (:mod:`.compilers`), returning the
compiled program with what the compile cost: usage per role, tokens per LM and wall time.

A compiled program routes every role as its student did: each predictor calls the LM its namesake in the student
calls (:func:`route_as`). DSPy's optimizers work on copies — BootstrapFewShot returns a ``reset_copy``, whose
predictors have no LM; GEPA's and MIPROv2's candidates are deep copies, with copies of the LMs — so the compiled
program gets the student's own LM objects back; :func:`load_compiled` does the same for a program loaded from a file
(DSPy's ``load`` would put in an LM rebuilt from the file, or none).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.lm.usage import Usage, role, track_usage
from dspy_for.modules.role_lm_state import STATE_KEY
from dspy_for.optimizers.compilers import COMPILERS, RoleLM, check_compile_options, get_compiler
from dspy_for.optimizers.routing import predictor_lms, route_as

__all__ = [
    "COMPILERS",
    "CompileResult",
    "RoleLM",
    "check_compile_options",
    "compile_program",
    "load_compiled",
    "predictor_lms",
    "route_as",
]


@dataclass
class CompileResult:
    """A compiled program and what its compile cost: ``usage`` per role (``Usage.to_dict()``, cost in USD where every
    call is priced), ``tokens_by_lm`` (prompt + completion tokens per LM, by its ``model`` name; cache hits at their
    original size) and ``seconds`` (wall time)."""

    program: dspy.Module
    kind: str
    usage: dict[str, dict[str, float]]
    history: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    tokens_by_lm: dict[str, int] = field(default_factory=dict)


def compile_program(
    kind: str,
    student: dspy.Module,
    *,
    trainset: list[dspy.Example],
    valset: list[dspy.Example] | None = None,
    metric: Callable[..., Any],
    seed: int = 0,
    optimizer_lm: Any = None,
    task_lm: Any = None,
    **options: Any,
) -> CompileResult:
    """Compile ``student`` with optimizer ``kind``; the student is not mutated, and every predictor of the compiled
    program calls the LM its namesake in the student calls. Every predictor is tuned, as DSPy's optimizers do
    (TextGrad's ``predictors=[...]`` names fewer).

    ``task_lm``: the LM of predictors without one of their own, and MIPROv2's task model (default: the student's
    first predictor's LM, else ``dspy.settings.lm``). The kind and its options are checked before any LM call.
    """
    compiler = get_compiler(kind)
    routes = predictor_lms(student)
    check_compile_options(kind, options)
    optimizer_lm = resolve_lm(optimizer_lm)
    if compiler.needs_optimizer_lm and optimizer_lm is None:
        raise ConfigError(f"`{kind}` needs a reflection LM: pass `optimizer_lm=` (e.g. 'local/qwen2.5-coder-1.5b').")
    task_lm = resolve_lm(task_lm) or next((lm for lm in routes.values() if lm is not None), None)
    build, run = compiler.split(options)
    started = time.monotonic()
    with track_usage() as usage, role("task"), dspy.context(**({"lm": task_lm} if task_lm else {})):
        optimizer = compiler.build(metric, seed, optimizer_lm, **build)
        program = compiler.run(optimizer, student, list(trainset), list(valset) if valset else None, **run)
    seconds = time.monotonic() - started
    return CompileResult(
        program=route_as(program, routes),
        kind=kind,
        usage=usage.to_dict(),
        history=list(getattr(program, "textgrad_history", [])),
        options=options,
        seconds=seconds,
        tokens_by_lm=_tokens_by_lm(usage),
    )


def load_compiled(program: dspy.Module, path: str | Path) -> dspy.Module:
    """Load the instructions and demos a compiled program saved (``program.save(path)``, JSON) into ``program``, which
    keeps its own LM in every predictor: the LMs stored in the file are not loaded."""
    state = json.loads(Path(path).read_text(encoding="utf-8"))
    for value in [state, *state.values()]:  # a program that is one predictor keeps its state at the top
        if isinstance(value, dict) and "lm" in value:
            value["lm"] = None
            value[STATE_KEY] = {}  # a role predictor keeps its LMs too (no record to restore)
    routes = {name: predictor.lm for name, predictor in program.named_predictors()}
    program.load_state(state)
    return route_as(program, routes)


def _tokens_by_lm(usage: Usage) -> dict[str, int]:
    """Prompt + completion tokens per LM (its ``model`` name, as each call recorded it), cache hits included."""
    out: dict[str, int] = {}
    for call in usage.calls:
        out[call.model] = out.get(call.model, 0) + call.prompt_tokens + call.completion_tokens
    return out
