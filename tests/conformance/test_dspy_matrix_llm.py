"""The matrix's compiler cell on real local models: FOR-Prompting compiled by ``dspy.BootstrapFewShot`` with its
Debater on the 1.5B and every other role on the configured 0.5B routes every role as the student did, while
compiling and after."""

from __future__ import annotations

import os
from typing import Any

import dspy
import pytest

from dspy_for import make_lm
from dspy_for.datasets import load_dataset
from dspy_for.lm.usage import track_usage
from dspy_for.modules import FORPrompting

pytestmark = pytest.mark.llm
SMALL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
LARGE = "qwen2.5-coder-1.5b"


def models_by_role(calls: list[Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for call in calls:
        out.setdefault(call.role, set()).add(call.model)
    return out


def test_bootstrap_few_shot_keeps_the_debater_on_the_larger_model():
    small = make_lm(f"local/{SMALL}", max_tokens=400)
    large = make_lm(f"local/{LARGE}", max_tokens=400)
    assert small.model != large.model
    dspy.configure(lm=small)  # the Defender and the Host: no LM of their own
    student = FORPrompting("question -> answer: float", rounds=1, debater_lm=large)
    items = load_dataset("gsm8k", "sample")
    train, item = items[:2], items[2]

    def completed(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> bool:
        return isinstance(pred.answer, float)  # any debate that ends in a number is a demo: routing is the point

    with track_usage() as compiling:
        compiled = dspy.BootstrapFewShot(completed, max_bootstrapped_demos=1, max_labeled_demos=0).compile(
            student, trainset=train
        )
    with track_usage() as running:
        pred = compiled(question=item.question)

    assert isinstance(pred.answer, float)
    for usage in (compiling, running):
        roles = models_by_role(usage.calls)
        assert roles["debater"] == {large.model}, roles
        assert roles["defender"] == roles["host"] == {small.model}, roles
    assert compiled.debater.role_lm is not None and compiled.debater.role_lm.model == large.model
    assert {compiled.defender.role_lm, compiled.revise.role_lm, compiled.host.role_lm} == {None}  # the configured LM
    if any(p.demos for p in compiled.predictors()):  # bootstrapped (a small model may finish no debate)
        assert compiled.debater.demos and compiled.defender.demos
