"""The fault-injecting test server behaves as documented (other conformance tests rely on it)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from conftest import CANARY_KEY, plain_lm
from server import FaultServer

from dspy_for.lm.usage import track_usage


def post(server: FaultServer, body: dict[str, Any], timeout: float = 5) -> tuple[int, Any]:
    req = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-x"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_answers_honour_max_tokens_and_report_usage(fault_server):
    fault_server.responder = lambda messages, max_tokens: "one two three four five"
    assert fault_server.base_url.startswith("http://127.0.0.1:") and fault_server.base_url.endswith("/v1")
    msgs = [{"role": "user", "content": "a b c"}]
    status, full = post(fault_server, {"model": "test-model", "messages": msgs})
    assert status == 200 and full["choices"][0]["message"]["content"] == "one two three four five"
    assert full["choices"][0]["finish_reason"] == "stop"
    assert full["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    for key in ("max_tokens", "max_completion_tokens"):
        _, cut = post(fault_server, {"model": "test-model", "messages": msgs, key: 2})
        assert cut["choices"][0]["message"]["content"] == "one two" and cut["choices"][0]["finish_reason"] == "length"
        assert cut["usage"]["completion_tokens"] == 2
    assert len(fault_server.requests) == 3 and fault_server.requests[0]["messages"] == msgs
    with urllib.request.urlopen(f"{fault_server.base_url}/models", timeout=5) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "test-model"


def test_dict_answers_are_in_chat_adapter_format(fault_server):
    fault_server.responder = lambda messages, max_tokens: {"reasoning": "r", "answer": "36"}
    _, out = post(fault_server, {"model": "test-model", "messages": [{"role": "user", "content": "q"}]})
    text = out["choices"][0]["message"]["content"]
    assert "[[ ## reasoning ## ]]" in text and "[[ ## answer ## ]]\n36" in text


def test_fault_times_then_normal_again(fault_server):
    lm = plain_lm(fault_server)
    fault_server.set_fault("500", times=2)
    with track_usage() as usage:
        for _ in range(2):
            with pytest.raises(Exception, match="injected internal server error"):
                lm("hi")
        assert lm("hi") and fault_server.fault is None
    assert [c.ok for c in usage.calls] == [False, False, True]
    assert usage.calls[0].error == "LMServerError" and usage.calls[-1].error is None
    with pytest.raises(ValueError, match="unknown fault"):
        fault_server.set_fault("teapot")


def test_503_is_retried_when_the_lm_retries(fault_server):
    lm = plain_lm(fault_server, num_retries=1)
    fault_server.set_fault("503", times=1)
    assert lm("hi") and len(fault_server.requests) == 2


@pytest.mark.parametrize("fault", ["garbage", "disconnect"])
def test_broken_answers_raise(fault, fault_server):
    fault_server.set_fault(fault)
    with pytest.raises(Exception):  # noqa: B017 - the client's own error class
        plain_lm(fault_server)("hi")


def test_stall_ends_with_the_clients_timeout(fault_server):
    fault_server.set_fault("stall")
    start = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - the client's own timeout error
        plain_lm(fault_server, timeout=1)("hi")
    assert time.monotonic() - start < 15


def test_echo401_echoes_the_api_key(fault_server):
    fault_server.set_fault("echo401")
    with pytest.raises(Exception) as info:  # the client's own auth error
        plain_lm(fault_server)("hi")
    assert CANARY_KEY in str(info.value)  # what a careless log would leak: tests check it never reaches files
