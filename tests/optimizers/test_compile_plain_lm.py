"""Compiling multi-role students through *plain* ``dspy.LM`` clients of the local test server, one model per role: what
the server's request log says each role's calls named — during the compile and after it, and after a resumed run
reloads the cached program — and that a resumed compile makes no request and counts no new spend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from compile_helpers import MARKER, UNTUNED, example, metric, respond, role_of, student

from dspy_for.datasets import load_dataset
from dspy_for.experiments.core import prepare_run
from dspy_for.experiments.methods import get_method
from dspy_for.experiments.spec.model import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.optimizers import compile_program
from dspy_for.testing import system_text, user_text
from dspy_for.testing.server import OpenAICompatibleServer

TRAIN = [example(k) for k in range(1, 5)]
VAL = [example(k) for k in range(5, 7)]


def tuned(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
    """Answers right only under a prompt carrying MARKER, which only a compiler's prompts propose."""
    proposal = f"{UNTUNED} {MARKER}" if role_of(messages) == "compiler" else UNTUNED
    return respond(messages, max_tokens, right=MARKER in system_text(messages), proposal=proposal)


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(respond) as srv:
        yield srv


def plain(server: OpenAICompatibleServer, role: str) -> dspy.LM:
    return dspy.LM(f"openai/m-{role}", api_base=server.base_url, api_key="sk-test", cache=False, num_retries=0)


def routed(server: OpenAICompatibleServer, start: int, answering: str) -> set[str]:
    """The roles of the requests from ``start``; each must have named that role's model (``answering``: the role of a
    request for the task's answer)."""
    seen = set()
    for request in server.requests[start:]:
        r = role_of(request["messages"])
        r = answering if r == "answer" else r
        assert request["model"] == f"m-{r}", (r, request["model"])
        seen.add(r)
    return seen


@pytest.mark.parametrize(
    ("name", "kind", "options"),
    [
        ("for", "bootstrap", {"max_bootstrapped_demos": 1}),
        ("for", "textgrad", {"epochs": 1, "steps_per_epoch": 1, "batch_size": 2}),
        ("for", "gepa", {"max_metric_calls": 24}),
        ("for", "mipro", {"num_candidates": 2, "num_trials": 2}),
        ("prorefine", "textgrad", {"epochs": 1, "steps_per_epoch": 1, "batch_size": 2}),
        ("cascade", "bootstrap", {"max_bootstrapped_demos": 1}),
        ("defender_sc", "mipro", {"num_candidates": 2, "num_trials": 2}),
    ],
)
def test_every_role_names_its_own_model_during_and_after_the_compile(server, name, kind, options):
    if kind != "bootstrap":
        server.responder = tuned  # a compiler's proposal makes the difference: GEPA reflects, TextGrad keeps it
    s, _ = student(name, lambda r: plain(server, r))
    answering = get_method(name).roles[0]  # the role that answers: `defender` for FOR and the cascade, else `task`
    result = compile_program(
        kind, s, trainset=TRAIN, valset=VAL, metric=metric, optimizer_lm=plain(server, "compiler"), **options
    )
    during = routed(server, 0, answering)
    assert during >= {answering} and ("compiler" in during) == (kind != "bootstrap")
    assert sum(result.tokens_by_lm.values()) == sum(
        r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in server.responses
    )
    assert set(result.tokens_by_lm) == {f"openai/m-{r}" for r in during}
    start = len(server.requests)
    result.program(question=example(9).question)
    after = routed(server, start, answering)
    assert answering in after and "compiler" not in after
    if name == "for":
        assert after == {"defender", "debater", "host"}


def test_a_resumed_run_reloads_the_program_routes_it_and_spends_nothing(server, tmp_path):
    gold = {ex.question: ex.answer for ex in load_dataset("gsm8k", "sample")}

    def right(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        out = respond(messages, max_tokens)
        question = user_text(messages).split("[[ ## question ## ]]")[-1].split("[[ ##")[0].strip()
        if isinstance(out, dict) and "answer" in out and question in gold:
            out["answer"] = str(gold[question])
        return out

    server.responder = right
    lms = {r: plain(server, r) for r in ("defender", "debater", "host")}
    data = DatasetConfig(name="gsm8k", split="sample", first=2)
    table = {
        "kind": "bootstrap",
        "trainset": "sample",
        "valset": "sample",
        "train_limit": 6,
        "max_bootstrapped_demos": 1,
    }
    method = MethodConfig(name="for", label="for_bootstrap", options={"rounds": 1}, role_lms=lms, compile=table)
    spec = ExperimentSpec(lm=plain(server, "configured"), datasets=[data], methods=[method], cache=False)
    first = prepare_run(spec, data, method, compile_dir=tmp_path)
    assert first.compile_cost is not None and not first.compile_cost.reused
    assert first.compile_cost.tokens == sum(
        r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in server.responses
    )
    assert routed(server, 0, "defender") <= {"defender", "debater", "host"}
    served = len(server.requests)
    again = prepare_run(spec, data, method, compile_dir=tmp_path)
    assert len(server.requests) == served  # the cached program: no request
    cost = again.compile_cost
    assert cost is not None and cost.reused and cost.spent_tokens == 0 and cost.tokens == first.compile_cost.tokens
    demos = [len(p.demos) for _, p in first.program.named_predictors()]
    assert demos == [len(p.demos) for _, p in again.program.named_predictors()] and sum(demos) > 0
    again.program(question=example(9).question)
    assert routed(server, served, "defender") == {"defender", "debater", "host"}
