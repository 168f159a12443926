"""The embedded server's serving identity, for real: known before the first call, it names the model, its file's
SHA-256 and the llama-cpp-python version, and the call it answers reports it."""

from __future__ import annotations

import importlib.metadata
import os

import pytest

from dspy_for.lm import make_lm, track_usage
from dspy_for.lm.registry import get_model
from dspy_for.lm.serving import stack_identity

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def test_the_local_servers_identity_names_the_model_file_and_llama_cpp_python(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPY_FOR_CACHE_DIR", str(tmp_path / "cache"))
    lm = make_lm(f"local/{MODEL}", cache=False, max_tokens=8)
    version = importlib.metadata.version("llama-cpp-python")
    expected = f"{MODEL} sha256:{get_model(MODEL).sha256[:12]} llama-cpp-python {version}"
    assert stack_identity(lm) == expected and lm.history == []  # known before any call
    with track_usage() as usage:
        lm("Say OK.")
    assert [(c.ok, c.cache_hit, c.served_by) for c in usage.calls] == [(True, False, expected)]
