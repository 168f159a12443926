"""Masking of secrets in everything dspy-for writes: results files, logs, MLflow params, tags, artifacts
and traces. API keys come from the environment only; an endpoint may still echo one in an error body, so
every text is passed through :func:`redact` before it is written anywhere.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

from dspy_for.jsonwalk import leaves, walk

__all__ = ["hide_password", "is_secret_key", "may_need_redaction", "needs_redaction", "redact", "redact_obj"]

_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization|bearer|credential)", re.I)
#: each secret-looking value: the literal it begins with, then the rest of its pattern (an API key, a token, an AWS key
#: id). The literals are what :func:`may_need_redaction` looks for: no match is possible without one.
_SECRET_SHAPES = (
    ("sk-", r"[A-Za-z0-9_\-]{8,}"),
    *((f"{prefix}_", r"[A-Za-z0-9]{8,}") for prefix in ("hf", "ghp", "gho", "xoxb", "xoxa", "xoxp")),
    ("AKIA", r"[0-9A-Z]{12,}"),
)
_MARKERS = tuple(literal for literal, _ in _SECRET_SHAPES)
_SECRET_VALUE = re.compile(r"\b(" + "|".join(re.escape(literal) + rest for literal, rest in _SECRET_SHAPES) + ")")
_BEARER_WORD = "bearer"  # matched in any case
_BEARER = re.compile(rf"(?i)({_BEARER_WORD}\s+)[^\s'\"]{{6,}}")


@functools.lru_cache(maxsize=4096)  # a handful of names, asked for every record written
def is_secret_key(name: str) -> bool:
    """The one rule for names that hold a secret — LM options, config keys, MLflow params, environment variables:
    a name with ``api_key`` (``apikey``, ``api-key``), ``token``, ``secret``, ``password``, ``authorization``,
    ``bearer`` or ``credential`` in it, any case; but not a count of tokens (``max_tokens``, any ``*tokens``)."""
    return bool(_SECRET_KEY.search(name)) and not name.lower().endswith("tokens")


def _secret_env_values() -> list[str]:
    """Read anew on each call (a key set later is masked too); only a secret variable's value is decoded."""
    return [v for k in os.environ if is_secret_key(k) and len(v := os.environ.get(k) or "") >= 6]


def redact(text: str) -> str:
    """Mask secret-looking substrings (``sk-…`` keys, bearer tokens) and the values of secret environment
    variables (``*_API_KEY``, ``*_TOKEN``, …) in ``text``."""
    return _redact(text, _secret_env_values())


def redact_obj(value: Any) -> Any:
    """:func:`redact` applied to every string inside a JSON-like value (dicts, lists, tuples)."""
    secrets = _secret_env_values()  # read once per value, not once per string in it
    return walk(value, lambda v: _redact(v, secrets) if isinstance(v, str) else v)


def needs_redaction(value: Any) -> bool:
    """Whether :func:`redact_obj` would change ``value``: one pass over all its strings at once, cheaper than
    masking each (most records hold no secret)."""
    texts = "\n".join(v for v in leaves(value) if isinstance(v, str))
    return _redact(texts, _secret_env_values()) != texts


def may_need_redaction(text: str) -> bool:
    """False only when no JSON-like value whose :func:`json.dumps` (``ensure_ascii=False``) is ``text`` holds a
    string :func:`redact` would change: every pattern needs a literal (``sk-``, ``hf_``, ..., ``bearer`` in any case,
    a secret variable's value) that JSON's escaping, one character at a time, keeps. True says "look closer"."""
    if _has_pattern_literal(text):
        return True
    return any(v in text or json.dumps(v, ensure_ascii=False)[1:-1] in text for v in _secret_env_values())


def _redact(text: str, secrets: list[str]) -> str:
    for value in secrets:
        text = text.replace(value, "***")
    if _BEARER_WORD in text.lower():  # neither pattern can match without its literal
        text = _BEARER.sub(r"\1***", text)
    if any(literal in text for literal in _MARKERS):
        text = _SECRET_VALUE.sub("***", text)
    return text


def _has_pattern_literal(text: str) -> bool:
    return any(literal in text for literal in _MARKERS) or _BEARER_WORD in text.lower()


def hide_password(url: str | None) -> str | None:
    """``postgresql://user:secret@host/db`` → ``postgresql://user:***@host/db`` (URLs go to params and errors)."""
    return None if url is None else re.sub(r"(://[^/@:]*:)[^/]*@", r"\1***@", url)
