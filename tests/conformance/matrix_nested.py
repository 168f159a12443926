"""The matrix's nested layouts: the cell's module where users put it, not as the outermost program.

* ``in_program``: inside a user's plain ``dspy.Module``, after a ``dspy.ChainOfThought`` step of its own;
* ``two_modules``: beside a second module of the project's (ProRefine beside the FOR family and self-consistency,
  FOR beside ProRefine, on another output field) in one plain ``dspy.Module``, one LM object shared by a role of each;
* ``react_tool``: called from the tool of a ``dspy.ReAct`` agent;
* ``context``: the outermost program, run with the configured LM swapped by ``dspy.context(lm=...)``.

In each, the module's ``one`` role has its own LM and every other role runs on the LM in force; the program's own
predictors (the step, the agent's) are the ``user`` role, on the LM in force too. :func:`wrap` builds the program a
user would write; :func:`predictor_roles` says which role each of its predictors is (the server's log is read back
by them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

from dspy_for.modules import FORPrompting, ProRefine

#: the nested layouts, in the docs' column order, with what each means
NEST_TITLES = {
    "in_program": "inside a user's plain `dspy.Module`, after a `ChainOfThought` step",
    "two_modules": "two of the project's modules in one plain `dspy.Module`, one LM object shared by a role of each",
    "react_tool": "called from a `dspy.ReAct` tool",
    "context": "the configured LM swapped by `dspy.context(lm=...)`",
}
#: where the module sits in each nested program (its predictors' names start with it)
PREFIX = {"in_program": "solve.", "two_modules": "solve.", "react_tool": "solve.", "context": ""}
#: the role the program's own predictors are (on the LM in force)
USER = "user"
#: the model of the LM the ``context`` layout puts in force
CONTEXT_MODEL = "m-context"
#: the second module's output field (its predictors' fields differ from the cell's module's)
OTHER_SIG = "question -> total: float"
OTHER = "other."


class InProgram(dspy.Module):
    def __init__(self, solve: dspy.Module) -> None:
        super().__init__()
        self.plan = dspy.ChainOfThought("question -> plan")
        self.solve = solve

    def forward(self, question: str) -> dspy.Prediction:
        self.plan(question=question)
        return self.solve(question=question)


class TwoModules(dspy.Module):
    def __init__(self, solve: dspy.Module, other: dspy.Module) -> None:
        super().__init__()
        self.solve, self.other = solve, other

    def forward(self, question: str) -> dspy.Prediction:
        self.other(question=question)
        return self.solve(question=question)


class ReActProgram(dspy.Module):
    def __init__(self, solve: dspy.Module) -> None:
        super().__init__()
        self.solve = solve
        self.react = dspy.ReAct(
            "question -> answer: float", tools=[dspy.Tool(self.use_solve, name="solve")], max_iters=3
        )

    def use_solve(self, question: str) -> float:
        """Solve a word problem with arithmetic; returns the number that answers it."""
        return float(self.solve(question=question).answer)

    def forward(self, question: str) -> dspy.Prediction:
        return self.react(question=question)


def other_module(family: str, lm: Any) -> tuple[dspy.Module, str]:
    """The second module of ``two_modules`` for a module of ``family`` (its class), and the role given ``lm``."""
    if family == "ProRefine":
        return FORPrompting(OTHER_SIG, rounds=1, debater_lm=lm), "debater"
    return ProRefine(OTHER_SIG, k=12, n=1, verifier="llm", task_lm=lm), "task"


def wrap(nest: str, inner: dspy.Module, shared: Any) -> dspy.Module:
    """The program a user writes around ``inner`` (``shared``: the LM object ``two_modules`` gives a role of each)."""
    if nest == "in_program":
        return InProgram(inner)
    if nest == "two_modules":
        return TwoModules(inner, other_module(type(inner).__name__, shared)[0])
    if nest == "react_tool":
        return ReActProgram(inner)
    return inner


def predictor_roles(nest: str | None, predictors: Mapping[str, str], program: dspy.Module) -> dict[str, str]:
    """Each predictor of ``program`` (its name) → its role: the module's (``predictors``, under :data:`PREFIX`),
    the second module's (``other.<role>``) or the program's own (:data:`USER`)."""
    prefix = PREFIX.get(nest or "", "")
    out: dict[str, str] = {}
    for name, predictor in program.named_predictors():
        inner = name.removeprefix(prefix) if name.startswith(prefix) else None
        if inner is not None and inner in predictors:
            out[name] = predictors[inner]
        elif name.startswith(OTHER):
            out[name] = OTHER + str(getattr(predictor, "role", name.removeprefix(OTHER)))
        else:
            out[name] = USER
    return out
