from __future__ import annotations

from types import SimpleNamespace

import dspy
import pytest

from dspy_for.errors import ConfigError, MissingDependencyError, require
from dspy_for.lm import LM, LocalLM, check_lm_options, check_lm_spec, describe_lm, make_lm, resolve_lm
from dspy_for.lm.factory import (
    DEFAULT_LOCAL_TIMEOUT,
    DEFAULT_NUM_RETRIES,
    DEFAULT_TIMEOUT,
    _NamespacedCache,
    configure_cache,
)
from dspy_for.lm.registry import list_models
from dspy_for.testing import ScriptedLM


def test_make_lm_defaults_and_passthrough(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    lm = make_lm("openai/gpt-4.1-mini", max_tokens=64)
    assert isinstance(lm, LM) and lm.kwargs["temperature"] == 0.0 and lm.kwargs["max_tokens"] == 64
    assert lm.cache is True and isinstance(dspy.cache, _NamespacedCache)
    scripted = ScriptedLM(lambda m, t: "x")
    assert make_lm(scripted) is scripted and resolve_lm(None) is None
    assert isinstance(resolve_lm("openai/gpt-4.1-mini"), LM)


@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        ("gpt-4", {}, "no provider prefix"),
        ("", {}, "litellm model string"),
        ("openai/gpt-4.1-mini", {"api_key": "sk-secret"}, "environment only"),
    ],
)
def test_bad_specs(spec, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_lm(spec, **kwargs)


def test_cache_keys_differ_per_endpoint(tmp_path):
    configure_cache(tmp_path / "c")
    request = {"model": "hosted_vllm/m", "messages": [{"role": "user", "content": "hi"}], "api_base": "http://a"}
    plain = dspy.cache.cache_key(request, ["api_base"])
    with dspy.context(dspy_for_cache_namespace="http://a/v1"):
        a = dspy.cache.cache_key(request, ["api_base"])
    with dspy.context(dspy_for_cache_namespace="http://b/v1"):
        b = dspy.cache.cache_key(request, ["api_base"])
    assert len({plain, a, b}) == 3


def test_describe_lm_has_no_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-123456")
    lm = make_lm("openai/gpt-4.1-mini", api_base="https://user:pw@example.com/v1")
    d = describe_lm(lm)
    assert d == {"model": "openai/gpt-4.1-mini", "temperature": 0.0, "api_host": "example.com"}


def test_missing_optional_dependency_names_the_install_command():
    with pytest.raises(MissingDependencyError, match=r"pip install 'dspy-for\[local\]'"):
        require("llama_cpp_not_installed_module", extra="local", package="llama-cpp-python[server]")


# ------------------------------------------------------------------------ options and spec checks


def test_make_lm_has_finite_timeout_and_retries_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    lm = make_lm("openai/gpt-4.1-mini")
    assert lm.kwargs["timeout"] == DEFAULT_TIMEOUT == 120 and lm.retry_policy.num_retries == DEFAULT_NUM_RETRIES == 2
    custom = make_lm("openai/m", timeout=7.5, num_retries=0, api_base="http://127.0.0.1:9/v1")
    assert custom.kwargs["timeout"] == 7.5 and custom.retry_policy.num_retries == 0 and custom.num_retries == 0
    assert custom.kwargs["api_base"] == "http://127.0.0.1:9/v1" and custom.cache_namespace == "http://127.0.0.1:9/v1"
    assert "timeout" not in make_lm("openai/m", timeout=None).kwargs  # None: litellm's own default


def test_local_lm_defaults(monkeypatch, tmp_path):
    from dspy_for.lm import server

    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    fake = SimpleNamespace(alias="m-abc", base_url="http://127.0.0.1:1/v1", pid=0, slots=4, build="llama.cpp b0-x")
    monkeypatch.setattr(server, "ensure_server", lambda *a, **k: fake)
    name = list_models()[0].name
    lm = make_lm(f"local/{name}")
    assert (
        isinstance(lm, LocalLM) and lm.retry_policy.num_retries == 1 and lm.kwargs["timeout"] == DEFAULT_LOCAL_TIMEOUT
    )


def test_check_lm_spec_starts_nothing(monkeypatch):
    from dspy_for.lm import server

    def no_server(*a, **k):
        raise AssertionError("check_lm_spec must not start a server")

    monkeypatch.setattr(server, "ensure_server", no_server)
    for good in ("openai/gpt-4.1-mini", "hosted_vllm/x", f"local/{list_models()[0].name}"):
        check_lm_spec(good)
    with pytest.raises(ConfigError) as info:
        check_lm_spec("local/no-such-model")
    msg = str(info.value)
    assert "`local/no-such-model`" in msg and "dspy-for models list" in msg
    assert all(f"local/{m.name}" in msg for m in list_models())
    with pytest.raises(ConfigError, match=r"no provider prefix.*'openai/gpt-4'"):
        check_lm_spec("gpt-4")
    for empty in ("", "   "):
        with pytest.raises(ConfigError, match="litellm model string"):
            check_lm_spec(empty)
    with pytest.raises(ConfigError, match="no local model"):
        make_lm("local/no-such-model")
    with pytest.raises(ConfigError, match="`api_base` cannot be set"):
        make_lm(f"local/{list_models()[0].name}", api_base="http://127.0.0.1:1/v1")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "`timeout` must be a positive number"),
        ({"timeout": "fast"}, "`timeout`"),
        ({"num_retries": -1}, "`num_retries` must be an integer >= 0"),
        ({"num_retries": 1.5}, "`num_retries`"),
        ({"api_base": "127.0.0.1:8000"}, "`api_base` must be an http"),
        ({"api_base": "ftp://host/v1"}, "`api_base`"),
        ({"temperature": -0.1}, "`temperature` must be a number >= 0"),
        ({"max_tokens": 0}, "`max_tokens` must be a positive integer"),
        ({"max_tokens": True}, "`max_tokens`"),
        ({"api_key": "sk-x"}, "environment only: set OPENAI_API_KEY"),
        ({"auth_token": "t"}, "`auth_token`"),
        ({"client_secret": "s"}, "environment only"),
        ({"db_password": "p"}, "environment only"),
        ({"x-api-key": "k"}, "environment only"),
    ],
)
def test_check_lm_options_rejects(options, message):
    with pytest.raises(ConfigError, match=message):
        check_lm_options(options)
    if "api_key" not in options:  # make_lm refuses api_key with its own message
        with pytest.raises(ConfigError):
            make_lm("openai/m", **options)


def test_check_lm_options_accepts():
    check_lm_options({})
    check_lm_options(
        {
            "timeout": None,
            "num_retries": 0,
            "api_base": "https://example.com/v1",
            "temperature": 0,
            "max_tokens": 64,
            "max_completion_tokens": 32,
            "top_p": 0.9,
            "cache": False,
            "n_ctx": 4096,
            "stop": ["\n"],
        }
    )
    check_lm_options({"timeout": 2.5})


def test_the_cache_key_ignores_how_a_request_travels():
    """A new default timeout or retry count must not turn every cached answer into a miss."""
    from dspy_for.lm.factory import _NamespacedCache

    cache = _NamespacedCache(
        enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="", memory_max_entries=10
    )
    base = {"model": "openai/x", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}
    assert cache.cache_key({**base, "timeout": 120}) == cache.cache_key({**base, "timeout": 600, "num_retries": 3})
    assert cache.cache_key({**base, "timeout": 120}) == cache.cache_key(base)
    assert cache.cache_key({**base, "temperature": 0.7}) != cache.cache_key(base)
