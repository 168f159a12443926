"""The LMs users run, through the local OpenAI-compatible server behaving like a hosted endpoint: rate limits with
``Retry-After`` absorbed by the per-endpoint limit and retries, a reasoning model that takes only temperature 1,
dollars from litellm's cost map (or a given price, or none), ``max_cost``, and one pool of threads for a
comparison's methods — each with a plain ``dspy.LM`` and with an LM spec string (``make_lm``)."""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import CANARY_KEY, signature_responder
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.experiments.reports.table import table_text
from dspy_for.lm import transport
from dspy_for.testing import OpenAICompatibleServer

GPT5_IN, GPT5_OUT = 0.25e-6, 2e-6  # USD per token in the cost map litellm bundles for gpt-5-mini


@pytest.fixture
def endpoint() -> Any:
    """A started server that behaves like a hosted endpoint; stopped after the test."""
    servers: list[OpenAICompatibleServer] = []

    def start(**kw: Any) -> OpenAICompatibleServer:
        server = OpenAICompatibleServer(signature_responder(), **kw).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _spec(tmp_path: Path, lm: Any, *, first: int = 3, methods=("cot",), experiment="remote", **kw) -> ExperimentSpec:
    return ExperimentSpec(
        lm=lm,
        datasets=[DatasetConfig("gsm8k", "sample", first=first)],
        methods=[MethodConfig(m) for m in methods],
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results" / experiment),
        experiment=experiment,
        **kw,
    )


def _lm(kind: str, server: OpenAICompatibleServer, model: str = "test-model", **kw: Any) -> tuple[Any, dict]:
    """(the spec's ``lm``, its ``lm_options``): a plain ``dspy.LM`` object, or a spec string built by ``make_lm``."""
    if kind == "plain":
        return dspy.LM(f"openai/{model}", api_base=server.base_url, api_key=CANARY_KEY, cache=False, **kw), {}
    return f"openai/{model}", {"api_base": server.base_url, **kw}


def _endpoint_of(server: OpenAICompatibleServer, model: str = "openai/test-model") -> transport.Endpoint:
    return next(e for e in transport.endpoints() if e.key == (server.base_url, model))


# ----------------------------------------------------------------------------------------- rate limits


