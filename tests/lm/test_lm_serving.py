"""What served an LM call: the identity every call records (``CallRecord.served_by``), from a hosted response's
``model`` and ``system_fingerprint`` or, for the embedded server, from the model file, the server build and its slots,
known without any call."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import dspy
import pytest

from dspy_for.lm import factory, make_lm, registry, server, track_usage, with_transport
from dspy_for.lm.epochs import fresh
from dspy_for.lm.registry import ModelEntry
from dspy_for.lm.serving import (
    call_identity,
    embedded_identity,
    response_identity,
    served_set,
    stack_identity,
)
from dspy_for.testing import ScriptedLM
from dspy_for.testing.server import OpenAICompatibleServer


def test_a_response_states_its_snapshot_and_fingerprint_and_an_echo_states_nothing():
    hosted = SimpleNamespace(model="gpt-4.1-mini-2025-04-14", system_fingerprint="fp_44709d6fcb")
    assert response_identity(hosted, "gpt-4.1-mini") == "gpt-4.1-mini-2025-04-14 fp_44709d6fcb"
    assert response_identity({"model": "gpt-4.1-mini-2025-04-14"}, "gpt-4.1-mini") == "gpt-4.1-mini-2025-04-14"
    assert response_identity(SimpleNamespace(model="gpt-4.1-mini"), "gpt-4.1-mini") is None  # an echo
    assert response_identity(SimpleNamespace(model="openai/gpt-4.1-mini"), "gpt-4.1-mini") is None
    assert response_identity(SimpleNamespace(model="m", system_fingerprint="fp_1"), "m") == "m fp_1"
    # DSPy's native responses keep the provider's body beside what they map
    native = SimpleNamespace(model="m", provider_data={"model": "m", "system_fingerprint": "b4242-abc"})
    assert response_identity(native, "m") == "m b4242-abc"
    assert response_identity(None, "m") is None
    assert served_set(["b", None, "a", "b", ""]) == ["a", "b"]


def test_the_scripted_lm_reports_no_identity():
    lm = ScriptedLM(lambda messages, max_tokens: "hello")
    with track_usage() as usage:
        lm("hi")
    assert [c.served_by for c in usage.calls] == [None]


@pytest.fixture
def fake_model(tmp_path, monkeypatch) -> ModelEntry:
    """A registry model ``fake`` whose GGUF file (a few bytes) is pulled into a temporary model directory."""
    content = b"not really a gguf file"
    entry = ModelEntry("fake", "fake.gguf", len(content), hashlib.sha256(content).hexdigest(), "", (), ())
    monkeypatch.setenv("DSPY_FOR_MODEL_DIR", str(tmp_path))
    (tmp_path / "fake.gguf").write_bytes(content)
    monkeypatch.setattr(registry, "_load_registry", lambda: {"fake": entry})
    return entry


def test_the_embedded_servers_identity_is_known_without_any_call(fake_model, tmp_path, monkeypatch):
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    info = server.ServerInfo("fake", "fake-x", "127.0.0.1", 1, 0, "library", 4096, 1, slots=3, build="llama.cpp b9-f00")
    monkeypatch.setattr(server, "ensure_server", lambda *a, **k: info)  # no process, nothing listens on port 1
    lm = make_lm("local/fake")
    assert isinstance(lm, factory.LocalLM)
    expected = f"fake sha256:{fake_model.sha256[:12]} llama.cpp b9-f00 slots=3"
    assert stack_identity(lm) == expected and stack_identity(lm.copy(temperature=0.5)) == expected
    assert lm.history == []  # no call was made
    # a call it answers now reports it, and so does one DSPy's cache replays: the cache keeps each stack's apart
    assert call_identity(lm, None, cache_hit=False) == expected == call_identity(lm, None, cache_hit=True)
    assert lm.cache_namespace == expected
    assert embedded_identity("fake", "", 1) == f"fake sha256:{fake_model.sha256[:12]} llama.cpp unknown slots=1"
    assert stack_identity(dspy.LM("openai/x")) is None  # an endpoint says what serves it in its answers only


def test_an_answer_another_stack_made_is_never_replayed_from_dspys_cache(fake_model, tmp_path, monkeypatch):
    """The same request to the same model, served by two stacks (another build, other slots): each misses the
    other's cache entry, so no record names a stack that did not make its answer."""
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))  # make_lm's cache, empty
    with OpenAICompatibleServer(system_fingerprint="b9-f00") as srv:
        base = dict(model="fake", host="127.0.0.1", port=srv.port, pid=0, started_by="library", n_ctx=4096)

        def lm_on(build: str, slots: int):
            info = server.ServerInfo(alias="test-model", n_threads=1, slots=slots, build=build, **base)
            monkeypatch.setattr(server, "ensure_server", lambda *a, **k: info)
            return make_lm("local/fake", num_retries=0)

        with track_usage() as usage:
            # as the embedded server of earlier versions was reached: the same request, without a namespace
            old = dict(api_base=srv.base_url, api_key="local-no-key", num_retries=0, temperature=0.0, timeout=600.0)
            factory.LM("hosted_vllm/test-model", **old)("hello there")
            for build, slots in [("llama.cpp b9-f00", 4), ("llama.cpp b9-f00", 4), ("llama.cpp b9-f00", 1),
                                 ("llama-cpp-python 0.3.36", 4)]:  # fmt: skip
                lm_on(build, slots)("hello there")
        assert len(srv.requests) == 4  # only the third was the second's stack: the cache answered it
    assert [c.cache_hit for c in usage.calls] == [False, False, True, False, False]
    assert [c.served_by.split(" ", 2)[2] for c in usage.calls[1:]] == [
        "llama.cpp b9-f00 slots=4", "llama.cpp b9-f00 slots=4", "llama.cpp b9-f00 slots=1",
        "llama-cpp-python 0.3.36 slots=4",
    ]  # fmt: skip


def test_a_plain_lm_records_the_endpoints_fingerprint_and_a_cache_hit_the_original_calls(tmp_path, monkeypatch):
    from dspy_for.lm import configure_cache

    configure_cache(tmp_path / "cache")
    with OpenAICompatibleServer(model_snapshot="test-model-2025-01-01", system_fingerprint="fp_a") as srv:
        plain = dspy.LM("openai/test-model", api_base=srv.base_url, api_key="sk-test", num_retries=0, cache=True)
        lm = with_transport(plain)  # as a run adopts it: its calls honour fresh()
        with track_usage() as usage:
            lm("hello there")
            srv.system_fingerprint = "fp_b"
            lm("hello there")  # DSPy's cache answers: the identity of the call it replays
            with fresh():
                lm("hello there")  # answered anew: the endpoint's fingerprint now
        assert len(srv.requests) == 2 and "cache" not in srv.requests[-1]
    assert [(c.cache_hit, c.served_by) for c in usage.calls] == [
        (False, "test-model-2025-01-01 fp_a"),
        (True, "test-model-2025-01-01 fp_a"),
        (False, "test-model-2025-01-01 fp_b"),
    ]


def test_an_endpoint_that_echoes_the_model_and_has_no_fingerprint_reports_none(tmp_path):
    with OpenAICompatibleServer() as srv:
        lm = dspy.LM("openai/test-model", api_base=srv.base_url, api_key="sk-test", num_retries=0, cache=False)
        with track_usage() as usage:
            lm("hello")
    assert [c.served_by for c in usage.calls] == [None]
