"""The embedded server's process without a model: its command line, state file and leases, slots, errors (port in
use, model not pulled, server not built, a start that fails), what LMs send it and how they name it — against a
stand-in ``llama-server`` (tests/lm/fake_llama_server.py) that speaks llama-server's command line and HTTP routes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import dspy
import pytest

from dspy_for import make_lm, track_usage
from dspy_for.errors import ConfigError, ModelNotPulledError, ServerError
from dspy_for.lm import llama_build, registry, server
from dspy_for.lm.factory import LocalLM, describe_lm
from dspy_for.lm.options import DEFAULT_SLOTS
from dspy_for.lm.registry import get_model
from dspy_for.lm.serving import call_identity, stack_identity

NAME = "qwen2.5-coder-0.5b"
FAKE = Path(__file__).with_name("fake_llama_server.py")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """``DSPY_FOR_LLAMA_SERVER`` -> the stand-in, an isolated server directory and DSPy cache, a stand-in model file;
    returns the stand-in's log (its command lines and request bodies), read as a list of JSON objects."""
    exe = tmp_path / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(0o755)
    log = tmp_path / "fake.jsonl"
    monkeypatch.setenv("DSPY_FOR_LLAMA_SERVER", str(exe))
    monkeypatch.setenv("FAKE_LLAMA_LOG", str(log))
    monkeypatch.setenv("DSPY_FOR_SERVER_DIR", str(tmp_path / "servers"))
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"")
    monkeypatch.setattr(server, "model_path", lambda name: gguf)

    def entries(key: str) -> list:
        if not log.exists():
            return []
        return [e[key] for e in map(json.loads, log.read_text().splitlines()) if key in e]

    yield entries
    server.stop_server(NAME)


def _flags(argv: list[str]) -> dict[str, str]:
    return {a: (argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "") for i, a in
            enumerate(argv) if a.startswith("--")}  # fmt: skip


def test_the_command_line_runs_slots_in_parallel_each_with_its_own_context(fake):
    build = llama_build.server_build()
    cmd = server.server_command(NAME, port=8123, n_ctx=4096, n_threads=2, slots=3, cache_ram_mb=512, build=build)
    assert cmd[0] == str(build.binary)
    flags = _flags(cmd)
    assert flags["--alias"] == f"{NAME}-{get_model(NAME).sha256[:12]}" == server.alias_for(NAME)  # records keep keys
    assert flags["--parallel"] == "3" and flags["--ctx-size"] == str(3 * 4096)  # n_ctx is per slot
    assert "--no-kv-unified" in flags and "--cont-batching" in flags and "--metrics" in flags
    assert flags["--cache-ram"] == "512" and flags["--threads"] == "2" and flags["--host"] == "127.0.0.1"
    with pytest.raises(ConfigError, match=r"`slots` must be an integer >= 1"):
        server.server_command(NAME, port=1, n_ctx=1, n_threads=1, slots=0, build=build)
    with pytest.raises(ConfigError, match=r"`--prompt-cache-mb` must be an integer >= 0"):
        server.server_command(NAME, port=1, n_ctx=1, n_threads=1, cache_ram_mb=-1, build=build)


