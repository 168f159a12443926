"""The arithmetic of a plan, on data written here: an estimate from stored items, one from counts of calls, each
compiler's work from its settings, prices as a run gives them, and how the plan writes durations and ranges."""

from __future__ import annotations

import math

import pytest

from dspy_for.compat.dspy import gepa_auto_metric_calls
from dspy_for.experiments.core.compile_estimates import compile_work
from dspy_for.experiments.core.estimates import (
    DEFAULT_CALL,
    Estimate,
    RoleCost,
    counted_estimates,
    item_usd,
    sample_estimates,
    sum_estimates,
)
from dspy_for.experiments.reports.plan import duration, duration_text, estimate_text
from dspy_for.lm.pricing import LOCAL_PRICE, Price, model_price


def cost(calls: float, prompt: float, completion: float, seconds: float | None = 1.0) -> dict[str, RoleCost]:
    return {"task": RoleCost(calls, prompt, completion, seconds)}


def test_n_items_from_stored_ones_are_n_times_their_mean_within_a_prediction_interval():
    costs = [cost(1, 100, 50), cost(3, 300, 150)]  # tokens 150 and 450: mean 300, sd 212.1
    e = sample_estimates(costs, 10, {"task": Price(1.0, 2.0)}, "records")
    assert e.tokens.value == 3000 and e.calls.value == 20
    half = 1.645 * math.sqrt(2 * 150**2) * math.sqrt(10 + 100 / 2)
    assert e.tokens.low == pytest.approx(3000 - half) and e.tokens.high == pytest.approx(3000 + half)
    assert e.usd is not None and e.usd.value == pytest.approx(10 * (100 * 1 + 50 * 2 + 300 * 1 + 150 * 2) / 2 / 1e6)
    same = sample_estimates([cost(1, 100, 50)] * 3, 4, {"task": LOCAL_PRICE}, "records")
    assert (same.tokens.low, same.tokens.value, same.tokens.high) == (600, 600, 600)  # no spread, no range
    assert same.usd is not None and same.usd.value == 0


def test_an_unpriced_role_leaves_dollars_absent_and_an_untimed_one_the_time():
    assert item_usd(cost(1, 10, 10), {"task": None}) is None
    e = sample_estimates([cost(1, 10, 10, None)], 5, {"task": None}, "records")
    assert e.usd is None and e.seconds is None and e.tokens.value == 100
    assert sum_estimates([Estimate.exact(1, "a"), None], "sum") is None


def test_counted_calls_take_fewest_typical_and_most_at_the_measured_call():
    per = {"defender": DEFAULT_CALL, "host": DEFAULT_CALL}
    e = counted_estimates({"defender": (1, 2, 4), "host": (1, 1, 2)}, per, {"defender": None, "host": None}, 3, "opts")
    assert (e.calls.low, e.calls.value, e.calls.high) == (6, 9, 18)
    assert e.tokens.value == 9 * 600 and e.usd is None and e.seconds is None  # default tokens: no time


@pytest.mark.parametrize(
    ("kind", "options", "runs", "optimizer"),
    [
        ("bootstrap", {}, (4, 10, 100), (0, 0, 0)),  # 4 demos at 40% right: 10 runs, at most every training item
        ("bootstrap", {"max_bootstrapped_demos": 2, "max_rounds": 2}, (2, 5, 200), (0, 0, 0)),
        ("gepa", {"max_metric_calls": 60}, (60, 60, 76), (1, 50 / 6, 50 / 3)),  # 10 validate, 3 a minibatch
        ("gepa", {"max_full_evals": 2}, (220, 220, 236), (1, 210 / 6, 210 / 3)),
        ("textgrad", {"epochs": 1, "steps_per_epoch": 4}, (12 + 10, 12 + 50, 12 + 50), (8, 8, 8)),
        ("mipro", {"num_candidates": 4, "num_trials": 6}, (10, 70, 90), (7, 12, 17)),
    ],
)
def test_each_compilers_work_from_its_settings(kind, options, runs, optimizer):
    work = compile_work(kind, options, predictors=1, train=100, val=10, accuracy=0.4)
    assert work.runs == pytest.approx(runs) and work.optimizer == pytest.approx(optimizer)


def test_gepa_auto_is_budgeted_as_gepa_budgets_it():
    work = compile_work("gepa", {"auto": "light"}, predictors=1, train=100, val=10, accuracy=None)
    assert work.runs[1] == gepa_auto_metric_calls("light", 1, 10) > 10


def test_prices_as_a_run_gives_them():
    assert model_price("local/qwen2.5-coder-1.5b", {}) == LOCAL_PRICE
    assert model_price("openai/anything", {"price": {"input": 0.5, "output": 1.5}}) == Price(0.5, 1.5)
    assert model_price("openai/not-a-model-anyone-prices", {}) is None
    priced = model_price("openai/gpt-4.1-mini", {})  # litellm's offline cost map
    assert priced is not None and priced.input > 0 and priced.output > priced.input


def test_durations_and_ranges_as_printed():
    assert [duration(s) for s in (45, 720, 9000)] == ["45 s", "12 min", "2.5 h"]
    assert duration_text(Estimate(1980, 420, 2700, "x")) == "33 min (7–45)"
    assert duration_text(None) == "not measured"
    assert estimate_text(Estimate(1234, 1000, 2000, "x")) == "1,234 (1,000–2,000)"
    assert estimate_text(Estimate.exact(5, "x")) == "5"
