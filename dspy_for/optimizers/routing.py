"""How a program routes its roles: each named predictor's LM (:func:`predictor_lms`), and a copy given its student's
routing back (:func:`route_as`) — what keeps every role on its own LM through a compile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

from dspy_for.errors import ConfigError
from dspy_for.modules.role_predict import RolePredict, lm_in_use

__all__ = ["predictor_lms", "route_as"]


def predictor_lms(program: dspy.Module) -> dict[str, Any]:
    """How ``program`` routes its roles: the LM each named predictor's calls run on (a role predictor's own LM, or
    the LM set on it; None: the configured one). A program without predictors has nothing to compile: a
    :class:`ConfigError`."""
    named = program.named_predictors()
    if not named:
        raise ConfigError(
            f"`{type(program).__name__}` has no predictors, so there is nothing to compile: a compiler tunes the "
            "instructions and demos of a program's `dspy.Predict` modules. Compile a program that has some."
        )
    return {name: lm_in_use(predictor) for name, predictor in named}


def route_as(program: dspy.Module, lms: Mapping[str, Any]) -> dspy.Module:
    """``program`` with each named predictor on ``lms[name]`` (:func:`predictor_lms` of its student): a role predictor
    whose own LM that is keeps it, with nothing set on it."""
    for name, predictor in program.named_predictors():
        if name in lms:
            own = predictor.role_lm if isinstance(predictor, RolePredict) else None
            predictor.lm = None if own is not None and lms[name] is own else lms[name]
    return program
