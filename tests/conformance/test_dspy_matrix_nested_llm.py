"""The matrix's nested layout on the real local model: the user's composite program — a plain ``dspy.Module`` with a
``ChainOfThought`` step, then FOR-Prompting — compiled by ``dspy.BootstrapFewShot``, with the Debater on an LM of its
own and every other call on the configured LM. A logging relay (the test server, each request forwarded to the local
test model) shows which model every request named, while compiling and after: the routing is DSPy's, so one real
model answering both names is enough, and the test stays short on two cores."""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import dspy
import pytest
from matrix_log import typed_fields

from dspy_for.datasets import load_dataset
from dspy_for.lm.server import ensure_server
from dspy_for.modules import FORPrompting
from dspy_for.testing.server import OpenAICompatibleServer

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
NAMES = ("m-debater", "m-rest")  # the two LMs' model names, both served by the local test model


class Relay(OpenAICompatibleServer):
    """The test server, answering each request of a model in :data:`NAMES` with the local test model."""

    def __init__(self) -> None:
        super().__init__(self._forward)
        self.served: list[str] = []

    def _forward(self, messages: list[dict[str, Any]], max_tokens: int | None) -> str:
        request = self.current_request() or {}
        name = str(request.get("model", "")).removeprefix("openai/")
        assert name in NAMES, name
        info = ensure_server(MODEL)
        body = {"model": info.alias, "messages": messages, "max_tokens": max_tokens or 300, "temperature": 0.0}
        call = urllib.request.Request(
            f"{info.base_url.rstrip('/')}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(call, timeout=600) as response:
            answer = json.loads(response.read())
        self.served.append(name)
        return str(answer["choices"][0]["message"]["content"] or "")


class Pipeline(dspy.Module):
    def __init__(self, debater: Any) -> None:
        super().__init__()
        self.plan = dspy.ChainOfThought("question -> plan")
        self.solve = FORPrompting("question, plan -> answer: float", rounds=1, debater_lm=debater)

    def forward(self, question: str) -> dspy.Prediction:
        return self.solve(question=question, plan=self.plan(question=question).plan)


def _routes(requests: list[dict[str, Any]]) -> dict[str, set[str]]:
    """``debater`` / ``other`` → the models their requests named (a Debater request's output field is
    ``questions``; the Defender's revision has it as an input)."""
    out: dict[str, set[str]] = {}
    for r in requests:
        _, outputs = typed_fields(r.get("messages") or []) or ([], [])
        kind = "debater" if "questions" in {name for name, _ in outputs} else "other"
        out.setdefault(kind, set()).add(str(r.get("model")).removeprefix("openai/"))
    return out


def test_a_users_program_compiled_on_local_models_keeps_the_debater_on_its_model():
    with Relay() as relay:
        lm = {
            m: dspy.LM(
                f"openai/{m}",
                api_base=relay.base_url,
                api_key="sk-relay",
                cache=False,
                max_tokens=200,  # a few short calls: the routing is the point
                num_retries=0,
                timeout=900,
            )
            for m in NAMES
        }
        dspy.configure(lm=lm["m-rest"])
        items = load_dataset("gsm8k", "sample")
        train, item = items[:1], items[1]

        def completed(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> bool:
            return isinstance(pred.answer, float)  # any debate that ends in a number is a demo: routing is the point

        compiled = dspy.BootstrapFewShot(completed, max_bootstrapped_demos=1, max_labeled_demos=0).compile(
            Pipeline(lm["m-debater"]), trainset=train
        )
        compiling = list(relay.requests)
        pred = compiled(question=item.question)
        running = list(relay.requests)[len(compiling) :]

    assert isinstance(pred.answer, float)
    for requests in (compiling, running):
        assert _routes(requests) == {"debater": {"m-debater"}, "other": {"m-rest"}}, _routes(requests)
    assert set(relay.served) == set(NAMES)
    assert compiled.solve.debater.role_lm is not None and compiled.solve.debater.role_lm.model == "openai/m-debater"
    assert {p.role_lm for p in (compiled.solve.defender, compiled.solve.revise, compiled.solve.host)} == {None}
