"""Every registered method through a *plain* ``dspy.LM`` (not one of dspy-for's LMs) on a local fake server.

What a user gets with ``dspy.LM(...)`` must match what dspy-for's own LMs give: answers parse, per-role
usage is counted (sync, async, in ``dspy.Evaluate`` threads and inside ``dspy.BestOfN``), ProRefine
stops at end-of-sequence, FOR's ``token_budget`` stops a round, LM failures raise, and a warm cache
re-run reports the tokens of the cold run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
import pytest
from conftest import CANARY_KEY, plain_lm, signature_responder
from server import FaultServer

from dspy_for.experiments.methods import build_method, list_methods
from dspy_for.lm.factory import LM, configure_cache
from dspy_for.lm.usage import Usage, track_usage
from dspy_for.testing import ScriptedLM

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"

#: small options so every method runs in a few calls
FAST: dict[str, dict[str, Any]] = {
    "for": {"rounds": 1},
    "prorefine": {"k": 10, "n": 2},
    "refine": {"N": 2},
    "self_consistency": {"k": 2},
}
#: the roles a method's calls are attributed to (methods without role wrappers use the default role)
EXPECTED_ROLES: dict[str, set[str]] = {
    "for": {"defender", "debater", "host"},
    "prorefine": {"task", "feedback", "optimizer"},
}
METHODS = [m.name for m in list_methods()]


def build(name: str, lm: Any, **options: Any) -> dspy.Module:
    return build_method(name, SIG, lm=lm, **{**FAST.get(name, {}), **options})


def served(server: FaultServer) -> tuple[int, int, int]:
    """(answered requests, prompt tokens, completion tokens) the server reported."""
    return (
        len(server.responses),
        sum(r["usage"]["prompt_tokens"] for r in server.responses),
        sum(r["usage"]["completion_tokens"] for r in server.responses),
    )


def assert_usage(name: str, usage: Usage, server: FaultServer) -> None:
    assert usage.total.calls > 0 and usage.total.prompt_tokens > 0 and usage.total.completion_tokens > 0
    for role_name, counters in usage.roles.items():
        assert counters.calls > 0 and counters.tokens > 0, (name, role_name, counters)
    assert EXPECTED_ROLES.get(name, set()) <= set(usage.roles), (name, sorted(usage.roles))
    # exact: every answered request counted once, with the tokens the server reported
    calls, prompt, completion = served(server)
    assert (usage.total.calls, usage.total.prompt_tokens, usage.total.completion_tokens) == (calls, prompt, completion)
    assert all(c.ok and not c.cache_hit and c.finish_reason in ("stop", "length") for c in usage.calls)


def test_every_registered_method_is_covered():
    assert {"cot", "single", "for", "prorefine", "refine", "self_consistency"} <= set(METHODS)


@pytest.mark.parametrize("name", METHODS)
def test_forward(name, fault_server):
    program = build(name, plain_lm(fault_server))
    with track_usage() as usage:
        pred = program(question=Q)
    assert pred.answer == 36.0
    assert_usage(name, usage, fault_server)


@pytest.mark.parametrize("name", METHODS)
def test_async(name, fault_server):
    program = build(name, plain_lm(fault_server))
    if not callable(getattr(type(program), "aforward", None)) and type(program).__module__.startswith("dspy."):
        pytest.skip(f"DSPy's {type(program).__name__} (method `{name}`) has no aforward: acall cannot work")

    async def run() -> tuple[Any, Usage]:
        with track_usage() as usage:
            pred = await program.acall(question=Q)
        return pred, usage

    pred, usage = asyncio.run(run())
    assert pred.answer == 36.0
    assert_usage(name, usage, fault_server)


@pytest.mark.parametrize("name", METHODS)
def test_evaluate_with_threads_sharing_one_lm(name, fault_server):
    program = build(name, plain_lm(fault_server))
    devset = [dspy.Example(question=f"{Q} (case {i})", answer=36.0).with_inputs("question") for i in range(4)]

    def metric(example: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> float:
        return float(pred.answer == example.answer)

    evaluate = dspy.Evaluate(devset=devset, metric=metric, num_threads=2, display_progress=False, max_errors=0)
    with track_usage() as usage:
        result = evaluate(program)
    assert result.score == 100.0
    assert_usage(name, usage, fault_server)


@pytest.mark.parametrize("name", METHODS)
def test_inside_best_of_n(name, fault_server):
    program = build(name, plain_lm(fault_server))
    best = dspy.BestOfN(program, N=2, reward_fn=lambda args, pred: float(pred.answer == 36.0), threshold=1.0)
    with track_usage() as usage:
        pred = best(question=Q)
    assert pred.answer == 36.0
    assert_usage(name, usage, fault_server)


# ------------------------------------------------------------------------------------ the defects


def test_prorefine_stops_at_eos_with_a_plain_lm_as_with_a_scripted_lm(fault_server):
    """Task answers of ~20 words, k=10, n=5: step 1 is cut ('length'), step 2 ends by itself ('stop')."""
    responder = signature_responder(reasoning_words=12)
    fault_server.responder = responder
    scripted = ScriptedLM(responder)
    runs = {}
    for label, lm in (("scripted", scripted), ("plain", plain_lm(fault_server))):
        with track_usage() as usage:
            pred = build_method("prorefine", SIG, lm=lm, k=10, n=5)(question=Q)
        runs[label] = (pred, usage)
    (ps, us), (pp, up) = runs["scripted"], runs["plain"]
    assert ps.stats["steps_used"] < 5 and ps.trajectory[-1]["eos"]  # the scripted reference stops early
    assert pp.stats["steps_used"] == ps.stats["steps_used"]
    assert [s["finish_reason"] for s in pp.trajectory] == [s["finish_reason"] for s in ps.trajectory]
    assert [s["eos"] for s in pp.trajectory] == [s["eos"] for s in ps.trajectory]
    # the EOS output is reused: no extra full-length task call with the plain LM either
    assert up["task"].calls == us["task"].calls == ps.stats["steps_used"]
    assert pp.answer == ps.answer == 36.0


def test_for_token_budget_stops_rounds_with_a_plain_lm(fault_server):
    lm = plain_lm(fault_server)
    with track_usage() as usage:
        pred = build_method("for", SIG, lm=lm, rounds=3, host=False, token_budget=1)(question=Q)
    assert pred.rounds_used == 0 and pred.answer == 36.0
    assert set(usage.roles) == {"defender"}  # only the initial answer: the budget was spent before round 1
    unlimited = build_method("for", SIG, lm=lm, rounds=3, host=False)(question=Q)
    assert unlimited.rounds_used == 3


@pytest.mark.parametrize("name", METHODS)
def test_an_lm_failure_raises_out_of_the_program(name, fault_server):
    fault_server.set_fault("500")
    program = build(name, plain_lm(fault_server, num_retries=0))
    if name == "refine":  # dspy.Refine prints and swallows each attempt's error and returns None when all fail:
        with track_usage() as usage:  # the failed calls stay visible, so the run path makes the item an error
            assert program(question=Q) is None
        assert usage.calls and all(not c.ok and c.error for c in usage.calls)
        return
    with track_usage() as usage, pytest.raises(Exception) as info:
        program(question=Q)
    assert "injected internal server error" in str(info.value)
    assert fault_server.requests and usage.total.calls >= 1
    assert all(not c.ok and c.error == type(info.value).__name__ for c in usage.calls)
    assert usage.total.tokens == 0


def cached_lm(kind: str, server: FaultServer, engine: str) -> dspy.BaseLM:
    if kind == "plain":
        return plain_lm(server, cache=True, engine=engine)
    # dspy-for's own LM class (make_lm refuses api_key, so built directly as make_lm would build it)
    return LM(
        "openai/test-model",
        cache_namespace=server.base_url,
        api_base=server.base_url,
        api_key=CANARY_KEY,
        cache=True,
        num_retries=0,
        timeout=5,
        engine=engine,
        temperature=0.0,
    )


@pytest.mark.parametrize(("kind", "engine"), [("plain", "auto"), ("plain", "litellm"), ("project", "litellm")])
@pytest.mark.parametrize("name", METHODS)
def test_a_warm_cache_rerun_reports_the_cold_runs_served_tokens(name, kind, engine, fault_server, tmp_path):
    """DSPy clears ``usage`` on a cache hit; the hit must still report what the original call cost."""
    configure_cache(tmp_path / "cache")
    lm = cached_lm(kind, fault_server, engine)
    with track_usage() as cold:
        cold_pred = build(name, lm)(question=Q)
    requests = len(fault_server.requests)
    assert cold.total.calls == requests > 0 and cold.total.served_tokens > 0
    dspy.cache.reset_memory_cache()  # the warm run reads the disk cache, as a re-run in a new process does
    with track_usage() as warm:
        warm_pred = build(name, lm)(question=Q)
    assert len(fault_server.requests) == requests  # every call served from the cache
    assert warm_pred.answer == cold_pred.answer == 36.0
    assert set(warm.roles) == set(cold.roles)
    for role_name in cold.roles:
        c, w = cold[role_name], warm[role_name]
        assert c.cached_calls == 0 and c.served_tokens > 0
        assert w.cached_calls == w.calls == c.calls and w.tokens == 0, (role_name, w)
        assert (w.cached_prompt_tokens, w.cached_completion_tokens) == (c.prompt_tokens, c.completion_tokens)
        assert w.served_tokens == c.served_tokens
    assert [c.finish_reason for c in warm.calls] == [c.finish_reason for c in cold.calls]


def test_self_consistency_drops_an_unreadable_sample_with_a_plain_lm(fault_server):
    """An unreadable reply from a real endpoint casts no vote; its tokens are still counted."""
    replies = iter(["no fields here at all", "36", "15", "36"])

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        reply = next(replies)
        return {"reasoning": "3 * 12", "answer": reply} if reply.isdigit() else reply

    fault_server.responder = respond
    program = build("self_consistency", plain_lm(fault_server), k=4)
    with dspy.context(adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)), track_usage() as usage:
        pred = program(question=Q)
    assert pred.answer == 36.0
    assert pred.stats == {"samples": 4.0, "readable": 3.0, "agreement": pytest.approx(2 / 3)}
    assert usage.total.calls == len(fault_server.responses) == 4
