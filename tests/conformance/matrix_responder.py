"""The test server's answers for the matrix: every role's signature and the optimizers' own prompts."""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable
from typing import Any

from matrix_cells import MARKER, TUNED_INSTRUCTION, UNTUNED_INSTRUCTION, answer_of
from matrix_log import Key, fields_of, system_text, typed_fields

_ITEM = re.compile(r"and (\d+) more apples")


class MatrixResponder:
    """Answers every role's signature the way a cooperative model would, by the output fields asked for:
    numbers get item k's answer (36 + k, read from the question), booleans ``False`` (feedback and verifier find
    fault, so refinement runs), question lists one new question without values, ``advice`` one hint per module
    named, instructions :data:`TUNED_INSTRUCTION`, a ``dspy.ReAct`` agent its ``solve`` tool with the question, then
    ``finish``; a JSONAdapter's request gets JSON, and a request that is no DSPy adapter's a fenced instruction.

    ``tuned``: a numeric answer is right only when its own instructions carry :data:`MARKER`. ``disagreeing``: the
    fields of a sampler whose samples (its calls at one of ``sample_temperatures``, read from the request the server
    is answering) answer right and wrong in turn for each prompt, so two samples disagree (a cascade's debate then
    runs; runs that sample the same prompt at once would interleave, so the matrix runs none).
    """

    def __init__(self) -> None:
        self.tuned = False
        self.disagreeing: Key | None = None
        self.sample_temperatures: frozenset[float] = frozenset()
        self.request: Callable[[], dict[str, Any] | None] = lambda: None
        self._asked = itertools.count(1)
        self._sampled: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        key = fields_of(messages)
        if key is None:
            return f"```\n{TUNED_INSTRUCTION}\n```"
        found = _ITEM.search(_last_user(messages))  # the item asked (demos come before it)
        right = answer_of(int(found.group(1))) if found else 36.0
        if self.tuned and MARKER not in system_text(messages):
            right -= 1
        if key == self.disagreeing and (self.request() or {}).get("temperature") in self.sample_temperatures:
            right += self._sample_number(messages) % 2  # samples 0, 2, ... right; 1, 3, ... wrong
        _, outputs = typed_fields(messages) or ([], [])
        out = {name: self._value(name, type_.lower(), right, messages) for name, type_ in outputs}
        if "Outputs will be a JSON object" in system_text(messages):  # a JSONAdapter's request (GEPA's reflection)
            return json.dumps(out)
        return {
            k: v if isinstance(v, str) else json.dumps(v) if isinstance(v, list | dict) else str(v)
            for k, v in out.items()
        }

    def _sample_number(self, messages: list[dict[str, Any]]) -> int:
        prompt = json.dumps(messages, sort_keys=True)
        with self._lock:
            n = self._sampled[prompt] = self._sampled.get(prompt, -1) + 1
            return n

    def _value(self, name: str, type_: str, right: float, messages: list[dict[str, Any]]) -> Any:
        done = "observation_0" in _last_user(messages)  # a dspy.ReAct agent: its tool once, then finish
        if name == "next_tool_name":
            return "finish" if done else "solve"
        if name == "next_tool_args":
            return {} if done else {"question": _question(messages)}
        if name == "reasoning":
            return f"3 * 12 = 36 apples in the boxes, then add the rest: {right:g} in all."
        if type_ in ("float", "int"):
            return right
        if type_ == "bool":
            return False
        if type_.startswith("list"):
            return [f"How did you get your total from the boxes (question {next(self._asked)})?"]
        if type_.startswith("dict"):
            return {n: f"hint for {n}: check each multiplication." for n in _module_names(messages)}
        if "instruction" in name:
            return TUNED_INSTRUCTION
        if "prompt" in name:  # ProRefine's optimizer keeps a tuned prompt tuned, and tunes no other
            return TUNED_INSTRUCTION if MARKER in _last_user(messages) else UNTUNED_INSTRUCTION
        if name == "answer":  # a Host or Defender whose answer is written out, the number in the text
            return f"He has {right:g} apples."
        return "Check the multiplication of the boxes once more."


def _last_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")


def _question(messages: list[dict[str, Any]]) -> str:
    found = re.search(r"\[\[ ## question ## \]\]\s*(.*?)\s*(?:\[\[ ##|$)", _last_user(messages), re.DOTALL)
    return found.group(1).strip() if found else ""


def _module_names(messages: list[dict[str, Any]]) -> list[str]:
    """The ``module_names`` input of ``dspy.Refine``'s / SIMBA's feedback request (a JSON list)."""
    for m in messages:
        found = re.search(r"\[\[ ## module_names ## \]\]\s*(\[[^\]]*\])", str(m.get("content") or ""))
        if found:
            try:
                return [str(n) for n in json.loads(found.group(1))]
            except ValueError:
                return []
    return []
