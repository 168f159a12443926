"""The DSPy internals dspy-for relies on are present (dspy_for.compat.dspy), and fail loudly when not."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import dspy
import pytest
from dspy.clients.cache import Cache

from dspy_for.compat import dspy as compat
from dspy_for.testing import ScriptedLM


def test_the_installed_dspy_is_supported():
    compat.check_supported()


def test_a_dspy_without_the_private_cache_hook_fails_loudly(monkeypatch):
    monkeypatch.delattr(Cache, "_prepare_cached_response")
    with pytest.raises(compat.UnsupportedDSPyError) as info:
        compat.check_supported()
    msg = str(info.value)
    assert "Cache._prepare_cached_response" in msg and compat.SUPPORTED_DSPY in msg and "pip install" in msg


def test_dspy_still_clears_usage_on_a_hit_and_the_cache_keeps_it():
    """The reason for UsageKeepingCache: DSPy's hit has no usage; ours carries the original call's."""
    stored = SimpleNamespace(usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}, choices=[])
    plain = Cache(False, True, None)._prepare_cached_response(copy.deepcopy(stored))
    assert plain.usage == {} and plain.cache_hit and compat.original_usage(plain) is None
    kept = compat.UsageKeepingCache(False, True, None)._prepare_cached_response(stored)
    assert kept.usage == {} and kept.cache_hit
    assert compat.original_usage(kept) == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert stored.usage["prompt_tokens"] == 5  # the stored response is untouched
    assert compat.UsageKeepingCache(False, True, None)._prepare_cached_response({"a": 1}) == {"a": 1}


def test_each_call_has_a_history_entry_holding_its_outputs_usage_and_response():
    """find_history_entry relies on DSPy's history entry holding the very outputs list the call returns."""
    lm = ScriptedLM(lambda m, t: "a b c")
    outputs = lm("one two")
    lm("another call")
    entry = compat.find_history_entry(lm, outputs)
    assert entry is lm.history[0] and entry["outputs"] is outputs
    assert entry["usage"]["prompt_tokens"] == 2 and entry["usage"]["completion_tokens"] == 3
    assert getattr(entry["response"], "finish_reason", None) == "stop"
    assert compat.find_history_entry(lm, ["a b c"]) is None  # equal but not the same list: no match
    assert compat.find_history_entry(lm, None) is None


def test_call_with_messages_sends_formatted_messages():
    lm = ScriptedLM(lambda m, t: "ok")
    assert compat.call_with_messages(lm, [{"role": "user", "content": "hi"}]) == ["ok"]
    assert lm.calls[-1]["messages"] == [{"role": "user", "content": "hi"}]


def test_lm_callbacks_exist():
    from dspy.utils.callback import BaseCallback

    assert callable(BaseCallback.on_lm_start) and callable(BaseCallback.on_lm_end) and hasattr(dspy, "context")


def test_a_role_lm_relays_the_adapters_door_and_nothing_else():
    """RoleLM wraps GEPA's and MIPROv2's LMs: a predictor's call through it is an adapter call to the LM
    it wraps (no deprecation warning); a user's own ``messages=`` call through it still warns."""
    import warnings

    from dspy_for.optimizers.compiled import RoleLM

    wrapped = RoleLM(ScriptedLM(lambda m, t: {"answer": "4"}), "optimizer")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dspy.context(lm=wrapped, adapter=dspy.ChatAdapter()):
            assert dspy.Predict("question -> answer")(question="2+2?").answer == "4"
    with pytest.warns(DeprecationWarning, match="messages="):
        wrapped(messages=[{"role": "user", "content": "hi"}])
