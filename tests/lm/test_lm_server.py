"""The local llama.cpp server: integration tests against a real one (`llm`: `qwen2.5-coder-0.5b`, or
$DSPY_FOR_TEST_MODEL), and the prompt cache's command line, option, alias, state file and reuse rule
without a server."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import dspy
import numpy as np
import pytest

from dspy_for import make_lm, track_usage
from dspy_for.errors import ConfigError, ServerError
from dspy_for.lm import prompt_cache, server
from dspy_for.lm.registry import get_model

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
    server.stop_server(MODEL, prompt_cache=True)


@pytest.mark.llm
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


@pytest.mark.llm
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


@pytest.mark.llm
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


@pytest.mark.llm
def test_port_already_in_use_is_a_clear_error(server_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerError, match=f"Port {port} .* already in use"):
            server.start_server(MODEL, port=port)


@pytest.mark.llm
def test_killed_server_is_restarted_on_the_next_call(server_dir):
    lm = make_lm(f"local/{MODEL}", cache=False)
    assert lm("Say hi.", max_tokens=5)
    old = lm.server.pid
    os.killpg(old, signal.SIGKILL)
    time.sleep(0.5)
    assert lm("Say hi.", max_tokens=5)  # revived transparently
    assert lm.server.pid != old and server.healthy(lm.server)


@pytest.mark.llm
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


# ------------------------------------------------------------------------------ the prompt cache, no server


@pytest.fixture
def no_model(tmp_path, monkeypatch):
    """An isolated server directory and a stand-in model file (nothing is started)."""
    monkeypatch.setenv("DSPY_FOR_SERVER_DIR", str(tmp_path / "servers"))
    gguf = tmp_path / "model.gguf"
    monkeypatch.setattr(server, "model_path", lambda name: gguf)
    return gguf


def test_the_default_server_command_is_unchanged_and_the_cached_one_runs_in_fixed_chunks(no_model):
    name = "qwen2.5-coder-0.5b"
    sha = get_model(name).sha256[:12]
    off = server.server_command(name, port=8123, n_ctx=4096, n_threads=2)
    assert off == [
        sys.executable, "-m", "llama_cpp.server", "--model", str(no_model), "--model_alias", f"{name}-{sha}",
        "--host", "127.0.0.1", "--port", "8123", "--n_ctx", "4096", "--n_threads", "2",
    ]  # fmt: skip
    on = server.server_command(name, port=8123, n_ctx=4096, n_threads=2, prompt_cache=True, prompt_cache_bytes=5000)
    assert on[:3] == [sys.executable, "-c", server._PROMPT_CACHE_BOOT]
    assert "run_prompt_cache_server" in on[2]
    flags = dict(zip(on[3::2], on[4::2], strict=True))
    assert flags["--prompt_cache_bytes"] == "5000" and flags["--logits_all"] == "False"
    assert flags["--n_batch"] == flags["--n_ubatch"] == str(prompt_cache.PROMPT_CACHE_CHUNK) == "64"
    assert flags["--model_alias"] == f"{name}-{sha}-pc64" == server.alias_for(name, prompt_cache=True)
    off_flags = dict(zip(off[3::2], off[4::2], strict=True))
    assert {k: flags[k] for k in off_flags if k != "--model_alias"} == {
        k: v for k, v in off_flags.items() if k != "--model_alias"
    }
    with pytest.raises(ConfigError, match="`prompt_cache_bytes` must be an integer >= 0"):
        server.server_command(name, port=1, n_ctx=1, n_threads=1, prompt_cache=True, prompt_cache_bytes=-1)


def test_the_prompt_cache_server_has_its_own_state_lock_and_log(no_model):
    name = "qwen2.5-coder-0.5b"
    plain, cached = server._paths(name), server._paths(name, prompt_cache=True)
    assert [p.name for p in plain] == [f"{name}.json", f"{name}.lock", f"{name}.log"]
    assert [p.name for p in cached] == [
        f"{name}.prompt-cache.json",
        f"{name}.prompt-cache.lock",
        f"{name}.prompt-cache.log",
    ]
    assert server.alias_for(name) != server.alias_for(name, prompt_cache=True)


def test_ensure_server_with_the_prompt_cache_starts_and_leases_the_cached_server_only(no_model, monkeypatch):
    name = "qwen2.5-coder-0.5b"
    started, terminated = [], []

    def fake_start(model, **kwargs):
        started.append((model, kwargs))
        pc = kwargs.get("prompt_cache", False)
        info = server.ServerInfo(model, server.alias_for(model, pc), "127.0.0.1", 1, 4242, "library", 4096, 2, [], pc)
        return info, None

    monkeypatch.setattr(server, "start_server", fake_start)
    monkeypatch.setattr(server, "_terminate", terminated.append)
    monkeypatch.setattr(server, "_alive", lambda pid: pid in (4242, os.getpid()))
    monkeypatch.setattr(server, "_OWN_LEASES", set())
    info = server.ensure_server(name, prompt_cache=True)
    assert started == [(name, {"n_ctx": 4096, "n_threads": None, "port": None, "prompt_cache": True})]
    assert info.prompt_cache and info.alias.endswith("-pc64") and os.getpid() in info.leases
    state_path, _, _ = server._paths(name, prompt_cache=True)
    assert json.loads(state_path.read_text())["prompt_cache"] is True
    assert not server._paths(name)[0].exists()  # the default server's state is untouched
    assert server.ensure_server(name, prompt_cache=True).pid == 4242 and len(started) == 1  # reused
    server.release_server(name, prompt_cache=True)
    assert terminated == [4242] and not state_path.exists()  # last lease of a library-started server: stopped


def test_make_lm_prompt_cache_option(monkeypatch, tmp_path):
    from dspy_for.lm import LocalLM, check_lm_options, describe_lm

    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def fake_ensure(name, **kwargs):
        calls.append(kwargs)
        pc = kwargs.get("prompt_cache", False)
        return server.ServerInfo(name, server.alias_for(name, pc), "127.0.0.1", 1, 0, "library", 4096, 2, [], pc)

    monkeypatch.setattr(server, "ensure_server", fake_ensure)
    on = make_lm("local/qwen2.5-coder-0.5b", prompt_cache=True)
    off = make_lm("local/qwen2.5-coder-0.5b")
    assert isinstance(on, LocalLM) and on.prompt_cache and not off.prompt_cache
    assert [c["prompt_cache"] for c in calls] == [True, False]
    assert "prompt_cache" not in on.kwargs  # consumed, never sent to the server
    assert on.model.endswith("-pc64") and on.model != off.model  # DSPy's cache key differs
    assert describe_lm(on)["prompt_cache"] is True and "prompt_cache" not in describe_lm(off)
    with pytest.raises(ConfigError, match=r"`prompt_cache` applies to local models only"):
        make_lm("openai/gpt-4.1-mini", prompt_cache=True)
    assert "prompt_cache" not in make_lm("openai/gpt-4.1-mini", prompt_cache=False).kwargs
    with pytest.raises(ConfigError, match=r"`prompt_cache` must be true or false.*prompt_cache=true"):
        check_lm_options({"prompt_cache": "yes"})
    check_lm_options({"prompt_cache": True})


def test_prompt_cache_enters_the_result_key():
    from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig

    def key(**lm_options):
        spec = ExperimentSpec(
            lm="local/qwen2.5-coder-0.5b",
            lm_options=lm_options,
            datasets=[DatasetConfig("gsm8k", "val")],
            methods=[MethodConfig("cot")],
        )
        return spec.item_key(spec.datasets[0], spec.methods[0], {}, ["task"])

    assert key(prompt_cache=True) != key()
    assert key(timeout=60) == key()  # a transport option does not (the check can fail)


# ------------------------------------------------------------ the prefix reuse rule, on a simulated llama.cpp


class _FakeCtx:
    """A key/value cache that records how each position was computed: ("chunk", start, length) or ("gen",)."""

    def __init__(self):
        self.ctx = self
        self.kv: list[tuple] = []

    def kv_cache_seq_rm(self, seq_id, p0, p1):
        del self.kv[p0:]
        return True

    def kv_cache_clear(self):
        self.kv = []


class _FakeLlama:
    """What PrefixCache touches of ``llama_cpp.Llama``; ``generate`` evaluates like llama-cpp-python: the
    prompt after the longest prefix of it the context holds, in batches of ``n_batch``, then ``n_gen``
    generated tokens one at a time."""

    def __init__(self, n_batch=4, n_gen=3):
        self.n_batch = n_batch
        self.context_params = SimpleNamespace(n_ubatch=n_batch)
        self.draft_model = None
        self.input_ids = np.zeros(256, dtype=np.intc)
        self.n_tokens = 0
        self._ctx = _FakeCtx()
        self.n_gen = n_gen

    def generate(self, tokens, **kwargs):
        tokens = list(tokens)
        n = 0  # llama-cpp-python: the longest prefix the context holds; a fully held prompt replays its last token
        while n < min(self.n_tokens, len(tokens)) and self.input_ids[n] == tokens[n]:
            n += 1
        n -= n == len(tokens)
        del self._ctx.kv[n:]
        for start in range(n, len(tokens), self.n_batch):
            batch = tokens[start : start + self.n_batch]
            self._ctx.kv += [("chunk", start, len(batch))] * len(batch)
        self.input_ids[: len(tokens)] = tokens
        self.n_tokens = len(tokens)
        for i in range(self.n_gen):
            self.input_ids[self.n_tokens] = 1000 + i
            self.n_tokens += 1
            self._ctx.kv.append(("gen",))
            yield 1000 + i

    def create_completion(self, **kwargs):
        return "completion"


@pytest.fixture
def fake_state(monkeypatch):
    """llama.cpp's per-sequence state save/restore, on the fake cache; returns the sizes of saved states."""
    import llama_cpp

    saved: dict[int, list] = {}
    monkeypatch.setattr(llama_cpp, "llama_state_seq_get_size", lambda ctx, seq: 10 * len(ctx.kv))

    def get_data(ctx, buf, size, seq):
        saved[id(buf)] = list(ctx.kv)
        return size

    def set_data(ctx, buf, size, seq):
        ctx.kv = list(saved[id(buf)])
        return size

    monkeypatch.setattr(llama_cpp, "llama_state_seq_get_data", get_data)
    monkeypatch.setattr(llama_cpp, "llama_state_seq_set_data", set_data)
    return saved


