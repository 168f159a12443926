"""FOR-Prompting and ProRefine end to end on a real local model (few items, small caps)."""

from __future__ import annotations

import os

import dspy
import pytest

from dspy_for import make_lm
from dspy_for.datasets import load_dataset
from dspy_for.modules import FORPrompting, ProRefine

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


@pytest.fixture
def lm():
    return make_lm(f"local/{MODEL}", max_tokens=400)


def test_for_prompting_runs_the_protocol_on_a_real_model(lm):
    ex = load_dataset("gsm8k", "sample")[0]
    with dspy.context(lm=lm):
        pred = FORPrompting("question -> answer: float", rounds=1)(question=ex.question)
    assert isinstance(pred.answer, float)
    roles = [t["role"] for t in pred.trajectory]
    assert roles[0] == "defender" and "debater" in roles and roles[-1] == "host"
    total = pred.usage["total"]  # spent or served from the cache: either way the calls saw real prompts
    assert pred.usage["defender"]["calls"] >= 1 and total["prompt_tokens"] + total["cached_prompt_tokens"] > 0
    assert len(pred.answers_by_round) == pred.rounds_used + 1


def test_prorefine_reads_finish_reasons_from_a_real_server(lm):
    ex = load_dataset("gsm8k", "sample")[1]
    with dspy.context(lm=lm):
        pred = ProRefine("question -> answer: float", k=8, n=2)(question=ex.question)
    steps = pred.trajectory
    assert [s["max_tokens"] for s in steps] == [8, 16]
    assert all(s["finish_reason"] == "length" and s["completion_tokens"] == s["max_tokens"] for s in steps)
    assert pred.stats["steps_used"] == 2 and isinstance(pred.answer, float)
    # one feedback and one optimizer call per step (an adapter retry on a malformed reply adds a call)
    assert pred.usage["feedback"]["calls"] >= 2 and pred.usage["optimizer"]["calls"] >= 2


def test_prorefine_reads_end_of_sequence_through_a_plain_dspy_lm(lm):
    """A user's own dspy.LM against the same local server: steps see finish reasons and tokens."""
    plain = dspy.LM(
        lm.model, api_base=lm.kwargs["api_base"], api_key="local-no-key", max_tokens=400, temperature=0.0, cache=False
    )
    ex = load_dataset("gsm8k", "sample")[0]
    with dspy.context(lm=plain):
        pred = ProRefine("question -> answer: float", k=32, n=3)(question=ex.question)
    steps = pred.trajectory
    assert steps and all(s["finish_reason"] in ("stop", "length") for s in steps)
    assert steps[0]["completion_tokens"] <= 32 and pred.usage["task"]["completion_tokens"] > 0
    assert pred.usage["feedback"]["calls"] == len(steps)
