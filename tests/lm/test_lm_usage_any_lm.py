"""track_usage records every LM's calls (not only dspy-for's LMs), exactly, with threads and async."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from dspy_for.lm import recorder as recorder_mod
from dspy_for.lm.factory import configure_cache
from dspy_for.lm.usage import CallRecord, UsageWarning, role, track_usage
from dspy_for.testing import ScriptedLM

ANSWER = "[[ ## answer ## ]]\n4\n\n[[ ## completed ## ]]"


class LegacyLM(dspy.BaseLM):
    """A user's custom LM in DSPy's (deprecated but supported) forward() style, OpenAI-shaped responses."""

    def __init__(self, model: str = "my/legacy", *, usage: bool = True, finish: bool = True) -> None:
        super().__init__(model, cache=False)
        self.with_usage, self.with_finish = usage, finish

    def forward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": ANSWER}}
        if self.with_finish:
            choice["finish_reason"] = "stop"
        out: dict[str, Any] = {"model": self.model, "choices": [choice]}
        if self.with_usage:
            out["usage"] = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        return out


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(recorder_mod, "_warned_models", set())


def quiet_legacy():
    """DSPy warns that forward()-style LMs are deprecated; these tests are about usage."""
    return warnings.catch_warnings()


def test_a_custom_base_lm_is_recorded_with_usage_and_finish_reason():
    lm = LegacyLM()
    predict = dspy.Predict("question -> answer")
    with quiet_legacy():
        warnings.simplefilter("ignore", DeprecationWarning)
        with dspy.context(lm=lm), track_usage() as usage, role("task"):
            assert predict(question="2+2").answer == "4"
    (call,) = usage.calls
    assert call == CallRecord(
        role="task",
        model="my/legacy",
        prompt_tokens=7,
        completion_tokens=3,
        cache_hit=False,
        finish_reason="stop",
        wall_time=call.wall_time,
        ok=True,
        error=None,
        started_at=call.started_at,
        ended_at=call.ended_at,
    )
    assert call.content is not None and call.content.sent["messages"][-1]["role"] == "user"
    assert call.content.returned == [ANSWER]


def test_an_lm_without_usage_or_finish_reason_warns_once_per_model():
    lm, other = LegacyLM(usage=False, finish=False), LegacyLM("my/other", usage=False, finish=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with track_usage() as usage:
            for _ in range(3):
                lm("hi")
            other("hi")
            other("hi")
    ours = [str(w.message) for w in caught if issubclass(w.category, UsageWarning)]
    assert len(ours) == 2 and usage.total.calls == 5
    assert "`my/legacy`" in ours[0] and "no token usage and no finish reason" in ours[0]
    assert "ProRefine" in ours[0] and "token_budget" in ours[0]
    assert "`my/other`" in ours[1] and "finish reason" not in ours[1].split(" for its calls")[0]


def test_lms_that_report_usage_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UsageWarning)
        with track_usage():
            ScriptedLM(lambda m, t: "x y")("hi")
            DummyLM([{"answer": "1"}])("hi")  # 0 tokens, but reported


def test_acall_is_recorded_with_its_role_and_concurrent_tasks_keep_theirs():
    lm = ScriptedLM(lambda m, t: "a b c")

    async def one(name: str, prompt: str) -> None:
        with role(name):
            await lm.acall(prompt)

    async def main() -> None:
        await asyncio.gather(*(one(f"r{i}", " ".join(["w"] * (i + 1))) for i in range(6)))

    with track_usage() as usage:
        asyncio.run(main())
    assert {name: r.prompt_tokens for name, r in usage.roles.items()} == {f"r{i}": i + 1 for i in range(6)}
    assert all(r.calls == 1 and r.completion_tokens == 3 for r in usage.roles.values())


class RawCall(dspy.Module):
    def forward(self, question: str) -> dspy.Prediction:
        return dspy.Prediction(answer=dspy.settings.lm(question)[0])


def test_threads_sharing_one_lm_are_counted_exactly():
    """dspy.Evaluate with 4 threads on one LM: each call's own tokens and role."""
    lm = ScriptedLM(lambda m, t: " ".join(["x"] * (len(m[-1]["content"].split()) % 7 + 1)))
    questions = [" ".join(["q"] * i) for i in range(1, 25)]
    devset = [dspy.Example(question=q).with_inputs("question") for q in questions]
    evaluate = dspy.Evaluate(devset=devset, metric=lambda e, p, t=None: 1.0, num_threads=4, display_progress=False)
    with dspy.context(lm=lm), track_usage() as usage, role("task"):
        evaluate(RawCall())
    assert usage["task"].calls == len(lm.calls) == len(usage.calls) == 24
    assert sorted((c.prompt_tokens, c.completion_tokens) for c in usage.calls) == [(i, i % 7 + 1) for i in range(1, 25)]


def test_dspys_own_usage_tracker_still_sees_the_calls():
    lm = ScriptedLM(lambda m, t: "a b")
    with dspy.context(lm=lm), dspy.track_usage() as theirs, track_usage() as ours:
        lm("one two three")
    assert ours.total.prompt_tokens == 3
    totals = theirs.get_total_tokens()["scripted"]
    assert totals["prompt_tokens"] == 3 and totals["completion_tokens"] == 2


def test_history_disabled_still_counts_billed_tokens():
    lm = ScriptedLM(lambda m, t: "a b")
    with dspy.context(disable_history=True), track_usage() as usage:
        lm("one two three")
    (call,) = usage.calls
    assert (call.prompt_tokens, call.completion_tokens, call.cache_hit) == (3, 2, False) and not lm.history


def test_an_lm_calling_another_lm_is_counted_once():
    inner = ScriptedLM(lambda m, t: ANSWER)

    class Wrapper(LegacyLM):
        def forward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> dict[str, Any]:
            inner("inner call")
            return super().forward(prompt, messages, **kwargs)

    with quiet_legacy():
        warnings.simplefilter("ignore", DeprecationWarning)
        with track_usage() as usage:
            Wrapper("my/wrapper")("hi")
    assert [(c.model, c.prompt_tokens, c.completion_tokens) for c in usage.calls] == [("my/wrapper", 7, 3)]


def test_errors_name_their_class():
    def boom(messages, max_tokens):
        raise ValueError("bad request")

    with track_usage() as usage, pytest.raises(Exception, match="bad request") as info:
        ScriptedLM(boom)("hi")
    (call,) = usage.calls
    assert not call.ok and call.error == type(info.value).__name__ and call.finish_reason is None


def test_cache_hits_of_copies_and_async_keep_the_original_tokens(tmp_path):
    configure_cache(tmp_path / "cache")
    lm = ScriptedLM(lambda m, t: "one two three", cache=True)

    async def twice() -> None:
        await lm.acall("a b")
        await lm.copy().acall("a b")

    with track_usage() as usage:
        asyncio.run(twice())
    first, second = usage.calls
    assert not first.cache_hit and second.cache_hit
    assert (second.prompt_tokens, second.completion_tokens, second.finish_reason) == (2, 3, "stop")
    assert usage.total.served_tokens == 2 * usage.total.tokens == 10