def _fresh(n: int, chunk: int) -> list[tuple]:
    """How a fresh evaluation of an n-token prompt computes each position."""
    return [("chunk", p // chunk * chunk, min(chunk, n - p // chunk * chunk)) for p in range(n)]


def _ask(llm, lines, prompt):
    list(llm.generate(prompt))
    assert llm._ctx.kv[: len(prompt)] == _fresh(len(prompt), llm.n_batch)  # as computed by a fresh evaluation
    return int(lines[-1].split()[4])  # "dspy-for prompt cache: reused K of N ..."


def test_prefix_cache_reuses_only_whole_prompt_chunks_so_every_prompt_is_computed_as_if_fresh(fake_state):
    llm = _FakeLlama(n_batch=4)
    lines: list[str] = []
    cache = prompt_cache.PrefixCache(llm, capacity_bytes=10_000, log=lines.append)
    sys_a, sys_b = list(range(1, 11)), list(range(50, 59))  # two roles' instructions: 10 and 9 tokens
    a1 = _ask(llm, lines, [*sys_a, 200, 201, 202])  # nothing to reuse
    b1 = _ask(llm, lines, [*sys_b, 200, 201])  # another role: the context shares nothing
    a2 = _ask(llm, lines, [*sys_a, 300, 301])  # role A again: its stored prefix, whole chunks only (8 of 10)
    a3 = _ask(llm, lines, [*sys_a, 300, 301, 1000, 1001, 7])  # a2 and its generated tokens: only a2's chunks
    same = _ask(llm, lines, [*sys_a, 300, 301])  # a prompt of whole chunks only: its last chunk is evaluated
    a4 = _ask(llm, lines, [*sys_a, 400, 401, 402, 403, 404, 405])  # shares 10 tokens: 2 whole chunks
    assert (a1, b1, a2, a3, same, a4) == (0, 0, 8, 12, 8, 8)
    assert "(stored prefix)" in lines[2] and "(context)" in lines[3]
    assert cache.nbytes == sum(size for _, _, size in cache.entries.values()) <= 10_000
    assert all(len(k) % 4 == 0 for k in cache.entries)  # stored prefixes are whole chunks of a prompt
    with pytest.raises(ValueError, match="echo"):
        llm.create_completion(prompt="x", echo=True, logprobs=1)
    assert llm.create_completion(prompt="x", logprobs=1) == "completion"


def test_prefix_cache_capacity_drops_the_least_recently_used_prefix(fake_state):
    lines: list[str] = []
    llm = _FakeLlama(n_batch=4)
    cache = prompt_cache.PrefixCache(llm, capacity_bytes=170, log=lines.append)  # 10 "bytes" per position
    roles = [list(range(r * 100, r * 100 + 9)) for r in range(3)]
    for r in roles:  # three roles with 8 reusable tokens each (80 "bytes"): room for two
        _ask(llm, lines, [*r, 1])
    _ask(llm, lines, [7, 7, 7, 7, 7])  # stores the third role's prefix, dropping the first's
    assert [k[0] for k in cache.entries] == [100, 200] and cache.nbytes == 160
    assert _ask(llm, lines, [*roles[2], 2]) == 8  # still stored (storing [7, 7, 7, 7] dropped the second role's)
    assert _ask(llm, lines, [*roles[1], 2]) == _ask(llm, lines, [*roles[0], 2]) == 0  # dropped
    none = prompt_cache.PrefixCache(_FakeLlama(n_batch=4), capacity_bytes=0, log=lines.append)
    for r in roles:
        _ask(none.llm, lines, [*r, 1])
    assert _ask(none.llm, lines, [*roles[2], 2]) == 8  # capacity 0: only the context itself is reused
    assert not none.entries and none.nbytes == 0


def test_prefix_cache_refuses_a_context_it_cannot_keep_canonical():
    llm = _FakeLlama(n_batch=4)
    llm.context_params.n_ubatch = 2
    with pytest.raises(ValueError, match="n_batch == n_ubatch"):
        prompt_cache.PrefixCache(llm, capacity_bytes=1)


@pytest.mark.llm
def test_prompt_cache_server_reuses_prefixes_and_answers_depend_on_the_prompt_alone(server_dir):
    """The same prompt, asked after two others that share its system prompt and asked first on a fresh server,
    gets the same answer: reused chunks are computed as a fresh evaluation computes them."""
    system = "You are a careful arithmetic tutor. " * 30  # ~200 tokens shared by every request
    prompts = [[{"role": "system", "content": system}, {"role": "user", "content": f"What is {q}?"}] for q in
               ("17 + 25", "9 * 7", "144 / 12")]  # fmt: skip
    log = server._paths(MODEL, prompt_cache=True)[2]
    lm = make_lm(f"local/{MODEL}", prompt_cache=True, cache=False, max_tokens=24)
    assert lm.server.prompt_cache and lm.server.alias.endswith("-pc64")
    in_sequence = [lm(messages=p)[0] for p in prompts]
    reused = [int(m) for m in re.findall(r"dspy-for prompt cache: reused (\d+) of", log.read_text())]
    assert reused[0] == 0 and all(r >= 128 for r in reused[1:])  # the shared system prompt, in whole chunks
    server.stop_server(MODEL, prompt_cache=True)
    alone = make_lm(f"local/{MODEL}", prompt_cache=True, cache=False, max_tokens=24)  # a fresh server
    assert alone(messages=prompts[2])[0] == in_sequence[2]


def test_model_label_names_the_local_server_s_route_as_the_user_wrote_it():
    from dspy_for.lm import model_label
    from dspy_for.lm.server import alias_for

    assert model_label(f"hosted_vllm/{alias_for('qwen2.5-coder-1.5b')}") == "local/qwen2.5-coder-1.5b"
    cached = alias_for("qwen2.5-coder-0.5b", prompt_cache=True)
    assert model_label(f"hosted_vllm/{cached}") == "local/qwen2.5-coder-0.5b (prompt cache)"
    assert model_label("hosted_vllm/my-vllm-model") == "hosted_vllm/my-vllm-model"  # a user's own vLLM endpoint
    assert model_label("openai/gpt-4.1-mini") == "openai/gpt-4.1-mini"
