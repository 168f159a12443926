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


SECRET_TEXTS = [
    "key sk-abcdefgh12345678 is invalid",
    "line\nsk-abcdefgh12345678",  # a word boundary that JSON writes as `\n`
    "Authorization: Bearer\tabcdef123",
    "BEARER xyzxyz123",
    "ghp_abcdefgh1234 and hf_abcdefgh1234",
    "AKIAABCDEFGHIJKLMN",
    'echoed se"cr\\et-value-1',  # an environment secret with characters JSON escapes
]


@pytest.mark.parametrize("text", SECRET_TEXTS)
def test_a_record_that_holds_a_secret_is_always_looked_at_closer(monkeypatch, text):
    """``may_need_redaction`` on a value's JSON is the fast path that lets a record be written without masking: it
    must never say no where masking would change a string of the value."""
    import json

    from dspy_for.secrets import may_need_redaction, needs_redaction, redact

    monkeypatch.setenv("MY_SERVICE_API_KEY", 'se"cr\\et-value-1')
    value = {"prediction": {"answer": "36", "reasoning": text}, "trajectory": [{"turn": [text]}]}
    assert redact(text) != text and needs_redaction(value)
    assert may_need_redaction(json.dumps(value, ensure_ascii=False))


def test_a_record_is_written_as_before_secret_or_not(monkeypatch):
    """The fast path writes exactly what copying and masking every string writes."""
    import json
    from dataclasses import asdict, dataclass

    from dspy_for.experiments.core import ItemResult
    from dspy_for.secrets import needs_redaction, redact_obj

    @dataclass
    class Parsed:
        value: int
        note: str

    monkeypatch.setenv("MY_SERVICE_API_KEY", 'se"cr\\et-value-1')
    records = [ItemResult(str(n), "Wie viele Äpfel?", gold, {"answer": answer}, 1.0) for n, (gold, answer) in
               enumerate([(3, "3"), ((1, 2), Parsed(1, "sk-abcdefgh12345678")), (None, object)])]  # fmt: skip
    records += [ItemResult("t", "q", 1, {"answer": "2", "reasoning": t}, 0.0, judge={"why": t}) for t in SECRET_TEXTS]
    for r in records:
        data = asdict(r)
        expected = json.dumps(redact_obj(data) if needs_redaction(data) else data, default=str, ensure_ascii=False)
        assert r.to_json() == expected
    assert "sk-abcdefgh12345678" not in "".join(r.to_json() for r in records)


CLEAN_TEXTS = [
    "the answer is 36",
    "sk-short",  # a literal without a secret after it: looked at, not masked
    "a bearer of bad news",
    "Ähm, 12 × 3 = 36\n",
    "",
]


@pytest.mark.parametrize("text", SECRET_TEXTS + CLEAN_TEXTS)
def test_needs_redaction_says_what_masking_would_do(monkeypatch, text):
    """Its quick answer (nothing masking looks for is there) and its full one agree with masking itself."""
    from dspy_for.secrets import needs_redaction, redact_obj

    monkeypatch.setenv("MY_SERVICE_API_KEY", 'se"cr\\et-value-1')
    value = {"item": {"prediction": {"answer": text}, "usage": {"calls": 1}}, "calls": [{"inputs": [text, None]}]}
    assert needs_redaction(value) == (redact_obj(value) != value)
