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
