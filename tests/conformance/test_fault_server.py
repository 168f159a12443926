"""The fault-injecting test server behaves as documented (other conformance tests rely on it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dspy
import litellm
import pytest
from conftest import CANARY_KEY, plain_lm, signature_responder
from dspy.utils.exceptions import LMInvalidRequestError, LMRateLimitError, LMServerError
from server import FaultServer, OpenAICompatibleServer

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


# ---------------------------------------------------------------------- like a remote endpoint (issue 39)


def post_full(server: FaultServer, body: dict[str, Any], timeout: float = 10) -> tuple[int, dict[str, str], Any]:
    """POST a chat request: (status, headers, JSON body)."""
    req = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-x"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def post_at_once(server: FaultServer, n: int, body: dict[str, Any]) -> list[tuple[int, dict[str, str], Any]]:
    """``n`` requests sent together from ``n`` threads."""
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: post_full(server, body), range(n)))


CHAT = {"model": "test-model", "messages": [{"role": "user", "content": "q"}]}


def litellm_options(server: FaultServer) -> dict[str, Any]:
    """``litellm.completion`` keywords for one chat call to ``server`` (litellm's own retries decide, not the SDK's)."""
    return {
        "model": "openai/test-model",
        "api_base": server.base_url,
        "api_key": CANARY_KEY,
        "messages": [{"role": "user", "content": "hi"}],
        "max_retries": 0,
        "timeout": 5,
    }


RATE_LIMIT_CODE = "rate_limit_exceeded"


def test_the_server_is_a_package_module_imported_lazily():
    import dspy_for.testing as testing
    from dspy_for.testing import server as package_server

    assert FaultServer is OpenAICompatibleServer is package_server.OpenAICompatibleServer
    assert testing.FaultServer is testing.OpenAICompatibleServer is OpenAICompatibleServer
    with pytest.raises(AttributeError):
        testing.NoSuchThing  # noqa: B018
    code = "import sys, dspy_for.testing; print(sorted(m for m in sys.modules if m.startswith('dspy_for.testing')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "['dspy_for.testing']"


def test_latency_delays_each_answer_but_not_refusals():
    with OpenAICompatibleServer(latency=0.3) as server:
        start = time.monotonic()
        status, _, _ = post_full(server, CHAT)
        assert status == 200 and 0.3 <= time.monotonic() - start < 5
        start = time.monotonic()
        results = post_at_once(server, 4, CHAT)  # answered side by side: each waits, not each in turn
        assert [r[0] for r in results] == [200] * 4 and 0.3 <= time.monotonic() - start < 1.2
        assert server.max_concurrency_seen == 4 and server.rate_limited == 0 and server.in_flight == 0


def test_busy_seconds_span_the_first_request_to_the_last_answer():
    with OpenAICompatibleServer(latency=0.3) as server:
        assert server.busy_seconds is None
        post_full(server, CHAT)
        time.sleep(1.5)  # idle after the last answer: not counted
        first = server.busy_seconds
        assert first is not None and 0.3 <= first < 1.5
        post_full(server, CHAT)  # the next answer ends the span: both calls and the idle time between them
        assert server.busy_seconds is not None and server.busy_seconds >= first + 1.8
        server.reset_counters()
        assert server.busy_seconds is None


def test_beyond_max_in_flight_a_request_gets_429_with_retry_after():
    with OpenAICompatibleServer(latency=0.5, max_in_flight=2, retry_after=1.0) as server:
        results = post_at_once(server, 5, CHAT)
        statuses = sorted(r[0] for r in results)
        assert statuses == [200, 200, 429, 429, 429]
        for _, headers, body in (r for r in results if r[0] == 429):
            assert headers["Retry-After"] == "1"
            assert body["error"]["code"] == RATE_LIMIT_CODE and body["error"]["type"] == "requests"
            assert body["error"]["message"].startswith("Rate limit reached")
        assert server.rate_limited == 3 and server.max_concurrency_seen == 2
        assert len(server.requests) == 5 and len(server.responses) == 2 and server.in_flight == 0
        assert post_full(server, CHAT)[0] == 200  # the limit counts requests in flight, not requests made


def test_429_fault_is_a_rate_limit_storm_whatever_the_load(fault_server):
    fault_server.retry_after = 0.5
    fault_server.set_fault("429")
    for _ in range(3):
        status, headers, body = post_full(fault_server, CHAT)
        assert status == 429 and headers["Retry-After"] == "0.5" and body["error"]["code"] == RATE_LIMIT_CODE
    assert fault_server.rate_limited == 3 and fault_server.responses == []
    with pytest.raises(LMRateLimitError) as info:
        plain_lm(fault_server)("hi")
    assert info.value.retry_after == 0.5  # DSPy's retries wait what Retry-After says
    fault_server.set_fault("429", times=1)
    fault_server.retry_after = 0
    assert plain_lm(fault_server, num_retries=1)("hi") and fault_server.rate_limited == 5
    fault_server.set_fault("429")
    with pytest.raises(litellm.RateLimitError):
        litellm.completion(**litellm_options(fault_server), num_retries=0)
    assert fault_server.rate_limited == 6


def test_overloaded_fault_answers_like_anthropic(fault_server):
    fault_server.set_fault("overloaded", times=1)
    status, _, body = post_full(fault_server, CHAT)
    assert status == 529
    assert body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    fault_server.set_fault("overloaded")
    with pytest.raises(LMServerError, match="Overloaded"):  # DSPy: any 5xx is a server error, retried
        plain_lm(fault_server)("hi")
    with pytest.raises(litellm.APIError, match="Overloaded") as info:  # litellm's openai/ route: status kept
        litellm.completion(**litellm_options(fault_server), num_retries=0)
    assert info.value.status_code == 529 and litellm._should_retry(529)  # litellm retries every status >= 500
    fault_server.set_fault("overloaded", times=1)
    assert plain_lm(fault_server, num_retries=1)("hi") and fault_server.fault is None
    fault_server.set_fault("overloaded", times=1)
    assert litellm.completion(**litellm_options(fault_server), num_retries=1).choices[0].message.content


REASONER = "o-test"


@pytest.mark.parametrize(
    ("served", "sent"), [(REASONER, REASONER), (REASONER, f"openai/{REASONER}"), (f"openai/{REASONER}", REASONER)]
)
def test_a_reasoning_model_refuses_temperature_and_max_tokens(served, sent):
    with OpenAICompatibleServer(reasoning_models=[served]) as server:
        chat = {**CHAT, "model": sent}
        status, _, body = post_full(server, {**chat, "temperature": 0})
        assert status == 400
        assert body["error"] == {
            "message": "Unsupported value: 'temperature' does not support 0.0 with this model. Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
        status, _, body = post_full(server, {**chat, "max_tokens": 100})
        assert status == 400 and body["error"]["param"] == "max_tokens"
        assert body["error"]["message"] == (
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
        )
        assert post_full(server, {**chat, "temperature": 1, "max_completion_tokens": 1000})[0] == 200
        assert post_full(server, {**CHAT, "temperature": 0, "max_tokens": 5})[0] == 200  # other models as before
        assert server.responses[-1]["usage"].keys() == {"prompt_tokens", "completion_tokens", "total_tokens"}


def test_a_reasoning_model_spends_reasoning_tokens_within_the_completion_budget():
    answer = "one two three four five six seven eight nine ten"
    with OpenAICompatibleServer(
        lambda m, t: answer, reasoning_models=[REASONER], reasoning_tokens_per_call=8
    ) as server:
        chat = {**CHAT, "model": REASONER}
        _, _, full = post_full(server, chat)
        assert full["choices"][0]["message"]["content"] == answer and full["choices"][0]["finish_reason"] == "stop"
        assert full["usage"] == {
            "prompt_tokens": 1,
            "completion_tokens": 18,
            "total_tokens": 19,
            "completion_tokens_details": {"reasoning_tokens": 8},
        }
        _, _, cut = post_full(server, {**chat, "max_completion_tokens": 11})  # 8 thought, 3 words shown
        assert (
            cut["choices"][0]["message"]["content"] == "one two three"
            and cut["choices"][0]["finish_reason"] == "length"
        )
        assert (
            cut["usage"]["completion_tokens"] == 11
            and cut["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8
        )
        _, _, starved = post_full(server, {**chat, "max_completion_tokens": 5})  # all thought, nothing shown
        assert starved["choices"][0]["message"]["content"] == "" and starved["choices"][0]["finish_reason"] == "length"
        assert (
            starved["usage"]["completion_tokens"]
            == 5
            == starved["usage"]["completion_tokens_details"]["reasoning_tokens"]
        )


def test_a_reasoning_model_through_dspy_and_litellm():
    with OpenAICompatibleServer(signature_responder(), reasoning_models=[REASONER]) as server:
        options: dict[str, Any] = {"api_base": server.base_url, "api_key": CANARY_KEY, "cache": False, "num_retries": 3}
        with pytest.raises(LMInvalidRequestError, match="temperature"):  # a 400: not retried
            dspy.LM(f"openai/{REASONER}", temperature=0.0, **options)("hi")
        assert len(server.requests) == 1
        lm = dspy.LM(f"openai/{REASONER}", temperature=1.0, max_tokens=16000, **options)
        assert lm("hi") and "max_tokens" not in server.requests[-1]
        usage = lm.history[-1]["usage"]
        assert usage["completion_tokens_details"]["reasoning_tokens"] == 64
        assert usage["completion_tokens"] == 64 + len(server.responses[-1]["text"].split(" "))
        with pytest.raises(litellm.BadRequestError, match="temperature"):
            litellm.completion(**{**litellm_options(server), "model": f"openai/{REASONER}"}, temperature=0)


def test_counters_reset():
    with OpenAICompatibleServer(max_in_flight=1) as server:
        server.set_fault("429", times=1)
        assert [post_full(server, CHAT)[0] for _ in range(2)] == [429, 200]
        assert (len(server.requests), len(server.responses), server.rate_limited, server.max_concurrency_seen) == (
            2,
            1,
            1,
            1,
        )
        server.reset_counters()
        assert (len(server.requests), len(server.responses), server.rate_limited, server.max_concurrency_seen) == (
            0,
            0,
            0,
            0,
        )


@pytest.mark.parametrize(
    "options",
    [
        {"latency": -1},
        {"max_in_flight": 0},
        {"max_in_flight": 1.5},
        {"retry_after": -1},
        {"reasoning_tokens_per_call": -1},
        {"reasoning_models": "o3"},
    ],
)
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError):
        OpenAICompatibleServer(**options)