def test_a_server_that_is_not_built_is_an_error_naming_the_build_command(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("DSPY_FOR_LLAMA_SERVER")
    monkeypatch.setenv("DSPY_FOR_LLAMA_BUILD_DIR", str(tmp_path / "no-build"))
    with pytest.raises(ServerError, match=r"not built yet .*`dspy-for models build-server`.*DSPY_FOR_LLAMA_SERVER"):
        server.ensure_server(NAME)
    with pytest.raises(ServerError, match=r"`dspy-for models build-server`"):
        make_lm(f"local/{NAME}")
    assert fake("argv") == [] and not (tmp_path / "servers" / f"{NAME}.json").exists()  # nothing started
    monkeypatch.setenv("DSPY_FOR_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(ServerError, match=r"DSPY_FOR_LLAMA_SERVER=.*missing is not an executable file"):
        server.ensure_server(NAME)


def test_a_model_that_is_not_pulled_is_an_error_naming_the_pull_command(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(server, "model_path", registry.model_path)  # the real one, in an empty model directory
    monkeypatch.setenv("DSPY_FOR_MODEL_DIR", str(tmp_path / "no-models"))
    with pytest.raises(ModelNotPulledError, match=rf"`dspy-for models pull {NAME}`"):
        server.ensure_server(NAME)
    assert fake("argv") == []


def test_a_port_in_use_and_a_server_that_fails_to_start_are_clear_errors(fake, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerError, match=rf"Port {port} on 127.0.0.1 is already in use.*`--port`"):
            server.start_server(NAME, port=port)
    monkeypatch.setenv("FAKE_LLAMA_FAIL", "1")
    with pytest.raises(ServerError, match=r"exited with code 1 while starting(.|\n)*failed to load model"):
        server.ensure_server(NAME)


def test_one_server_per_model_with_leases_and_the_slots_it_was_started_with(fake):
    info = server.ensure_server(NAME, slots=2)
    assert info.slots == 2 and info.build == "llama.cpp b7-abc1234 own-build" and os.getpid() in info.leases
    (argv,) = fake("argv")
    assert _flags(argv)["--parallel"] == "2"
    state = json.loads((server.server_dir() / f"{NAME}.json").read_text())
    assert state["slots"] == 2 and state["build"] == info.build and state["started_by"] == "library"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert server.ensure_server(NAME).pid == info.pid  # no slots asked: the running server, no warning
    with pytest.warns(UserWarning, match=r"serves 2 slot\(s\), not the 3 asked: using it as it is"):
        again = server.ensure_server(NAME, slots=3)
    assert again.pid == info.pid and again.slots == 2 and len(fake("argv")) == 1  # never a second server
    server.release_server(NAME)
    deadline = time.time() + 20
    while server._alive(info.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not server._alive(info.pid)  # the library started it and no lease is left: stopped


def test_a_state_file_of_the_old_server_is_not_reused(fake):
    path = server.server_dir()
    path.mkdir(parents=True, exist_ok=True)
    old = {"model": NAME, "alias": "x", "host": "127.0.0.1", "port": 1, "pid": os.getpid(), "started_by": "serve",
           "n_ctx": 4096, "n_threads": 2, "leases": [], "prompt_cache": False, "llama_cpp_python": "0.3.36"}  # fmt: skip
    (path / f"{NAME}.json").write_text(json.dumps(old))
    info = server.ensure_server(NAME)
    assert info.pid != os.getpid() and info.slots == DEFAULT_SLOTS and info.build.startswith("llama.cpp ")


def test_a_local_lm_names_its_stack_caps_its_requests_at_the_slots_and_keeps_its_cache_apart(fake):
    lm = make_lm(f"local/{NAME}", slots=2, max_tokens=50)
    assert isinstance(lm, LocalLM) and lm.slots == 2 and lm.max_connections == 2
    identity = f"{NAME} sha256:{get_model(NAME).sha256[:12]} llama.cpp b7-abc1234 own-build slots=2"
    assert stack_identity(lm) == identity and lm.cache_namespace == identity and lm.history == []
    with track_usage() as usage:
        first = lm("What is 2 + 2?")
        again = lm("What is 2 + 2?")  # DSPy's cache: kept under the identity, so it names it
    assert first == again and [c.cache_hit for c in usage.calls] == [False, True]
    assert [c.served_by for c in usage.calls] == [identity, identity]
    assert call_identity(lm, None, cache_hit=True) == identity
    (body,) = fake("request")  # the cache hit never reached the server
    assert "cache_prompt" not in body  # the server's prompt reuse: its default
    assert "slots" not in body and "prompt_cache" not in body


def test_prompt_cache_false_asks_the_server_to_evaluate_every_prompt_whole(fake):
    lm = make_lm(f"local/{NAME}", prompt_cache=False, cache=False, max_tokens=50)
    assert lm("What is 2 + 2?")
    (body,) = fake("request")
    assert body["cache_prompt"] is False
    on = make_lm(f"local/{NAME}", cache=False, max_tokens=50)
    assert on.server.pid == lm.server.pid  # one server serves both: the choice is each request's
    assert describe_lm(lm)["prompt_cache"] is False and "prompt_cache" not in describe_lm(on)


def test_local_only_options_are_refused_for_other_lms_and_checked_for_local_ones():
    for option, value in (("slots", 2), ("prompt_cache", False)):
        with pytest.raises(ConfigError, match=rf"`{option}` applies to local models only.*--role-lm-option"):
            make_lm("openai/gpt-4.1-mini", **{option: value})
    assert "prompt_cache" not in make_lm("openai/gpt-4.1-mini", prompt_cache=True).kwargs  # the default: nothing to do
    from dspy_for.lm import check_lm_options

    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(ConfigError, match=r"`slots` must be an integer >= 1"):
            check_lm_options({"slots": bad})
    check_lm_options({"slots": 1, "prompt_cache": False})


def test_a_stored_result_keeps_its_key_whatever_the_slots_but_not_whatever_the_prompt_cache():
    from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig

    def key(**lm_options):
        spec = ExperimentSpec(
            lm=f"local/{NAME}",
            lm_options=lm_options,
            datasets=[DatasetConfig("gsm8k", "val")],
            methods=[MethodConfig("cot")],
        )
        return spec.item_key(spec.datasets[0], spec.methods[0], {}, ["task"])

    assert key(slots=1) == key() == key(slots=8)  # the serving identity tells their answers apart
    assert key(prompt_cache=False) != key()  # a request option that can change answers
    assert key(timeout=60) == key()


def test_num_threads_follows_the_local_servers_slots_unless_given():
    from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig
    from dspy_for.experiments.spec.checks import run_threads
    from dspy_for.experiments.spec.model import JudgeConfig

    def threads(lm=f"local/{NAME}", **kw):
        spec = ExperimentSpec(lm=lm, datasets=[DatasetConfig("gsm8k", "val")], methods=[MethodConfig("cot")], **kw)
        return run_threads(spec.validate())

    assert threads() == DEFAULT_SLOTS and ExperimentSpec(datasets=[], methods=[]).num_threads is None
    assert threads(lm_options={"slots": 2}) == 2
    assert threads(role_lm_options={"task": {"slots": 6}}) == 6
    assert threads(num_threads=3) == 3  # given: as given
    assert threads(lm="openai/gpt-4.1-mini") == 1  # no local model: one at a time, as before
    assert threads(lm="openai/gpt-4.1-mini", judge=JudgeConfig(lm=f"local/{NAME}")) == DEFAULT_SLOTS


def test_compare_sends_a_local_models_items_side_by_side(fake, tmp_path, monkeypatch):
    """Items reach the server together (the stand-in counts the requests it handles at once), with num_threads
    left to its default, and one at a time with num_threads 1."""
    from dspy_for.experiments.comparison import compare

    monkeypatch.setenv("FAKE_LLAMA_LATENCY", "0.3")
    monkeypatch.chdir(tmp_path)

    def most_at_once(run: str, **kw) -> int:
        result = compare(
            dataset="gsm8k", split="sample", methods="cot", lm=f"local/{NAME}", limit=4, cache=False,
            tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", results_dir=str(tmp_path / run), **kw,
        )  # fmt: skip
        assert result.ok and result.results["gsm8k"]["cot"].n == 4
        seen = server.metrics(server.ensure_server(NAME))
        server.stop_server(NAME)
        return int(seen["max_concurrency_seen"])

    assert 2 <= most_at_once("default") <= DEFAULT_SLOTS  # side by side, never more than the slots
    assert most_at_once("serial", num_threads=1) == 1
    # more threads than slots: the requests beyond the slots wait in the process (max_connections = slots)
    assert most_at_once("capped", num_threads=8, lm_options={"slots": 2}) == 2


def test_serve_runs_the_server_with_the_slots_asked(fake, tmp_path):
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    code = "import sys; from dspy_for.lm import server; server.model_path = lambda n: sys.argv[1]; "
    code += "from dspy_for.cli import main; sys.argv = ['dspy-for', 'serve', sys.argv[2], '--slots', '3']; main()"
    serve = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "model.gguf"), NAME],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []  # what it printed so far (read as it prints: its "serving" line comes after its state)
    reader = threading.Thread(target=lambda: lines.extend(serve.stdout or ()), daemon=True)
    reader.start()
    try:
        state_path = server.server_dir() / f"{NAME}.json"
        deadline = time.time() + 60
        while not any("serving" in line for line in lines) and serve.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert state_path.exists(), "".join(lines) if serve.poll() is not None else "serve did not start"
        state = json.loads(state_path.read_text())
        assert state["started_by"] == "serve" and state["slots"] == 3
        assert _flags(fake("argv")[0])["--parallel"] == "3"
        serve.terminate()
        serve.wait(timeout=30)
        reader.join(timeout=10)
        out = "".join(lines)
        assert "3 slot(s)" in out and "llama.cpp b7-abc1234 own-build" in out
    finally:
        if serve.poll() is None:
            serve.kill()


def test_dspy_lm_against_the_stand_in_server_sees_the_fingerprint_the_real_one_sends(fake):
    """A plain dspy.LM on the embedded server's endpoint (as a user's own program might) reads what served it from
    the answer: llama.cpp's build as ``system_fingerprint``."""
    info = server.ensure_server(NAME)
    lm = dspy.LM(f"openai/{info.alias}", api_base=info.base_url, api_key="none", cache=False)
    with track_usage() as usage:
        lm("Say hi.")
    assert usage.calls[0].served_by == f"{info.alias} b7-abc1234"


def test_model_label_names_the_local_server_s_route_as_the_user_wrote_it():
    from dspy_for.lm import model_label

    assert model_label(f"hosted_vllm/{server.alias_for('qwen2.5-coder-1.5b')}") == "local/qwen2.5-coder-1.5b"
    old_prompt_cache = f"{server.alias_for(NAME)}-pc64"  # records of the separate prompt-caching server of old
    assert model_label(f"hosted_vllm/{old_prompt_cache}") == f"local/{NAME} (prompt cache)"
    assert model_label("hosted_vllm/my-vllm-model") == "hosted_vllm/my-vllm-model"  # a user's own vLLM endpoint
    assert model_label("openai/gpt-4.1-mini") == "openai/gpt-4.1-mini"
