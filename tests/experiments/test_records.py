from __future__ import annotations

import json
import math

import pytest

from dspy_for.experiments.core import ItemResult, MethodResult, ResultStore


def _line(**kw):
    base = {"id": "d/val/1", "question": "q1", "gold": 3.0, "prediction": {"answer": 3.0}, "score": 1.0}
    return json.dumps({**base, **kw})


def test_store_matches_by_content_keeps_the_last_record_and_drops_failed_ones(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        "\n".join(
            [
                _line(),
                _line(question="q2", error="LMServerError: down", error_class="LMServerError", score=0.0),
                _line(question="q3", score=0.0),
                _line(question="q3", score=1.0),  # a later record of the same item replaces the earlier one
                '{"id": "torn',  # a killed run's half-written last line
            ]
        )
    )
    done = ResultStore(path).load()
    assert {i.question: i.score for i in done.values()} == {"q1": 1.0, "q3": 1.0}
    # the same question with another gold (an edited data file) is another item
    assert ItemResult.from_json(_line(gold=4.0)).key not in done


def test_a_legacy_parse_error_record_is_an_unparsed_wrong_answer_not_a_failure(tmp_path):
    legacy = ItemResult.from_json(_line(error="AdapterParseError: Failed to parse field answer", score=0.0))
    assert not legacy.failed and legacy.unparsed and legacy.score == 0.0
    outage = ItemResult.from_json(_line(error="APIConnectionError: refused", score=0.0))
    assert outage.failed and not outage.unparsed
    result = MethodResult("m", [legacy, outage, ItemResult.from_json(_line(question="q9"))])
    assert (result.n, result.n_scored, result.n_failed, result.n_unparsed) == (3, 2, 1, 1)
    assert result.accuracy == 0.5 and result.error_counts() == {"APIConnectionError: refused": 1}


def test_records_written_are_masked(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", "topsecret-value-123")
    store = ResultStore(tmp_path / "m.jsonl")
    store.append(
        ItemResult.from_json(
            _line(error="401: key topsecret-value-123 / sk-abcdefghijklmnop rejected", error_class="LMAuthError")
        )
    )
    text = (tmp_path / "m.jsonl").read_text()
    assert "topsecret-value-123" not in text and "sk-abcdefghijklmnop" not in text and "***" in text


def test_seconds_per_item_leaves_out_answers_the_dspy_cache_served_and_bounds_those_it_served_in_part():

    def item(n: int, seconds: float, cached: int) -> ItemResult:
        usage = {"total": {"calls": 2, "cached_calls": cached}}
        return ItemResult(f"q{n}", f"question {n}", 1, {"answer": 1}, 1.0, usage=usage, wall_time=seconds)

    cold = MethodResult("cot", [item(0, 4.0, 0), item(1, 6.0, 0), item(2, 0.001, 2)])
    assert cold.seconds_per_item == pytest.approx(5.0) and not cold.seconds_partly_cached  # no call of its own: out
    # a first call another method made before (ProRefine after CoT): the rest of the item's time counts, as a bound
    mixed = MethodResult("prorefine", [item(0, 9.0, 1), item(1, 11.0, 1), item(2, 0.001, 2)])
    assert mixed.seconds_per_item == pytest.approx(10.0) and mixed.seconds_partly_cached
    warm = MethodResult("cot", [item(0, 0.001, 2), item(1, 0.002, 2)])
    assert math.isnan(warm.seconds_per_item)  # absent: no answer says what the method costs in time
    from dspy_for.experiments.core.summarize import summarize
    from dspy_for.experiments.reports.table import COLUMNS

    seconds = next(c for c in COLUMNS if c.header == "s/item")
    assert seconds.cell(summarize(mixed), None) == "≥10.0"
    assert seconds.cell(summarize(cold), None) == "5.00"


def test_a_method_whose_every_answer_the_cache_served_has_no_time_in_its_summary_table_or_metrics():
    from dspy_for.experiments.core.summarize import summarize
    from dspy_for.experiments.reports.table import COLUMNS

    usage = {"total": {"calls": 1, "cached_calls": 1, "tokens": 10}}
    items = [ItemResult(f"q{n}", f"question {n}", 1, {"answer": 1}, 1.0, usage=usage, wall_time=0.001) for n in (0, 1)]
    summary = summarize(MethodResult("cot", items))
    assert summary.seconds_per_item is None and "seconds_per_item" not in summary.metrics()
    seconds = next(c for c in COLUMNS if c.header == "s/item")
    assert seconds.cell(summary, None) == "-"


def test_a_results_usage_is_every_records_usage_added_role_by_role():
    """What the table reads: each role's counters summed over the scored records, as adding each record's
    :class:`Usage` one by one gives (ints stay ints; a role's first record sets the roles' order)."""
    import random
    from dataclasses import fields

    from dspy_for.lm.usage import RoleUsage, Usage

    rng = random.Random(7)
    names = [f.name for f in fields(RoleUsage)]
    floats = {"wall_time", "cost_usd", "cached_cost_usd"}
    items = []
    for n in range(300):
        usage = {
            role: {
                k: rng.random() if k in floats else rng.randint(0, 500) for k in rng.sample(names, rng.randint(1, 9))
            }
            for role in rng.sample(["task", "debater", "host"], rng.randint(0, 3))
        }
        usage["total"] = {"calls": 10**6}  # derived: never added again
        items.append(
            ItemResult(str(n), f"q{n}", n, {"answer": "1"}, 1.0, usage=usage, error="x" if n % 7 == 0 else None)
        )
    expected = Usage()
    for item in items:
        if item.error is None:
            expected.merge(Usage.from_dict(item.usage))
    got = MethodResult("m", items).usage
    assert list(got.roles) == list(expected.roles) and got.roles == expected.roles
    assert all(type(r.calls) is int for r in got.roles.values())
