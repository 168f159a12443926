"""Integration tests against a real local llama.cpp server (`qwen2.5-coder-0.5b`, or $DSPY_FOR_TEST_MODEL)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import dspy
import pytest

from dspy_for import make_lm, track_usage
from dspy_for.errors import ServerError
from dspy_for.lm import server
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


def test_port_already_in_use_is_a_clear_error(server_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerError, match=f"Port {port} .* already in use"):
            server.start_server(MODEL, port=port)


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
        [sys.executable, "-m", "dspy_for.cli", "serve", MODEL],
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
        assert served["started_by"] == "serve"
        info = server.ensure_server(MODEL)
        assert info.pid == served["pid"] and os.getpid() in info.leases  # reused, not a second server
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
