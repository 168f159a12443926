"""`compare --sequential` and `advise` through a plain ``dspy.LM`` against the local OpenAI-compatible test server:
a pair that is always discordant resolves early; an outage is failed items, never an outcome of a test."""

from __future__ import annotations

from pathlib import Path

from conftest import plain_lm

from dspy_for.datasets import load_dataset
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, advise, compare
from dspy_for.testing import system_text, user_text

GOLD = {ex.question: ex.answer for ex in load_dataset("gsm8k", "sample")}


def cot_right_single_wrong(messages, max_tokens):
    gold = next(g for q, g in GOLD.items() if q in user_text(messages))
    if "reasoning" in system_text(messages):
        return {"reasoning": "worked it out", "answer": str(gold)}
    return {"answer": str(gold + 1)}


def _spec(tmp_path: Path, lm, **kw) -> ExperimentSpec:
    return ExperimentSpec(
        lm=lm,
        datasets=[DatasetConfig("gsm8k", "sample")],
        methods=[MethodConfig("single"), MethodConfig("cot")],
        baseline="single",
        sequential=True,
        batch_size=2,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
        experiment="sequential-conformance",
        **kw,
    )


def test_a_sequential_comparison_with_a_plain_lm_stops_when_resolved(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fault_server.responder = cot_right_single_wrong
    result = compare(_spec(tmp_path, plain_lm(fault_server)))
    (pair,) = result.sequential
    assert pair.result.resolved and pair.result.direction == 1 and pair.result.stopped_at < 20
    assert result.results["gsm8k"]["cot"].n < 45 and result.ok


def test_an_outage_in_a_sequential_comparison_is_errors_not_outcomes(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fault_server.responder = cot_right_single_wrong
    fault_server.set_fault("500")
    result = compare(_spec(tmp_path, plain_lm(fault_server), max_items=6))
    (pair,) = result.sequential
    assert pair.result.n == 0 and not pair.result.resolved  # no scored pair: the test saw nothing
    assert result.n_failed == 12 and not result.ok
    assert all(r["accuracy"] is None for r in result.rows)


def test_advise_with_a_plain_lm_picks_the_better_method(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fault_server.responder = cot_right_single_wrong
    advice = advise(
        lm=plain_lm(fault_server),
        dataset="gsm8k",
        split="sample",
        methods="single,cot",
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
        progress=False,
    )
    assert advice.recommended == "cot" and advice.resolved
