"""Per-role usage accounting with scripted LMs (the real-server shape is checked in test_lm_server.py)."""

from __future__ import annotations

import asyncio
import json
import time

import dspy
import pytest
from dspy.utils import DummyLM

from dspy_for.errors import ConfigError
from dspy_for.lm.factory import configure_cache
from dspy_for.lm.usage import DEFAULT_ROLE, CallRecord, Usage, role, track_usage
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


def test_dspys_dummy_lm_counts_calls_and_roles():
    lm = DummyLM([{"answer": "1"}, {"answer": "2"}])
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


# ------------------------------------------------------------------------------- times and content of each call


def test_each_call_has_its_own_start_and_end_as_it_happened():
    lm = ScriptedLM(lambda m, t: "a b", delay=0.2)
    before = time.time()
    with track_usage() as usage:
        lm("one")
        time.sleep(0.1)  # time between calls belongs to no call
        asyncio.run(lm.acall("two"))
    after = time.time()
    first, second = usage.calls
    for c in (first, second):
        assert c.started_at is not None and c.ended_at is not None
        assert before <= c.started_at and c.ended_at <= after
        assert c.ended_at - c.started_at >= 0.2  # covers the LM's own delay
        assert c.ended_at - c.started_at == pytest.approx(c.wall_time, abs=0.01)
    assert second.started_at - first.ended_at >= 0.1  # in order, apart


def test_each_call_keeps_what_it_sent_and_returned_in_memory_only():
    lm = ScriptedLM(lambda m, t: {"answer": "four"})
    with dspy.context(lm=lm), track_usage() as usage, role("task"):
        dspy.Predict("question -> answer")(question="2+2?")
        lm("plain prompt", max_tokens=5)
    chat, plain = usage.calls
    assert chat.content is not None and plain.content is not None
    assert "2+2?" in chat.content.sent["messages"][-1]["content"]
    assert "four" in chat.content.returned[0]
    assert plain.content.sent == {"prompt": "plain prompt", "kwargs": {"max_tokens": 5}}
    assert "content" not in json.dumps(usage.to_dict()) and "2+2" not in json.dumps(usage.to_dict())
    assert chat == CallRecord(**{**chat.__dict__, "content": None})  # content is not part of a record's identity


def test_a_failed_call_keeps_what_it_sent_and_its_error_message():
    def boom(messages, max_tokens):
        raise RuntimeError("provider down")

    with track_usage() as usage, pytest.raises(Exception, match="provider down"):
        ScriptedLM(boom)("hi")
    (call,) = usage.calls
    assert call.content is not None and call.content.sent == {"prompt": "hi"}
    assert call.content.returned is None and "provider down" in str(call.content.error)
    assert call.started_at is not None and call.ended_at is not None and call.ended_at >= call.started_at


def test_a_long_lived_collector_keeps_content_for_its_last_calls_only():
    lm = ScriptedLM(lambda m, t: "x")
    with track_usage(content_window=3) as outer:
        for i in range(5):
            with track_usage() as inner:
                lm(f"call {i}")
            assert inner.calls[0].content is not None  # the inner (per-item) collector keeps its call's content
    assert [c.content is not None for c in outer.calls] == [False, False, True, True, True]
    assert [c.prompt_tokens for c in outer.calls] == [2] * 5 and all(c.started_at for c in outer.calls)
    merged = Usage(content_window=2).merge(outer)
    assert [c.content is not None for c in merged.calls] == [False, False, False, True, True]
    with track_usage(content_window=0) as none, track_usage(content_window=None) as every:
        lm("y")
    assert none.calls[0].content is None and every.calls[0].content is not None


def test_a_scripted_lm_refuses_a_negative_delay():
    with pytest.raises(ConfigError, match="`delay`"):
        ScriptedLM(lambda m, t: "x", delay=-1)
