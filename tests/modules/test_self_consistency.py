"""Self-consistency with a scripted LM: the vote, unreadable samples, and LM failures."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from dspy_for.modules import SelfConsistency
from dspy_for.testing import ScriptedLM

Q = "Tom has 3 boxes of 12 apples. How many apples?"
UNREADABLE = "I think it is somewhere around thirty."  # no field headers: the adapter cannot parse it


def sampled(answers: list[int | None]) -> ScriptedLM:
    """One response per sample, in order: ``None`` is an unreadable sample (no JSON retry: see ``run``)."""
    it: Iterator[int | None] = iter(answers)

    def respond(messages, max_tokens):
        answer = next(it)
        return UNREADABLE if answer is None else {"reasoning": "3 * 12", "answer": str(answer)}

    return ScriptedLM(respond)


def run(lm: ScriptedLM, k: int, *, use_async: bool = False) -> dspy.Prediction:
    program = SelfConsistency("question -> answer: float", k=k)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        if use_async:
            return asyncio.run(program.acall(question=Q))
        return program(question=Q)


@pytest.mark.parametrize("use_async", [False, True])
def test_the_majority_answer_wins(use_async):
    pred = run(sampled([36, 15, 36, 36, 15]), k=5, use_async=use_async)
    assert pred.answer == 36.0
    assert pred.stats == {"samples": 5.0, "readable": 5.0, "agreement": 0.6}


@pytest.mark.parametrize("use_async", [False, True])
def test_an_unreadable_sample_casts_no_vote(use_async):
    # 2 readable 15s outvote 1 readable 36; the two unreadable samples are dropped, not counted as answers
    lm = sampled([None, 15, 36, None, 15])
    pred = run(lm, k=5, use_async=use_async)
    assert pred.answer == 15.0
    assert pred.stats == {"samples": 5.0, "readable": 3.0, "agreement": pytest.approx(2 / 3)}
    assert len(lm.calls) == 5  # every sample was drawn: an unreadable one does not end the vote


@pytest.mark.parametrize("use_async", [False, True])
def test_no_readable_sample_makes_the_item_unreadable(use_async):
    with pytest.raises(AdapterParseError):
        run(sampled([None, None, None]), k=3, use_async=use_async)


def test_a_failed_lm_call_is_raised_not_voted_around():
    answers = iter([36, 36])

    def respond(messages, max_tokens):
        answer = next(answers, None)
        if answer is None:
            raise ConnectionError("endpoint down")
        return {"reasoning": "3 * 12", "answer": str(answer)}

    with pytest.raises(Exception, match="endpoint down") as failed:  # DSPy wraps it as an LM error
        run(ScriptedLM(respond), k=3)
    assert not isinstance(failed.value, AdapterParseError)  # an error of the run, never an unreadable answer
