from __future__ import annotations

import os

import dspy
import pytest

from dspy_for import make_lm
from dspy_for.datasets import load_dataset
from dspy_for.metrics import numeric_match
from dspy_for.optimizers import TextGrad

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def test_two_real_steps_on_four_training_items():
    lm = make_lm(f"local/{MODEL}", max_tokens=300)
    train = load_dataset("gsm8k", "sample")[:4]
    student = dspy.ChainOfThought("question -> answer: float")
    with dspy.context(lm=lm):
        compiled = TextGrad(numeric_match, optimizer_lm=lm, batch_size=2, epochs=1, steps_per_epoch=2).compile(
            student, trainset=train, valset=train[:1]
        )  # small: ~11 calls
    h = compiled.textgrad_history
    assert [row["step"] for row in h] == [0, 1, 2]
    assert all(isinstance(row["val_score"], float) for row in h)
    usage = compiled.compile_usage
    assert usage["gradient"]["calls"] >= 2  # one critique per step (an unparsable one is retried as JSON)
    assert usage["task"]["calls"] >= 1 + 2 * 2  # initial val + two minibatches
    assert usage["total"]["prompt_tokens"] + usage["total"]["cached_prompt_tokens"] > 0
    for row in h[1:]:  # a kept step changed the instruction, a reverted one restored it
        if row["reverted"]:
            assert row["instructions"] == h[h.index(row) - 1]["instructions"]
