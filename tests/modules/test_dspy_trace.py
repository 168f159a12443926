"""Every role of every module is visible to DSPy as a ``Predict`` call: in ``dspy.settings.trace`` (what optimizers
bootstrap demos from) and in the callbacks. ProRefine's task role is there once per item, with the answer the item
ended on — never a capped partial output — whether that answer is a step's own reply or the full-length call."""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
import pytest
from dspy.utils.callback import BaseCallback
from role_lm_helpers import RoleServer

from dspy_for.lm.usage import track_usage
from dspy_for.modules import Cascade, FORPrompting, ProRefine, SelfConsistency

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"


class ModuleCalls(BaseCallback):
    """The module calls DSPy's callbacks saw: (instance, inputs) at start, outputs at end, in order."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, dict[str, Any]]] = []
        self.ended: list[Any] = []
        self._open: dict[str, Any] = {}

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.started.append((instance, inputs))
        self._open[call_id] = instance

    def on_module_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        self.ended.append((self._open.pop(call_id), outputs))

    def of(self, predictor: Any) -> list[Any]:
        return [out for instance, out in self.ended if instance is predictor]


def traced(program: dspy.Module, run_async: bool = False) -> tuple[dspy.Prediction, list[tuple[str, dict, Any]]]:
    """The program's prediction and its trace as (predictor name, inputs, outputs)."""
    names = {id(p): name for name, p in program.named_predictors()}
    with dspy.context(trace=[]):
        pred = asyncio.run(program.acall(question=Q)) if run_async else program(question=Q)
        trace = [(names[id(p)], dict(inputs), out) for p, inputs, out in dspy.settings.trace]
    return pred, trace


@pytest.mark.parametrize("run_async", [False, True], ids=["forward", "aforward"])
@pytest.mark.parametrize(
    ("k", "task_words", "requests"),
    [(50, 0, 1), (5, 30, 3)],
    ids=["the step's own reply (end-of-sequence)", "the full-length call"],
)
def test_prorefines_task_is_traced_once_with_the_answer_the_item_ended_on(
    k: int, task_words: int, requests: int, run_async: bool
) -> None:
    with RoleServer(task_words=task_words) as server:
        callbacks = ModuleCalls()
        dspy.configure(lm=server.lm("cfg"), callbacks=[callbacks])
        program = ProRefine(SIG, k=k, n=2)
        with track_usage() as usage:
            pred, trace = traced(program, run_async)
        task_requests = [c for c in server.calls() if c["role"] == "answer"]
    assert len(task_requests) == requests == len([c for c in usage.calls if c.role == "task"])  # no second LM call
    task = [(inputs, out) for name, inputs, out in trace if name == "task"]
    assert task == [({"question": Q}, task[0][1])]
    assert dict(task[0][1]) == {"reasoning": pred.reasoning, "answer": pred.answer}
    assert pred.reasoning == " ".join(["3 * 12 = 36.", *(["ok"] * task_words)])  # never a capped partial output
    assert {name for name, _, _ in trace} == {"task", "feedback", "optimizer"}
    assert [dict(out) for out in callbacks.of(program.task)] == [dict(task[0][1])]  # one Predict call, as DSPy's


@pytest.mark.parametrize(("verifier_ok", "answers"), [(True, ("30",)), (False, ("30", "36"))])
def test_prorefines_verified_initial_answer_is_traced_only_when_the_item_ends_on_it(
    verifier_ok: bool, answers: tuple[str, ...]
) -> None:
    with RoleServer(answers=answers, task_words=30, verifier_ok=verifier_ok) as server:
        dspy.configure(lm=server.lm("cfg"))
        pred, trace = traced(ProRefine(SIG, k=5, n=2, verifier="llm"))
    task = [out for name, _, out in trace if name == "task"]
    # accepted: the initial answer (30); refined: the final full-length call (the 4th task call: 36), not the initial
    assert [t.answer for t in task] == [pred.answer] == ([30.0] if verifier_ok else [36.0])
    assert pred.stats["refined"] == float(not verifier_ok)


@pytest.mark.parametrize(
    ("build", "predictors"),
    [
        (lambda: FORPrompting(SIG, rounds=1), {"defender", "debater", "revise", "host"}),
        (lambda: FORPrompting(SIG, rounds=1, prompts="paper", guard=False), {"defender", "debater", "revise", "host"}),
        (
            lambda: Cascade(SIG, first_samples=2, max_samples=2, rounds=1),
            {"samples.defender", "debate.defender", "debate.debater", "debate.revise", "debate.host"},
        ),
        (lambda: SelfConsistency(SIG, k=2, prompt="defender"), {"defender"}),
        (lambda: ProRefine(SIG, k=5, n=1, verifier="llm"), {"task", "feedback", "optimizer", "verifier"}),
    ],
    ids=["for", "for_paper", "cascade", "defender_sc", "prorefine"],
)
def test_every_role_that_ran_is_in_dspys_trace_as_its_predictor(build: Any, predictors: set[str]) -> None:
    with RoleServer(answers=("36", "30")) as server:
        dspy.configure(lm=server.lm("cfg"))
        program = build()
        _, trace = traced(program)
    assert {name for name, _, _ in trace} == predictors
    assert all(isinstance(out, dspy.Prediction) for _, _, out in trace)
