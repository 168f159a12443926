from __future__ import annotations

import asyncio

import dspy
import pytest

from dspy_for.modules.trajectory import ASYNC_CALLS, SYNC_CALLS, Calls, for_turn, run_sync
from dspy_for.testing import ScriptedLM


async def _algorithm(calls: Calls, predictor: dspy.Predict) -> tuple[str, int]:
    out = await calls.predict(predictor, {"question": "2 + 2?"})
    doubled = await calls.blocking(lambda x: 2 * x, 21)
    return out.answer, doubled


def test_one_algorithm_runs_sync_and_async():
    dspy.configure(lm=ScriptedLM(lambda messages, max_tokens: {"answer": "4"}))
    predictor = dspy.Predict("question -> answer")
    assert run_sync(_algorithm(SYNC_CALLS, predictor)) == ("4", 42)
    assert asyncio.run(_algorithm(ASYNC_CALLS, predictor)) == ("4", 42)


def test_run_sync_propagates_errors_and_refuses_an_algorithm_that_suspends():
    async def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_sync(fails())

    async def suspends() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="suspended"):
        run_sync(suspends())


def test_for_turn_makes_fields_json_serialisable():
    turn = for_turn("defender", "answer", 0, {"answer": 36.0, "extra": {1, 2}, "nested": {"x": (1, object)}})
    assert turn["role"] == "defender" and turn["type"] == "answer" and turn["round"] == 0
    assert turn["fields"]["answer"] == 36.0 and isinstance(turn["fields"]["extra"], str)
    assert turn["fields"]["nested"]["x"][0] == 1 and isinstance(turn["fields"]["nested"]["x"][1], str)
