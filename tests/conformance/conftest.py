"""Conformance fixtures: a fault-injecting OpenAI-compatible server and plain ``dspy.LM`` clients of it.

* ``fault_server`` (function-scoped): a started :class:`server.FaultServer` answering every DSPy signature
  with :func:`signature_responder` (set ``fault_server.responder`` to change it); stopped after the test.
* :func:`plain_lm`: a plain ``dspy.LM`` (not one of dspy-for's LMs) pointed at the server, with the
  canary key :data:`CANARY_KEY` — tests assert it never reaches a file.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import dspy
import pytest
from server import FaultServer

from dspy_for.testing import system_text

__all__ = ["CANARY_KEY", "plain_lm", "signature_responder"]

#: the API key every plain_lm sends; it must never reach a file, log or tracking store
CANARY_KEY = "sk-canary-0123456789abcdef"

_FIELD_LINE = re.compile(r"^\s*\d+\.\s+`(?P<name>[^`]+)`\s+\((?P<type>[^)]*)\)", re.MULTILINE)


def plain_lm(server: FaultServer, **kw: Any) -> dspy.LM:
    """``dspy.LM("openai/test-model", api_base=server.base_url, api_key=CANARY_KEY, cache=False, num_retries=0,
    timeout=5, **kw)`` — ``kw`` may override any of those defaults."""
    options: dict[str, Any] = {"cache": False, "num_retries": 0, "timeout": 5, **kw}
    return dspy.LM("openai/test-model", api_base=server.base_url, api_key=CANARY_KEY, **options)


def output_fields(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(name, type) of the output fields a ChatAdapter system message asks for."""
    sys = system_text(messages)
    start = sys.find("Your output fields are:")
    if start < 0:
        return []
    end = sys.find("All interactions will be structured", start)
    return [(m["name"], m["type"].strip()) for m in _FIELD_LINE.finditer(sys[start : end if end > 0 else None])]


def signature_responder(
    answer: str = "36", *, reasoning_words: int = 0, correct: bool = False, log: list[str] | None = None
) -> Callable[[list[dict[str, Any]], int | None], dict[str, Any] | str]:
    """Answer any DSPy signature: numbers get ``answer``, bools ``correct``, lists one question, strings text.

    ``reasoning_words`` pads the ``reasoning`` field (so a small ``max_tokens`` truncates the answer).
    ``log`` collects the first output field's name of each call (which role/signature was asked).
    List fields get one new question per call (a repeated question would end a FOR debate early).
    """
    asked = itertools.count(1)

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        fields = output_fields(messages)
        if log is not None:
            log.append(fields[0][0] if fields else "")
        if not fields:
            return f"The answer is {answer}."
        out: dict[str, Any] = {}
        for name, type_ in fields:
            t = type_.lower()
            if name == "reasoning":
                out[name] = " ".join(["3 * 12 = 36.", *(["ok"] * reasoning_words)])
            elif t in ("float", "int"):
                out[name] = answer
            elif t == "bool":
                out[name] = str(correct)
            elif t.startswith("list"):
                out[name] = f'["How did you get 36 from 3 boxes of 12 (question {next(asked)})?"]'
            elif "prompt" in name:
                out[name] = "Solve the problem step by step and check each multiplication."
            else:
                out[name] = f"Check the multiplication 3 * 12 = {answer}."
        return out

    return respond


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """A started fault-injecting server on 127.0.0.1; stopped after the test."""
    server = FaultServer(signature_responder()).start()
    try:
        yield server
    finally:
        server.stop()
