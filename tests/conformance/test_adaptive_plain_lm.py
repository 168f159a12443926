"""Adaptive self-consistency, ``defender_sc`` and the Cascade through a *plain* ``dspy.LM`` on the local fake server.

Like ``test_modules_plain_lm.py`` for the registered methods: answers parse, usage is counted exactly (sync,
async, in ``dspy.Evaluate`` threads, inside ``dspy.BestOfN``), LM failures raise, a warm cache re-run reports
the cold run's tokens; and what is particular to these modules: an adaptive run's samples are a prefix of
the fixed run's (the same cache entries), and the cascade reaches its debate with per-stage tokens that add
up to what the server served.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
import pytest
from server import FaultServer

from dspy_for.lm.factory import configure_cache
from dspy_for.lm.usage import Usage, track_usage
from dspy_for.modules import Cascade, SelfConsistency
from dspy_for.modules.for_signatures import DEFENDER_INSTRUCTIONS
from dspy_for.testing import system_text


def _conformance_conftest() -> Any:
    """This directory's conftest (``plain_lm``, ``signature_responder``), by path: ``from conftest import`` finds
    another directory's conftest when pytest is given several test directories at once."""
    name = "_dspy_for_conformance_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("conftest.py"))
        assert spec is not None and spec.loader is not None
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


plain_lm = _conformance_conftest().plain_lm
signature_responder = _conformance_conftest().signature_responder

SIG = "question -> answer: float"
Q = "Tom has 3 boxes of 12 apples. How many apples?"

#: the programs under test, each built around the LM it is given (small caps: a few calls each)
PROGRAMS: dict[str, Callable[[dspy.BaseLM], dspy.Module]] = {
    "sc_agreement": lambda lm: _with_lm(SelfConsistency(SIG, k=6, stop="agreement", batch=2), lm),
    "sc_beta": lambda lm: _with_lm(SelfConsistency(SIG, k=6, stop="beta", batch=1), lm),
    "sc_window": lambda lm: _with_lm(SelfConsistency(SIG, k=6, stop="window", batch=2), lm),
    "defender_sc": lambda lm: _with_lm(SelfConsistency(SIG, k=6, stop="agreement", prompt="defender"), lm),
    "cascade": lambda lm: Cascade(SIG, defender_lm=lm, debater_lm=lm, host_lm=lm),
}
#: calls each makes when every sample answers 36: agreement at 4 of 6, beta at 4 to 0, a window of 2, stage 1
CALLS = {"sc_agreement": 4, "sc_beta": 4, "sc_window": 2, "defender_sc": 4, "cascade": 2}
NAMES = list(PROGRAMS)


def _with_lm(module: dspy.Module, lm: dspy.BaseLM) -> dspy.Module:
    module.set_lm(lm)
    return module


def served(server: FaultServer) -> tuple[int, int, int]:
    """(answered requests, prompt tokens, completion tokens) the server reported."""
    return (
        len(server.responses),
        sum(r["usage"]["prompt_tokens"] for r in server.responses),
        sum(r["usage"]["completion_tokens"] for r in server.responses),
    )


def assert_usage(usage: Usage, server: FaultServer) -> None:
    calls, prompt, completion = served(server)
    assert calls > 0
    assert (usage.total.calls, usage.total.prompt_tokens, usage.total.completion_tokens) == (calls, prompt, completion)
    assert all(c.ok and not c.cache_hit and c.finish_reason == "stop" for c in usage.calls)


@pytest.mark.parametrize("name", NAMES)
def test_forward(name, fault_server):
    program = PROGRAMS[name](plain_lm(fault_server))
    with track_usage() as usage:
        pred = program(question=Q)
    assert pred.answer == 36.0 and pred.stats["samples"] == CALLS[name]
    assert len(fault_server.responses) == CALLS[name]
    assert all(r.get("temperature") == 0.7 for r in fault_server.requests)  # every sample at the sampling temperature
    assert_usage(usage, fault_server)


@pytest.mark.parametrize("name", NAMES)
def test_async(name, fault_server):
    program = PROGRAMS[name](plain_lm(fault_server))

    async def run() -> tuple[Any, Usage]:
        with track_usage() as usage:
            pred = await program.acall(question=Q)
        return pred, usage

    pred, usage = asyncio.run(run())
    assert pred.answer == 36.0 and len(fault_server.responses) == CALLS[name]
    assert_usage(usage, fault_server)


