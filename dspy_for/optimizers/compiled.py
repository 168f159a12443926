"""Compiled baselines on one footing: the same trainset/valset, seed and metric for every optimizer,
returning the compiled program plus the compile phase's usage per role.

Kinds: ``textgrad`` (ours), ``gepa`` (``dspy.GEPA`` with a reflection LM and a metric-call budget),
``mipro`` (``dspy.MIPROv2``, instruction-only: 0 demos), ``mipro_fewshot`` (MIPROv2 with demos),
``bootstrap`` (``dspy.BootstrapFewShot``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_for.compat.dspy import relayed_message_call
from dspy_for.errors import ConfigError
from dspy_for.lm import resolve_lm
from dspy_for.lm.usage import role, track_usage
from dspy_for.metrics import numeric_match, numeric_match_with_feedback
from dspy_for.optimizers.textgrad import TextGrad

__all__ = ["COMPILERS", "CompileResult", "RoleLM", "compile_program"]


@dataclass
class CompileResult:
    program: dspy.Module
    kind: str
    usage: dict[str, dict[str, float]]
    history: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


class RoleLM(dspy.BaseLM):
    """Wraps an LM so every call through it is attributed to usage role ``role_name``.

    GEPA's reflection LM and MIPROv2's prompt model are called from inside DSPy, where we cannot open a
    ``role(...)`` block around each call; wrapping the LM puts their tokens under ``optimizer``.
    """

    def __init__(self, lm: dspy.BaseLM, role_name: str) -> None:
        super().__init__(model=lm.model, model_type=getattr(lm, "model_type", "chat"), cache=lm.cache)
        self.inner, self.role_name = lm, role_name
        self.kwargs = lm.kwargs

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        with role(self.role_name), relayed_message_call(self, self.inner, messages):
            return self.inner(prompt, messages=messages, **kwargs)

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        with role(self.role_name), relayed_message_call(self, self.inner, messages):
            return await self.inner.acall(prompt, messages=messages, **kwargs)

    def forward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        return self.inner.forward(prompt, messages=messages, **kwargs)

    def __getattr__(self, name: str) -> Any:  # everything else (history, copy state, ...) from the inner LM
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _feedback_metric(metric: Callable[..., Any]) -> Callable[..., Any]:
    """GEPA wants (gold, pred, trace, pred_name, pred_trace) -> score or Prediction(score, feedback)."""
    if metric is numeric_match:
        return numeric_match_with_feedback

    def wrapped(gold: Any, pred: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None) -> Any:
        score = float(metric(gold, pred))
        return dspy.Prediction(score=score, feedback="correct" if score >= 1 else f"expected {gold.get('answer')}")

    return wrapped


def _textgrad(
    student: dspy.Module, trainset: list, valset: list | None, metric: Any, seed: int, optimizer_lm: Any, **options: Any
) -> tuple[dspy.Module, list[dict[str, Any]]]:
    program = TextGrad(metric, optimizer_lm=optimizer_lm, seed=seed, **options).compile(
        student, trainset=trainset, valset=valset
    )
    return program, program.textgrad_history


def _gepa(
    student: dspy.Module,
    trainset: list,
    valset: list | None,
    metric: Any,
    seed: int,
    optimizer_lm: Any,
    max_metric_calls: int = 100,
    **options: Any,
) -> tuple[dspy.Module, list[dict[str, Any]]]:
    if optimizer_lm is None:
        raise ConfigError("`gepa` needs a reflection LM: pass `optimizer_lm=` (e.g. 'local/qwen2.5-coder-1.5b').")
    gepa = dspy.GEPA(
        metric=_feedback_metric(metric),
        reflection_lm=RoleLM(optimizer_lm, "optimizer"),
        max_metric_calls=max_metric_calls,
        seed=seed,
        **options,
    )
    program = gepa.compile(student, trainset=trainset, valset=valset or trainset)
    return program, []


def _mipro(fewshot: bool) -> Callable[..., tuple[dspy.Module, list[dict[str, Any]]]]:
    def run(
        student: dspy.Module,
        trainset: list,
        valset: list | None,
        metric: Any,
        seed: int,
        optimizer_lm: Any,
        num_candidates: int = 4,
        num_trials: int = 8,
        **options: Any,
    ) -> tuple[dspy.Module, list[dict[str, Any]]]:
        demos = (
            {"max_bootstrapped_demos": 2, "max_labeled_demos": 2}
            if fewshot
            else {"max_bootstrapped_demos": 0, "max_labeled_demos": 0}
        )
        prompt_model = RoleLM(optimizer_lm, "optimizer") if optimizer_lm is not None else None
        mipro = dspy.MIPROv2(
            metric=metric,
            prompt_model=prompt_model,
            auto=None,
            num_candidates=num_candidates,
            seed=seed,
            **demos,
            **options,
        )
        program = mipro.compile(
            student, trainset=trainset, valset=valset, num_trials=num_trials, minibatch=len(valset or trainset) > 35
        )
        return program, []

    return run


def _bootstrap(
    student: dspy.Module, trainset: list, valset: list | None, metric: Any, seed: int, optimizer_lm: Any, **options: Any
) -> tuple[dspy.Module, list[dict[str, Any]]]:
    options = {"max_bootstrapped_demos": 4, "max_labeled_demos": 0, **options}
    return dspy.BootstrapFewShot(metric=metric, **options).compile(student, trainset=trainset), []


COMPILERS: dict[str, Callable[..., tuple[dspy.Module, list[dict[str, Any]]]]] = {
    "textgrad": _textgrad,
    "gepa": _gepa,
    "mipro": _mipro(fewshot=False),
    "mipro_fewshot": _mipro(fewshot=True),
    "bootstrap": _bootstrap,
}


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
    """Compile ``student`` with optimizer ``kind``; the student is not mutated."""
    if kind not in COMPILERS:
        raise ConfigError(f"Unknown compile kind `{kind}`. Choose one of: {', '.join(COMPILERS)}.")
    optimizer_lm = resolve_lm(optimizer_lm)
    task_lm = resolve_lm(task_lm)
    with track_usage() as usage, role("task"), dspy.context(**({"lm": task_lm} if task_lm else {})):
        program, history = COMPILERS[kind](
            student, list(trainset), list(valset) if valset else None, metric, seed, optimizer_lm, **options
        )
    return CompileResult(program=program, kind=kind, usage=usage.to_dict(), history=history, options=options)
