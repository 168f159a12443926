from __future__ import annotations

import dspy
import pytest

from dspy_for.errors import ConfigError, MissingDependencyError, require
from dspy_for.lm import LM, describe_lm, make_lm, resolve_lm
from dspy_for.lm.factory import _NamespacedCache, configure_cache
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
    [("gpt-4", {}, "no provider prefix"), ("", {}, "litellm model string"),
     ("openai/gpt-4.1-mini", {"api_key": "sk-secret"}, "environment only")],
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


def test_missing_llama_cpp_is_a_clear_error(monkeypatch, tmp_path):
    import builtins

    from dspy_for.lm import server

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("llama_cpp"):
            raise ImportError("no llama_cpp")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr("importlib.import_module", lambda name: fake_import(name))
    with pytest.raises(MissingDependencyError, match="dspy-for\\[local\\]"):
        server.start_server("qwen2.5-coder-0.5b")