@pytest.mark.parametrize("name", NAMES)
def test_evaluate_with_threads_sharing_one_lm(name, fault_server):
    program = PROGRAMS[name](plain_lm(fault_server))
    devset = [dspy.Example(question=f"{Q} (case {i})", answer=36.0).with_inputs("question") for i in range(4)]

    def metric(example: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> float:
        return float(pred.answer == example.answer)

    evaluate = dspy.Evaluate(devset=devset, metric=metric, num_threads=2, display_progress=False, max_errors=0)
    with track_usage() as usage:
        result = evaluate(program)
    assert result.score == 100.0 and len(fault_server.responses) == 4 * CALLS[name]
    assert_usage(usage, fault_server)


@pytest.mark.parametrize("name", NAMES)
def test_inside_best_of_n(name, fault_server):
    program = PROGRAMS[name](plain_lm(fault_server))
    best = dspy.BestOfN(program, N=2, reward_fn=lambda args, pred: float(pred.answer == 36.0), threshold=1.0)
    with track_usage() as usage:
        pred = best(question=Q)
    assert pred.answer == 36.0
    assert_usage(usage, fault_server)


@pytest.mark.parametrize("name", NAMES)
def test_an_lm_failure_raises_out_of_the_program(name, fault_server):
    fault_server.set_fault("500")
    program = PROGRAMS[name](plain_lm(fault_server, num_retries=0))
    with track_usage() as usage, pytest.raises(Exception) as info:
        program(question=Q)
    assert "injected internal server error" in str(info.value)
    assert fault_server.requests and usage.total.calls >= 1
    assert all(not c.ok and c.error == type(info.value).__name__ for c in usage.calls)
    assert usage.total.tokens == 0


@pytest.mark.parametrize("name", NAMES)
def test_a_warm_cache_rerun_reports_the_cold_runs_served_tokens(name, fault_server, tmp_path):
    configure_cache(tmp_path / "cache")
    lm = plain_lm(fault_server, cache=True)
    with track_usage() as cold:
        cold_pred = PROGRAMS[name](lm)(question=Q)
    requests = len(fault_server.requests)
    dspy.cache.reset_memory_cache()  # the warm run reads the disk cache, as a re-run in a new process does
    with track_usage() as warm:
        warm_pred = PROGRAMS[name](lm)(question=Q)
    assert len(fault_server.requests) == requests  # every sample served from the cache
    assert warm_pred.answer == cold_pred.answer == 36.0
    assert warm_pred.trajectory == cold_pred.trajectory  # the same samples, so the same stop
    assert warm.total.cached_calls == warm.total.calls == cold.total.calls and warm.total.tokens == 0
    assert warm.total.served_tokens == cold.total.served_tokens > 0


@pytest.mark.parametrize(
    ("fixed", "adaptive"),
    [
        (lambda lm: _with_lm(SelfConsistency(SIG, k=6), lm), PROGRAMS["sc_agreement"]),
        (lambda lm: _with_lm(SelfConsistency(SIG, k=6, prompt="defender"), lm), PROGRAMS["cascade"]),
    ],
    ids=["sc_agreement_after_sc", "cascade_after_defender_sc"],
)
def test_adaptive_samples_are_the_fixed_runs_cache_entries(fixed, adaptive, fault_server, tmp_path):
    """Rollout ids 0, 1, ...: after a fixed run, an adaptive run over the same prompt sends no request."""
    configure_cache(tmp_path / "cache")
    lm = plain_lm(fault_server, cache=True)
    fixed_pred = fixed(lm)(question=Q)
    requests = len(fault_server.requests)
    assert requests == 6
    with track_usage() as usage:
        pred = adaptive(lm)(question=Q)
    assert len(fault_server.requests) == requests and usage.total.cached_calls == usage.total.calls > 0
    samples = [t for t in pred.trajectory if t["type"] == "sample"]
    assert [{k: t[k] for k in ("index", "answer")} for t in samples] == [
        {k: t[k] for k in ("index", "answer")} for t in fixed_pred.trajectory[: len(samples)]
    ]


def split_responder() -> Callable[[list[dict[str, Any]], int | None], dict[str, Any] | str]:
    """Defender-prompt calls answer 36, 15, 36, 15, ... (samples that never settle); every other role as
    :func:`conftest.signature_responder` (the Host says 36)."""
    answers = itertools.cycle(["36", "15"])
    lock = threading.Lock()
    others = signature_responder()

    def respond(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any] | str:
        if DEFENDER_INSTRUCTIONS.splitlines()[0] in system_text(messages):
            with lock:
                answer = next(answers)
            return {"reasoning": "3 * 12", "answer": answer}
        return others(messages, max_tokens)

    return respond


@pytest.mark.parametrize("use_async", [False, True])
def test_the_cascade_debates_on_persistent_disagreement_with_a_plain_lm(use_async, fault_server):
    fault_server.responder = split_responder()
    lm = plain_lm(fault_server)
    program = Cascade(SIG, defender_lm=lm, debater_lm=lm, host_lm=lm, rounds=1)

    async def run() -> tuple[Any, Usage]:
        with track_usage() as usage:
            pred = await program.acall(question=Q) if use_async else program(question=Q)
        return pred, usage

    pred, usage = asyncio.run(run())
    assert pred.answer == 36.0 and pred.stats["stage"] == 3.0 and pred.stats["samples"] == 6.0
    assert {"defender", "debater", "host"} <= set(usage.roles)
    assert_usage(usage, fault_server)
    _, prompt, completion = served(fault_server)
    assert sum(pred.stats[f"tokens.stage{s}"] for s in (1, 2, 3)) == prompt + completion
    assert all(pred.stats[f"tokens.stage{s}"] > 0 for s in (1, 2, 3))
