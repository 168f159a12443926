"""Per-role usage accounting with scripted LMs (the real-server shape is checked in test_lm_server.py)."""

from __future__ import annotations

import json

import dspy
import pytest

from dspy_for.lm.factory import configure_cache
from dspy_for.lm.usage import DEFAULT_ROLE, RecordingDummyLM, Usage, role, track_usage
from dspy_for.testing import ScriptedLM


def _answer(messages, max_tokens):
    return {"answer": "four"}


def test_calls_tokens_and_finish_reasons_per_role():
    lm = ScriptedLM(lambda m, t: "one two three four five six")
    with track_usage() as usage:
        with role("defender"):
            lm("hello there")
        with role("debater"):
            lm("a b c", max_tokens=2)
        lm("unattributed")
    d = usage.to_dict()
    assert set(d) == {"defender", "debater", DEFAULT_ROLE, "total"}
    assert d["defender"]["calls"] == 1 and d["defender"]["completion_tokens"] == 6
    assert d["debater"]["completion_tokens"] == 2 and d["debater"]["prompt_tokens"] == 3
    assert [c.finish_reason for c in usage.calls] == ["stop", "length", "stop"]
    assert d["total"]["calls"] == 3 and d["total"]["tokens"] == sum(
        c.prompt_tokens + c.completion_tokens for c in usage.calls
    )
    assert all(c.wall_time >= 0 and c.ok and not c.cache_hit for c in usage.calls)
    json.dumps(d)  # JSON-serialisable for trajectories, MLflow artifacts and sweep storage


def test_nested_collectors_each_see_their_calls():
    lm = ScriptedLM(lambda m, t: "x y")
    with track_usage() as outer:
        lm("first")
        with track_usage() as inner, role("task"):
            lm("second")
    assert outer.total.calls == 2 and inner.total.calls == 1 and inner["task"].completion_tokens == 2


def test_no_collector_records_nothing_and_costs_nothing():
    lm = ScriptedLM(lambda m, t: "x")
    lm("outside any collector")
    with track_usage() as usage:
        pass
    assert usage.total.calls == 0 and usage.to_dict()["total"]["tokens"] == 0


def test_calls_in_dspy_worker_threads_are_counted_with_their_roles():
    lm = ScriptedLM(_answer)
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), track_usage() as usage, role("task"):
        results = dspy.Parallel(num_threads=4, disable_progress_bar=True)(
            [(predict, {"question": f"q{i}"}) for i in range(8)]
        )
    assert [r.answer for r in results] == ["four"] * 8
    assert usage["task"].calls == 8 and usage.total.calls == 8 and len(usage.calls) == 8


def test_cache_hits_are_counted_apart_with_their_tokens(tmp_path):
    configure_cache(tmp_path / "cache")
    lm = ScriptedLM(_answer, cache=True)
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), track_usage() as usage, role("task"):
        predict(question="2+2?")
        predict(question="2+2?")
    first, second = usage.calls
    assert not first.cache_hit and second.cache_hit and len(lm.calls) == 1
    t = usage["task"]
    assert t.calls == 2 and t.cached_calls == 1
    assert t.cached_prompt_tokens == first.prompt_tokens > 0
    assert t.cached_completion_tokens == first.completion_tokens > 0
    assert t.served_tokens == 2 * t.tokens


def test_failed_calls_are_recorded_as_not_ok():
    def boom(messages, max_tokens):
        raise RuntimeError("provider down")

    lm = ScriptedLM(boom)
    with track_usage() as usage, pytest.raises(Exception, match="provider down"):
        lm("hi")
    (call,) = usage.calls
    assert not call.ok and not call.cache_hit and usage.total.calls == 1


def test_recording_dummy_lm_counts_calls_and_roles():
    lm = RecordingDummyLM([{"answer": "1"}, {"answer": "2"}])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), track_usage() as usage:
        with role("feedback"):
            predict(question="a")
        with role("optimizer"):
            predict(question="b")
    assert usage["feedback"].calls == 1 and usage["optimizer"].calls == 1


def test_round_trip_and_merge():
    lm = ScriptedLM(lambda m, t: "a b c")
    with track_usage() as a, role("task"):
        lm("x")
    with track_usage() as b, role("judge"):
        lm("y")
    restored = Usage.from_dict(json.loads(json.dumps(a.to_dict())))
    assert restored.to_dict() == a.to_dict()
    merged = restored.merge(b)
    assert merged.total.calls == 2 and set(merged.roles) == {"task", "judge"}
