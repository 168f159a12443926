"""A local OpenAI-compatible server that answers every role of every module with roles, and reads back from its
request log which model each role's requests named (roles told apart by their signature's fields), plus a DSPy
callback that sees which LM object (rollout id, temperature) every LM call ran on."""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from dspy_for.testing import system_text
from dspy_for.testing.server import OpenAICompatibleServer

_FIELD_LINE = re.compile(r"^\s*\d+\.\s+`(?P<name>[^`]+)`\s+\((?P<type>[^)]*)\)", re.MULTILINE)
#: the advice every Refine retry gets, per predictor name (what reaches a role's hint)
HINTS = {
    name: f"HINT-FOR-{name.upper()}"
    for name in (
        *("task", "feedback", "optimizer", "verifier", "defender", "revise", "debater", "host", "cot.predict"),
        *("samples.defender", "debate.defender", "debate.revise", "debate.debater", "debate.host"),
    )
}


def fields(messages: list[dict[str, Any]], kind: str) -> dict[str, str]:
    """The input or output fields (name → type) a ChatAdapter system message lists."""
    text = system_text(messages)
    start = text.find(f"Your {kind} fields are:")
    if start < 0:
        return {}
    end = text.find("Your output fields are:" if kind == "input" else "All interactions", start)
    return {m["name"]: m["type"].strip() for m in _FIELD_LINE.finditer(text[start : end if end > 0 else None])}


def role_of(messages: list[dict[str, Any]]) -> str:
    """Which role a request is: ``debater``, ``revise``, ``host``, ``optimizer``, ``feedback``, ``verifier``,
    ``advice`` (dspy.Refine's own call) or ``answer`` (FOR's Defender, the cascade's samples, ProRefine's task)."""
    outputs, inputs = fields(messages, "output"), fields(messages, "input")
    for name, role in (("questions", "debater"), ("responses", "revise"), ("improved_prompt", "optimizer")):
        if name in outputs:
            return role
    if "dialogue" in inputs:
        return "host"
    for name, role in (("feedback", "feedback"), ("correct", "verifier"), ("advice", "advice")):
        if name in outputs:
            return role
    return "answer"


class RoleServer(OpenAICompatibleServer):
    """Answers any role's signature. ``answers``: the answers the ``answer`` role gives in turn (two different ones
    make a cascade debate); ``task_words``: words of padding in its reasoning (a capped step below it is cut);
    ``verifier_ok``: what ProRefine's verifier says."""

    def __init__(self, *, answers: tuple[str, ...] = ("36",), task_words: int = 0, verifier_ok: bool = False) -> None:
        super().__init__(self._respond)
        self._answers = itertools.cycle(answers)
        self._asked = itertools.count(1)
        self.task_words, self.verifier_ok = task_words, verifier_ok

    def lm(self, name: str, **kwargs: Any) -> dspy.LM:
        """A plain ``dspy.LM`` whose requests name model ``name``."""
        options: dict[str, Any] = {"cache": False, "num_retries": 0, "timeout": 10, **kwargs}
        return dspy.LM(f"openai/{name}", api_base=self.base_url, api_key="sk-test-0123456789", **options)

    def calls(self) -> list[dict[str, Any]]:
        """Every request: its role, model, temperature, max_tokens and messages."""
        return [
            {
                "role": role_of(r["messages"]),
                "model": r["model"],
                "temperature": r.get("temperature"),
                "max_tokens": r.get("max_tokens") or r.get("max_completion_tokens"),
                "messages": r["messages"],
            }
            for r in self.requests
        ]

    def models_by_role(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = defaultdict(set)
        for c in self.calls():
            out[c["role"]].add(c["model"])
        return dict(out)

    def _respond(self, messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        answer = next(self._answers) if role_of(messages) == "answer" else "36"
        for name, type_ in fields(messages, "output").items():
            t = type_.lower()
            if name == "reasoning":
                out[name] = " ".join(["3 * 12 = 36.", *(["ok"] * self.task_words)])
            elif name == "advice":
                out[name] = json.dumps(HINTS)
            elif t in ("float", "int"):
                out[name] = answer
            elif t == "bool":
                out[name] = str(self.verifier_ok if name == "correct" else False)
            elif t.startswith("list"):
                out[name] = json.dumps([f"How did you get 36 from 3 boxes of 12 (question {next(self._asked)})?"])
            elif "prompt" in name:
                out[name] = "Solve the problem step by step and check each multiplication."
            else:
                out[name] = "Check the multiplication 3 * 12 = 36."
        return out


class LMCalls(BaseCallback):
    """Records, for every LM call, the LM object's model, rollout id and temperature."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, Any]] = []

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        kwargs = getattr(instance, "kwargs", {}) or {}
        self.seen.append((str(instance.model), kwargs.get("rollout_id"), kwargs.get("temperature")))

    def variations(self) -> dict[str, set[tuple[Any, Any]]]:
        """model → the (rollout id, temperature) its calls ran with."""
        out: dict[str, set[tuple[Any, Any]]] = defaultdict(set)
        for model, rollout, temperature in self.seen:
            out[model.split("/", 1)[-1]].add((rollout, temperature))
        return dict(out)
