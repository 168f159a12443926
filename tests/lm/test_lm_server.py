"""The local llama.cpp server for real (`llm`: `qwen2.5-coder-0.5b`, or $DSPY_FOR_TEST_MODEL): answers and finish
reasons, DSPy's cache, one server shared by processes, restart after a crash, `serve`; requests in flight batched
together (read from the server's own counters, not a clock); its prompt reuse; and, with one slot and the prompt
cache off, answers that are a function of their prompt alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import dspy
import pytest

from dspy_for import make_lm, track_usage
from dspy_for.lm import llama_build, server
from dspy_for.lm.registry import get_model

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


@pytest.fixture
def server_dir(tmp_path, monkeypatch):
    """An isolated server registry, so these tests start (and stop) their own servers."""
    if not get_model(MODEL).pulled:
        pytest.skip(f"{MODEL} is not pulled: run `dspy-for models pull {MODEL}`")
    monkeypatch.setenv("DSPY_FOR_SERVER_DIR", str(tmp_path / "servers"))
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    yield tmp_path / "servers"
    server.stop_server(MODEL)


def test_chat_completion_and_finish_reasons(server_dir):
    lm = make_lm(f"local/{MODEL}", cache=False)
    with track_usage() as usage:
        capped = lm("Count from 1 to 100, separated by commas.", max_tokens=10)
        short = lm("Reply with the single word: yes", max_tokens=20)
    assert capped and short
    first, second = usage.calls
    assert first.finish_reason == "length" and first.completion_tokens == 10  # the cap is honoured
    assert second.finish_reason == "stop" and second.completion_tokens < 20
    assert first.prompt_tokens > 0 and not first.cache_hit


def test_dspy_program_and_cache_hits_are_counted(server_dir):
    lm = make_lm(f"local/{MODEL}", max_tokens=200)
    cot = dspy.ChainOfThought("question -> answer: float")
    with dspy.context(lm=lm), track_usage() as usage:
        a = cot(question="What is 2 + 3?")
        b = cot(question="What is 2 + 3?")
    assert a.answer == b.answer
    assert [c.cache_hit for c in usage.calls] == [False, True]
    assert usage.total.cached_completion_tokens == usage.total.completion_tokens > 0


def test_the_identity_names_the_build_the_server_states_in_its_answers(server_dir):
    lm = make_lm(f"local/{MODEL}", cache=False, max_tokens=8, slots=2)
    build = llama_build.server_build()
    expected = f"{MODEL} sha256:{get_model(MODEL).sha256[:12]} {build.label} slots=2"
    assert lm.history == [] and lm.dspy_for_serving == expected  # known before any call
    with track_usage() as usage:
        lm("Say OK.")
    assert [(c.ok, c.cache_hit, c.served_by) for c in usage.calls] == [(True, False, expected)]
    # what the server itself says served the answer is the build the identity names
    answer = lm.history[-1]["response"]
    body = getattr(answer, "provider_data", None) or {}
    fingerprint = getattr(answer, "system_fingerprint", None) or body.get("system_fingerprint")
    assert fingerprint == build.fingerprint


def test_requests_in_flight_are_decoded_together(server_dir):
    """Four requests sent at once on a 4-slot server: the server decodes several slots per step (its own counter of
    busy slots per decode, averaged over every decode it made), which a server answering one at a time never does."""
    lm = make_lm(f"local/{MODEL}", cache=False, slots=4)
    questions = [f"Write {n} short sentences about the number {n}." for n in (3, 4, 5, 6)]
    answers: list[object] = [None] * 4

    def ask(i: int) -> None:
        answers[i] = lm(questions[i], max_tokens=48)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(answers)
    seen = server.metrics(lm.server)
    assert seen["tokens_predicted_total"] >= 4 * 24
    assert seen["n_busy_slots_per_decode"] > 1.5  # most decode steps served two or more requests together
    one = make_lm(f"local/{MODEL}", cache=False)  # the same server: its counters go on
    assert one.server.pid == lm.server.pid


def test_a_repeated_prefix_is_reused_and_with_the_cache_off_evaluated_whole(server_dir):
    system = "You are a careful arithmetic tutor who answers briefly. " * 20  # ~200 tokens every request shares
    ask = [f"{system}\n\nWhat is {q}?" for q in ("17 + 25", "9 * 7")]
    on = make_lm(f"local/{MODEL}", cache=False, max_tokens=16, slots=1)
    off = make_lm(f"local/{MODEL}", cache=False, max_tokens=16, slots=1, prompt_cache=False)
    on(ask[0])
    before = server.metrics(on.server)
    on(ask[1])
    reused = server.metrics(on.server)
    assert reused["prompt_tokens_cached_total"] - before["prompt_tokens_cached_total"] >= 150  # the system prompt
    off(ask[0])
    whole = server.metrics(on.server)
    assert whole["prompt_tokens_cached_total"] == reused["prompt_tokens_cached_total"]  # nothing reused
    assert whole["prompt_tokens_total"] - reused["prompt_tokens_total"] >= 200  # every prompt token evaluated


def test_with_one_slot_and_the_prompt_cache_off_an_answer_is_a_function_of_its_prompt(server_dir):
    """The same prompts asked on a fresh 1-slot server, then again after other requests that share their prefix,
    in another order, get the same texts: nothing of the requests before reaches an answer."""
    system = "You solve grade-school math problems step by step and end with the number. " * 8
    questions = [
        "A farmer has 17 cows and buys 25 more, then sells 9. How many cows?",
        "A box holds 12 eggs. How many eggs are in 7 boxes, less 5 broken ones?",
        "Tom reads 23 pages a day for 6 days, then 11 pages. How many pages?",
    ]
    prompts = [f"{system}\n\n{q}" for q in questions]

    def answers(order: list[int]) -> dict[int, str]:
        lm = make_lm(f"local/{MODEL}", cache=False, max_tokens=48, slots=1, prompt_cache=False)
        assert lm.slots == 1
        return {i: lm(prompts[i])[0] for i in order}

    first = answers([0, 1, 2])
    server.stop_server(MODEL)  # a fresh server: no state of the first session
    again = answers([2, 0, 1])
    assert again == first


_CHILD = """
import json, os, sys
from dspy_for.lm.server import ensure_server
info = ensure_server(sys.argv[1])
print(json.dumps({"pid": info.pid, "port": info.port}), flush=True)
sys.stdin.readline()
"""


def test_two_processes_share_one_server_and_the_last_stops_it(server_dir):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, MODEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    infos = [json.loads(p.stdout.readline()) for p in procs]
    assert infos[0] == infos[1]  # the same server (pid and port) for both
    state = json.loads((server_dir / f"{MODEL}.json").read_text())
    assert sorted(state["leases"]) == sorted(p.pid for p in procs)
    procs[0].communicate("\n", timeout=60)
    assert server._alive(infos[0]["pid"])  # still leased by the second process
    procs[1].communicate("\n", timeout=60)
    deadline = time.time() + 20
    while server._alive(infos[0]["pid"]) and time.time() < deadline:
        time.sleep(0.2)
    assert not server._alive(infos[0]["pid"])  # started by the library, no lease left: stopped
    assert not (server_dir / f"{MODEL}.json").exists()


def test_killed_server_is_restarted_on_the_next_call(server_dir):
    lm = make_lm(f"local/{MODEL}", cache=False)
    assert lm("Say hi.", max_tokens=5)
    old = lm.server.pid
    os.killpg(old, signal.SIGKILL)
    time.sleep(0.5)
    assert lm("Say hi.", max_tokens=5)  # revived transparently
    assert lm.server.pid != old and server.healthy(lm.server)


def test_serve_runs_a_server_the_library_uses_but_never_stops(server_dir):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    serve = subprocess.Popen(
        [sys.executable, "-m", "dspy_for.cli", "serve", MODEL, "--slots", "2"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        state_path = server_dir / f"{MODEL}.json"
        deadline = time.time() + 120
        while not state_path.exists() and serve.poll() is None and time.time() < deadline:
            time.sleep(0.3)
        assert state_path.exists(), serve.stdout.read() if serve.poll() is not None else "serve did not start"
        served = json.loads(state_path.read_text())
        assert served["started_by"] == "serve" and served["slots"] == 2
        info = server.ensure_server(MODEL)
        assert info.pid == served["pid"] and os.getpid() in info.leases  # reused, not a second server
        assert make_lm(f"local/{MODEL}").slots == 2  # an LM says which slots serve it
        server.release_server(MODEL)  # the last library lease goes away ...
        assert server._alive(served["pid"]) and server.healthy(info)  # ... and the served server stays up
        serve.send_signal(signal.SIGTERM)  # stopping `serve` stops its server
        serve.wait(timeout=30)
        deadline = time.time() + 20
        while server._alive(served["pid"]) and time.time() < deadline:
            time.sleep(0.2)
        assert not server._alive(served["pid"]) and not state_path.exists()
    finally:
        if serve.poll() is None:
            serve.kill()