@pytest.mark.parametrize("kind", ["plain", "make_lm"])
def test_429_with_retry_after_is_absorbed_concurrency_lowered_then_raised(endpoint, tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    server = endpoint(latency=0.05, max_in_flight=4, retry_after=0.1)
    lm, options = _lm(kind, server)
    result = compare(_spec(tmp_path, lm, first=40, num_threads=16, lm_options=options, cache=False))
    cot = result.results["gsm8k"]["cot"]
    assert cot.n_failed == 0 and cot.n_scored == 40 and result.ok
    assert server.rate_limited > 0 and server.max_concurrency_seen <= 4
    ep = _endpoint_of(server)
    assert ep.rate_limited == server.rate_limited  # every 429 was seen, and retried, by the transport
    assert ep.limit.lowest < 16  # lowered on 429s ...
    assert ep.limit.raised > 0  # ... and raised again on success


def test_a_429_storm_past_the_bound_fails_items_exits_nonzero_and_a_rerun_finishes(endpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    server = endpoint(retry_after=0.05)
    server.set_fault("429")  # every request, until cleared
    args = [
        "compare", "--dataset", "gsm8k", "--split", "sample", "--first", "2", "--methods", "cot",
        "--lm", "openai/test-model", "--lm-option", f"api_base={server.base_url}", "--lm-option", "max_retry_wait=0.3",
        "--tracking-uri", f"sqlite:///{tmp_path}/mlruns/mlflow.db", "--results-dir", str(tmp_path / "res"),
    ]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 1, out.output
    assert "2 item(s) failed: LMRateLimitError" in out.output.replace("\n", " ")
    assert server.rate_limited >= 4  # each call was retried within its bound before it failed
    server.set_fault(None)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output


def test_retry_policy_waits_retry_after_and_stops_at_the_bound() -> None:
    from dspy.utils.exceptions import LMRateLimitError, LMServerError

    where = transport.endpoint("unit/model", "http://127.0.0.1:1/unit-test")
    calls: list[float] = []

    def limited() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise LMRateLimitError(message="slow down", status=429, retry_after=0.2)
        return "ok"

    assert transport.RetryPolicy(num_retries=0, max_retry_wait=5).send(where, limited) == "ok"
    assert all(b - a >= 0.2 for a, b in itertools.pairwise(calls))  # never sooner than Retry-After
    storm = transport.RetryPolicy(num_retries=0, max_retry_wait=0.5)
    with pytest.raises(LMRateLimitError):
        storm.send(where, lambda: (_ for _ in ()).throw(LMRateLimitError(message="no", status=429, retry_after=0.2)))
    faults: list[int] = []

    def broken() -> str:
        faults.append(1)
        raise LMServerError(message="boom", status=500)

    with pytest.raises(LMServerError):
        transport.RetryPolicy(num_retries=2, max_retry_wait=60, backoff=0.01).send(where, broken)
    assert len(faults) == 3  # a transient fault: the first try and num_retries more


def test_the_adaptive_limit_halves_on_rate_limits_and_grows_back() -> None:
    limit = transport.AdaptiveLimit(ceiling=16)
    for _ in range(8):
        limit.acquire()
    limit.on_rate_limit()
    assert limit.limit == 4  # half of what was in flight (8 + the refused one, floored)
    for _ in range(8):
        limit.release()
    for _ in range(4):
        limit.on_success()
    assert limit.limit == 5 and limit.raised == 1
    limit.on_rate_limit()
    limit.on_rate_limit()
    limit.on_rate_limit()
    assert limit.limit == 1 and limit.lowest == 1  # never below one


# --------------------------------------------------------------------------------------- reasoning models


@pytest.mark.parametrize("kind", ["plain", "make_lm"])
def test_a_reasoning_model_runs_end_to_end_with_reasoning_tokens_and_dollars(endpoint, tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    server = endpoint(reasoning_models={"gpt-5-mini"}, reasoning_tokens_per_call=50)
    extra = {"temperature": 1.0, "max_tokens": 16000} if kind == "plain" else {}
    lm, options = _lm(kind, server, model="gpt-5-mini", **extra)
    result = compare(_spec(tmp_path, lm, lm_options=options, cache=False))
    cot = result.results["gsm8k"]["cot"]
    assert cot.n_failed == 0 and cot.n_scored == 3, cot.error_counts()
    sent = server.requests[-1]
    assert sent["temperature"] == 1 and sent["max_completion_tokens"] >= 16000 and "max_tokens" not in sent
    row = next(r for r in result.rows if r["method"] == "cot")
    assert row["reasoning_tokens_per_item"] == 50  # one call per item, counted apart ...
    usage = cot.usage.total
    assert usage.completion_tokens == sum(r["usage"]["completion_tokens"] for r in server.responses)  # ... and in
    expected = sum(
        r["usage"]["prompt_tokens"] * GPT5_IN + r["usage"]["completion_tokens"] * GPT5_OUT for r in server.responses
    )
    assert row["cost_per_item"] == pytest.approx(expected / 3)
    assert "$/item" in table_text(result).splitlines()[1]  # the table's header


def test_a_reasoning_model_refuses_temperature_zero_before_any_call(endpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    server = endpoint(reasoning_models={"gpt-5-mini"})
    args = [
        "compare", "--dataset", "gsm8k", "--split", "sample", "--first", "1", "--methods", "cot",
        "--lm", "openai/gpt-5-mini", "--lm-option", f"api_base={server.base_url}", "--lm-option", "temperature=0",
        "--tracking-uri", f"sqlite:///{tmp_path}/mlruns/mlflow.db",
    ]  # fmt: skip
    out = CliRunner().invoke(app, args)
    text = " ".join(out.output.split())
    assert out.exit_code == 2 and "accepts only temperature 1" in text and "set temperature=1" in text
    assert not server.requests


# -------------------------------------------------------------------------------------------------- dollars


def test_an_unpriced_model_has_no_dollars_a_given_price_has(endpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    server = endpoint()
    lm, options = _lm("make_lm", server)
    unpriced = compare(_spec(tmp_path, lm, lm_options=options, experiment="unpriced"))
    row = next(r for r in unpriced.rows if r["method"] == "cot")
    assert row["cost_per_item"] is None and row["spent_usd"] is None  # absent, never $0
    assert math.isnan(unpriced.results["gsm8k"]["cot"].cost_per_item)
    priced = compare(
        _spec(tmp_path, lm, lm_options={**options, "price": {"input": 1.0, "output": 2.0}}, experiment="priced")
    )
    row = next(r for r in priced.rows if r["method"] == "cot")
    cot = priced.results["gsm8k"]["cot"].usage.total
    prompt, completion = (
        cot.prompt_tokens + cot.cached_prompt_tokens,
        cot.completion_tokens + cot.cached_completion_tokens,
    )
    expected = (prompt * 1.0 + completion * 2.0) / 1e6
    assert row["cost_per_item"] == pytest.approx(expected / 3) and row["cost_per_item"] > 0


def test_max_cost_stops_starting_items_keeps_what_finished_and_a_rerun_resumes(endpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    server = endpoint(reasoning_models={"gpt-5-mini"})
    lm, options = _lm("make_lm", server, model="gpt-5-mini")
    spec = _spec(tmp_path, lm, first=5, lm_options=options, max_cost=1e-9)  # less than one item costs
    first = compare(spec)
    cot = first.results["gsm8k"]["cot"]
    assert cot.n_scored == 1 and cot.n_failed == 0  # the one item that ran is kept
    assert first.stopped_by_cost and not first.ok and first.spend is not None and first.spend.not_started == 4
    calls = len(server.responses)
    second = compare(_spec(tmp_path, lm, first=5, lm_options=options, max_cost=1.0))
    assert second.ok and second.results["gsm8k"]["cot"].n_scored == 5
    assert len(server.responses) - calls == 4  # only the items not started before


# ---------------------------------------------------------------------------------------- one pool of threads


def test_the_methods_of_a_comparison_share_one_pool_of_threads(endpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    server = endpoint(latency=0.3)
    lm, options = _lm("make_lm", server)
    spec = _spec(tmp_path, lm, first=4, methods=("single", "cot"), lm_options=options, num_threads=8, cache=False)
    result = compare(spec)
    assert result.ok and all(r.n_scored == 4 for r in result.results["gsm8k"].values())
    assert server.max_concurrency_seen > 4  # more in flight than one method's 4 items: both ran side by side


# ------------------------------------------------------------------------------------------------ epochs


def test_epochs_with_a_plain_lm_at_temperature_1_are_distinct_calls_and_a_rerun_makes_none(
    endpoint, tmp_path, monkeypatch
):
    from dspy_for.lm import configure_cache, factory

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(dspy, "cache", dspy.cache)  # restored after the test, with the directory below
    monkeypatch.setattr(factory, "_configured_dir", factory._configured_dir)
    configure_cache(tmp_path / "dspy_cache")  # the DSPy cache on: only distinct rollout ids make new requests
    server = endpoint()
    lm = dspy.LM("openai/test-model", api_base=server.base_url, api_key=CANARY_KEY, temperature=1.0, cache=True)
    result = compare(_spec(tmp_path, lm, first=2, epochs=3))
    cot = result.results["gsm8k"]["cot"]
    assert result.ok and cot.n == 6 and cot.n_scored == 2 and sorted({i.epoch for i in cot.items}) == [0, 1, 2]
    assert len(server.responses) == 6  # every epoch of every item reached the endpoint: none replayed the cache
    again = compare(_spec(tmp_path, lm, first=2, epochs=3))
    assert again.results["gsm8k"]["cot"].n == 6 and len(server.responses) == 6  # the re-run makes no call
