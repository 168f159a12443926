"""The compile kinds, each declared once (:class:`Compiler`): how its optimizer is built from the settings every kind
shares (metric, seed, optimizer LM) and its own options, how that optimizer compiles a student, and which options it
takes — so a bad option is refused by :func:`check_compile_options` before any LM is called.

Kinds: ``textgrad`` (ours), ``gepa`` (``dspy.GEPA`` with a reflection LM and a metric-call budget), ``mipro``
(``dspy.MIPROv2``, instruction-only: 0 demos), ``mipro_fewshot`` (MIPROv2 with demos), ``bootstrap``
(``dspy.BootstrapFewShot``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_for.compat.dspy import relayed_message_call
from dspy_for.errors import ConfigError
from dspy_for.lm.usage import role
from dspy_for.metrics import numeric_match, numeric_match_with_feedback
from dspy_for.optimizers.textgrad import TextGrad

__all__ = ["COMPILERS", "Compiler", "RoleLM", "check_compile_options", "get_compiler"]


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


@dataclass(frozen=True)
class Compiler:
    """One compile kind.

    ``build(metric, seed, optimizer_lm, **options)`` makes its optimizer (it calls no LM); ``run(optimizer, student,
    trainset, valset, **run_options)`` compiles. ``defaults``: the options it sets itself, with their values; every
    other keyword parameter of ``optimizer`` (the optimizer's class) is accepted too, but those in ``fixed`` (set by
    the kind). ``run_options``: options that go to ``run`` instead of ``build``; ``uses_valset``: whether it decides on
    a validation set at all."""

    build: Callable[..., Any]
    run: Callable[..., dspy.Module]
    optimizer: type
    defaults: Mapping[str, Any] = field(default_factory=dict)
    fixed: tuple[str, ...] = ()
    run_options: Mapping[str, Any] = field(default_factory=dict)
    needs_optimizer_lm: bool = False
    uses_valset: bool = True  # BootstrapFewShot decides on its training items alone

    def accepted(self) -> list[str]:
        """Every option this kind takes (its defaults', its run options' and its optimizer's own keyword parameters)."""
        params = list(inspect.signature(self.optimizer).parameters)  # the constructor's, without self
        skip = {"metric", "seed", *self.fixed}
        return sorted({*self.defaults, *self.run_options, *(p for p in params if p not in skip)})

    def split(self, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(``build``'s options over the defaults, ``run``'s options over theirs)."""
        build = {**self.defaults, **{k: v for k, v in options.items() if k not in self.run_options}}
        run = {**self.run_options, **{k: v for k, v in options.items() if k in self.run_options}}
        return build, run


def _feedback_metric(metric: Callable[..., Any]) -> Callable[..., Any]:
    """GEPA wants (gold, pred, trace, pred_name, pred_trace) -> score or Prediction(score, feedback)."""
    if metric is numeric_match:
        return numeric_match_with_feedback

    def wrapped(gold: Any, pred: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None) -> Any:
        score = float(metric(gold, pred))
        return dspy.Prediction(score=score, feedback="correct" if score >= 1 else f"expected {gold.get('answer')}")

    return wrapped


def _optimizer_role(lm: Any) -> Any:
    return RoleLM(lm, "optimizer") if lm is not None else None


_GEPA_BUDGETS = ("auto", "max_full_evals", "max_metric_calls")


def _gepa(metric: Any, seed: int, optimizer_lm: Any, **options: Any) -> Any:
    budget = {} if any(options.get(k) is not None for k in _GEPA_BUDGETS) else {"max_metric_calls": 100}
    return dspy.GEPA(
        metric=_feedback_metric(metric), reflection_lm=_optimizer_role(optimizer_lm), seed=seed, **budget, **options
    )


def _mipro(fewshot: bool) -> Compiler:
    demos = {"max_bootstrapped_demos": 2, "max_labeled_demos": 2} if fewshot else {}
    zero = {} if fewshot else {"max_bootstrapped_demos": 0, "max_labeled_demos": 0}

    def build(metric: Any, seed: int, optimizer_lm: Any, **options: Any) -> Any:
        return dspy.MIPROv2(
            metric=metric, prompt_model=_optimizer_role(optimizer_lm), auto=None, seed=seed, **zero, **options
        )

    def run(optimizer: Any, student: dspy.Module, trainset: list, valset: list | None, num_trials: int) -> Any:
        minibatch = len(valset or trainset) > 35
        return optimizer.compile(student, trainset=trainset, valset=valset, num_trials=num_trials, minibatch=minibatch)

    return Compiler(
        build=build,
        run=run,
        optimizer=dspy.MIPROv2,
        defaults={"num_candidates": 4, **demos},
        fixed=("prompt_model", "task_model", "auto", *zero),
        run_options={"num_trials": 8},
    )


COMPILERS: dict[str, Compiler] = {
    "textgrad": Compiler(
        build=lambda metric, seed, optimizer_lm, **o: TextGrad(metric, optimizer_lm=optimizer_lm, seed=seed, **o),
        run=lambda opt, student, trainset, valset: opt.compile(student, trainset=trainset, valset=valset),
        optimizer=TextGrad,
        fixed=("optimizer_lm",),
    ),
    "gepa": Compiler(
        build=_gepa,
        run=lambda opt, student, trainset, valset: opt.compile(student, trainset=trainset, valset=valset or trainset),
        optimizer=dspy.GEPA,
        fixed=("reflection_lm", "use_mlflow", "use_wandb", "wandb_api_key", "wandb_init_kwargs"),  # runs track here
        needs_optimizer_lm=True,
    ),
    "mipro": _mipro(fewshot=False),
    "mipro_fewshot": _mipro(fewshot=True),
    "bootstrap": Compiler(
        # DSPy's teacher is the student's deepcopy: every role's LM bootstraps as the student routes it
        build=lambda metric, seed, optimizer_lm, **o: dspy.BootstrapFewShot(metric=metric, **o),
        run=lambda opt, student, trainset, valset: opt.compile(student, trainset=trainset),
        optimizer=dspy.BootstrapFewShot,
        defaults={"max_bootstrapped_demos": 4, "max_labeled_demos": 0},
        uses_valset=False,
    ),
}


#: the counts among the options (any kind), with the least value each takes
_COUNTS = {
    "max_bootstrapped_demos": 0,
    "max_labeled_demos": 0,
    "max_rounds": 1,
    "max_errors": 0,
    "max_metric_calls": 1,
    "max_full_evals": 1,
    "reflection_minibatch_size": 1,
    "num_candidates": 1,
    "num_trials": 1,
    "num_threads": 1,
}


def get_compiler(kind: Any) -> Compiler:
    if not isinstance(kind, str) or kind not in COMPILERS:
        raise ConfigError(f"Unknown compile kind `{kind}`. Choose one of: {', '.join(COMPILERS)}.")
    return COMPILERS[kind]


def check_compile_options(kind: str, options: Mapping[str, Any]) -> None:
    """``options`` of compile ``kind``: every name one it takes, and values its optimizer accepts (checked by building
    the optimizer with a placeholder LM, which calls nothing). A :class:`ConfigError` naming the option otherwise."""
    compiler = get_compiler(kind)
    accepted = compiler.accepted()
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"Unknown option `{unknown[0]}` for compile kind `{kind}`. Options it takes: {', '.join(accepted)}."
        )
    build, run = compiler.split(options)
    for name, value in {**build, **run}.items():
        least = _COUNTS.get(name)
        if (
            least is not None
            and value is not None
            and (not isinstance(value, int) or isinstance(value, bool) or value < least)
        ):
            raise ConfigError(f"`{name}` of compile kind `{kind}` must be an integer >= {least}, got {value!r}.")
    placeholder = dspy.LM("openai/placeholder")  # never called: the optimizers only keep it
    try:
        with dspy.context(lm=placeholder):
            compiler.build(_placeholder_metric, 0, placeholder, **build)
    except ConfigError as exc:
        raise ConfigError(f"Compile kind `{kind}`: {exc}") from None
    except (TypeError, ValueError, AssertionError) as exc:
        raise ConfigError(f"Compile kind `{kind}` refuses options {dict(options)}: {exc}") from None


def _placeholder_metric(gold: Any, pred: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None) -> Any:
    return 0.0
