"""Adaptive self-consistency, ``defender_sc`` and the Cascade end to end on a real local model (an item each)."""

from __future__ import annotations

import os

import dspy
import pytest

from dspy_for import make_lm
from dspy_for.datasets import load_dataset
from dspy_for.lm.usage import track_usage
from dspy_for.modules import Cascade, SelfConsistency

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
SIG = "question -> answer: float"


@pytest.fixture
def lm():
    return make_lm(f"local/{MODEL}", max_tokens=400)


@pytest.fixture
def items():
    return load_dataset("gsm8k", "sample")[:1]


def _samples(pred: dspy.Prediction) -> list[dict]:
    return [t for t in pred.trajectory if t["type"] == "sample"]


@pytest.mark.parametrize(
    "program",
    [
        SelfConsistency(SIG, k=4, stop="agreement"),
        SelfConsistency(SIG, k=4, stop="beta", batch=1, prompt="defender"),  # defender_sc with the Beta rule
    ],
    ids=["sc_agreement", "defender_sc_beta"],
)
def test_adaptive_self_consistency_records_its_samples_on_a_real_model(lm, items, program):
    for ex in items:
        with dspy.context(lm=lm), track_usage() as usage:
            pred = program(question=ex.question)
        samples = _samples(pred)
        assert 1 <= len(samples) == pred.stats["samples"] <= 4 and pred.stats["k"] == 4.0
        assert [s["index"] for s in samples] == list(range(len(samples)))
        assert pred.stats["readable"] == sum(s["readable"] for s in samples) >= 1
        assert pred.trajectory[-1]["type"] == "stop"
        assert pred.trajectory[-1]["reason"] in ("cap", "decided", "confident")
        assert pred.trajectory[-1]["reason"] != "cap" or len(samples) == 4
        assert isinstance(pred.answer, float)
        assert pred.answer in [s["answer"] for s in samples if s["readable"]]
        # one call per sample (an adapter's JSON retry on an unparsable reply adds one), spent or served from cache
        assert len(samples) <= usage.total.calls <= 2 * len(samples) and usage.total.served_tokens > 0


def test_cascade_escalates_and_counts_tokens_per_stage_on_a_real_model(lm, items):
    program = Cascade(SIG, first_samples=2, max_samples=4, rounds=1)
    for ex in items:
        with dspy.context(lm=lm), track_usage() as usage:
            pred = program(question=ex.question)
        stage = int(pred.stats["stage"])
        assert stage in (1, 2, 3) and isinstance(pred.answer, float)
        ran = [s["stage"] for s in pred.trajectory if s["type"] == "stage"]
        assert ran == list(range(1, stage + 1))
        tokens = [pred.stats[f"tokens.stage{s}"] for s in (1, 2, 3)]
        assert all(t > 0 for t in tokens[:stage]) and all(t == 0 for t in tokens[stage:])
        assert sum(tokens) == usage.total.served_tokens
        assert (stage == 3) == ("host" in usage.roles)
        assert 2 <= pred.stats["samples"] <= 4
