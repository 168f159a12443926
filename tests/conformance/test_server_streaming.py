"""The test server speaks OpenAI's server-sent events for ``"stream": true`` (what ``dspy.streamify`` sends), and a
responder may read the whole request it answers."""

from __future__ import annotations

import asyncio
import http.client
import json
from typing import Any
from urllib.parse import urlparse

import dspy
import pytest
from server import FaultServer

from dspy_for.lm.usage import track_usage


def stream(server: FaultServer, body: dict[str, Any]) -> tuple[int, str, list[str]]:
    """(status, content type, the ``data:`` payloads in order) of one streamed chat request."""
    url = urlparse(server.base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=5)
    try:
        conn.request("POST", f"{url.path}/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read().decode()
        assert resp.getheader("Transfer-Encoding") == "chunked"
        events = [block for block in raw.split("\n\n") if block]
        assert all(e.startswith("data: ") for e in events), events
        return resp.status, resp.getheader("Content-Type") or "", [e[len("data: ") :] for e in events]
    finally:
        conn.close()


@pytest.mark.parametrize("include_usage", [True, False])
def test_a_stream_is_openai_chunks_then_done(fault_server, include_usage):
    fault_server.responder = lambda messages, max_tokens: "one two three four five"
    body: dict[str, Any] = {"model": "m-stream", "messages": [{"role": "user", "content": "a b c"}], "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    status, content_type, data = stream(fault_server, body)
    assert status == 200 and content_type == "text/event-stream" and data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and {c["model"] for c in chunks} == {"m-stream"}
    assert len({c["id"] for c in chunks}) == 1
    with_choices = [c for c in chunks if c["choices"]]
    assert with_choices[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in with_choices)
    assert text == "one two three four five" and len(with_choices) == 1 + 5 + 1  # role, one per word, finish
    assert [c["choices"][0]["finish_reason"] for c in with_choices] == [None] * 6 + ["stop"]
    usage = [c["usage"] for c in chunks if "usage" in c]
    assert usage == ([{"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}] if include_usage else [])
    if include_usage:
        assert chunks[-1]["choices"] == []  # the usage chunk comes last, as OpenAI sends it
    assert fault_server.responses[-1]["text"] == text and fault_server.requests[-1]["stream"] is True


def test_a_stream_honours_max_tokens(fault_server):
    fault_server.responder = lambda messages, max_tokens: "one two three four five"
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": True, "max_tokens": 2}
    _, _, data = stream(fault_server, body)
    chunks = [json.loads(d) for d in data[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "one two" and chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_the_connection_stays_open_after_a_stream(fault_server):
    """A chunked stream ends cleanly: the same keep-alive connection serves the next request."""
    url = urlparse(fault_server.base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=5)
    try:
        for streamed in (True, False, True):
            body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": streamed}
            conn.request("POST", f"{url.path}/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read()
    finally:
        conn.close()
    assert len(fault_server.responses) == 3


@pytest.mark.parametrize("engine", ["auto", "litellm"])
def test_dspy_streamify_streams_a_field_from_the_server(fault_server, engine):
    fault_server.responder = lambda messages, max_tokens: {"answer": "thirty six apples in all"}
    lm = dspy.LM(
        "openai/m-stream", api_base=fault_server.base_url, api_key="sk-test", cache=False, num_retries=0, engine=engine
    )

    async def run() -> list[Any]:
        # streamify keeps the callbacks in force when it wraps the program: track_usage's recorder among them
        with dspy.context(lm=lm), track_usage() as usage:
            listener = dspy.streaming.StreamListener(signature_field_name="answer")
            program = dspy.streamify(dspy.Predict("question -> answer"), stream_listeners=[listener])
            out = [value async for value in program(question="How many apples?")]
        served = fault_server.responses[-1]["usage"]
        assert usage.total.calls == 1
        if engine == "auto":  # DSPy's own engine asks for the usage chunk (litellm's route estimates the tokens)
            assert fault_server.requests[-1]["stream_options"] == {"include_usage": True}
            assert (usage.total.prompt_tokens, usage.total.completion_tokens) == (
                served["prompt_tokens"],
                served["completion_tokens"],
            )
        return out

    out = asyncio.run(run())
    chunks = [v.chunk for v in out if isinstance(v, dspy.streaming.StreamResponse)]
    assert len(chunks) > 1 and "".join(chunks) == "thirty six apples in all"
    assert isinstance(out[-1], dspy.Prediction) and out[-1].answer == "thirty six apples in all"
    assert fault_server.requests[-1]["stream"] is True and fault_server.requests[-1]["model"] == "m-stream"


def test_a_responder_reads_the_request_it_answers(fault_server):
    seen: list[Any] = []

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> str:
        seen.append(fault_server.current_request())
        return "ok"

    fault_server.responder = respond
    lm = dspy.LM("openai/m-read", api_base=fault_server.base_url, api_key="sk-test", cache=False, temperature=0.7)
    lm("hi")
    assert seen[0]["model"] == "m-read" and seen[0]["temperature"] == 0.7
    assert fault_server.current_request() is None  # outside a responder
