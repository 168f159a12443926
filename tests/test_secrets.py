"""One secret-key rule (:func:`dspy_for.secrets.is_secret_key`) for LM options, config keys, MLflow params and the
environment."""

from __future__ import annotations

import pytest

from dspy_for.errors import ConfigError
from dspy_for.experiments.spec.config import parse_lm_options
from dspy_for.lm import check_lm_options
from dspy_for.secrets import is_secret_key

SECRET = ["api_key", "API-KEY", "apikey", "token", "HF_TOKEN", "access_token", "client_secret", "password"]
SECRET += ["authorization", "credential", "aws_credentials", "bearer"]
NOT_SECRET = ["max_tokens", "max_completion_tokens", "prompt_tokens", "tokens", "temperature", "api_base", "timeout"]


@pytest.mark.parametrize("name", SECRET)
def test_secret_names_are_refused_everywhere(name):
    assert is_secret_key(name)
    with pytest.raises(ConfigError):
        check_lm_options({name: "x"})
    with pytest.raises(ConfigError):
        parse_lm_options({name: "x"})


@pytest.mark.parametrize("name", NOT_SECRET)
def test_token_counts_and_plain_options_are_not_secrets(name):
    assert not is_secret_key(name)


def test_needs_redaction_finds_a_secret_anywhere_in_a_value(monkeypatch):
    from dspy_for.experiments.core import ItemResult
    from dspy_for.secrets import needs_redaction

    clean = {"a": ["the answer is 36", ("x", 1)], "b": None}
    assert not needs_redaction(clean)
    assert needs_redaction({"a": [{"error": "401: key sk-abcdefgh12345678 is invalid"}]})
    monkeypatch.setenv("MY_SERVICE_TOKEN", "plain-value-123")  # an environment secret set after start-up
    assert needs_redaction({"a": ("echoed plain-value-123",)})
    item = ItemResult(id="1", question="q", gold=1, prediction={"answer": "plain-value-123"}, score=0.0)
    assert "plain-value-123" not in item.to_json() and "***" in item.to_json()
    assert ItemResult(id="1", question="q", gold=1, prediction={"answer": "36"}, score=1.0).to_json().count("***") == 0
