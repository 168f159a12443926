"""Which item starts next when methods share one pool of threads: the feed with the most work left."""

from __future__ import annotations

import pytest

from dspy_for.experiments import compare
from dspy_for.experiments.core.schedule import WorkQueue, calls_per_item
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.lm.usage import CallRecord
from dspy_for.testing import OpenAICompatibleServer, ScriptedLM, for_responder, system_text


def _call(tokens: int) -> CallRecord:
    return CallRecord(
        role="r",
        model="m",
        prompt_tokens=tokens,
        completion_tokens=0,
        cache_hit=False,
        finish_reason="stop",
        wall_time=0,
    )


def _drain(queue: WorkQueue[str, int], may_start=lambda feed: True) -> list[str]:
    order = []
    while (picked := queue.next(may_start)) is not None:
        order.append(picked[0])
    return order


def test_the_costliest_feed_starts_first_and_equals_take_turns():
    prior = {"single": 1.0, "cot": 1.0, "for": 4.0}
    queue = WorkQueue([("single", [1, 2, 3]), ("cot", [1, 2, 3]), ("for", [1, 2, 3])], prior.__getitem__)
    # for: 12, 8, 4 of work left before each start; then single and cot (3 each) in turn with for's last (4 > 3)
    assert _drain(queue) == ["for", "for", "for", "single", "cot", "single", "cot", "single", "cot"]


def test_each_feed_hands_out_its_items_in_their_order_and_only_when_it_may_start():
    queue = WorkQueue([("a", [1, 2]), ("b", [3, 4])], lambda feed: 1.0)
    assert queue.next(lambda feed: feed == "b") == ("b", 3)
    assert queue.next(lambda feed: True) == ("a", 1)  # a has more left now
    assert queue.next(lambda feed: feed == "b") == ("b", 4)
    assert queue.next(lambda feed: feed == "b") is None  # b is empty, a not allowed
    assert queue.next(lambda feed: True) == ("a", 2)


def test_measured_tokens_replace_the_registry_count():
    # b's registry count says 3 calls per item, but a's finished item took 1,000 tokens in its one call and b's
    # took 100 in all: a has the most work left once both are measured
    queue = WorkQueue([("a", [1, 2, 3, 4]), ("b", [1, 2, 3, 4])], {"a": 1.0, "b": 3.0}.__getitem__)
    assert queue.next(lambda f: True)[0] == "b"
    queue.finished("a", [_call(1000)])  # a measured; b's count is priced at a's tokens per call: 3,000 per item
    assert queue.next(lambda f: True)[0] == "b"
    queue.finished("b", [_call(50), _call(50)])
    assert _drain(queue) == ["a", "a", "a", "a", "b", "b"]


def test_an_item_that_spent_no_tokens_measures_nothing():
    queue = WorkQueue([("a", [1, 2, 3]), ("b", [1, 2, 3])], lambda feed: 1.0)
    queue.finished("a", [_call(600)])
    queue.finished("b", [])  # its LM failed before any token: not a measure of what b's items cost
    queue.finished("b", [_call(1000)])
    assert queue.next(lambda f: True)[0] == "b"  # b: 3 × 1,000 of work left (not 3 × 500), a: 3 × 600


def test_a_methods_calls_per_item_come_from_the_registry():
    assert calls_per_item("cot", {}) == 1.0
    assert calls_per_item("for", {"rounds": 1, "host": True}) > calls_per_item("cot", {})
    assert calls_per_item("no-such-method", {}) == 1.0  # only an ordering hint: never an error


@pytest.mark.parametrize("kind", ["scripted", "plain"])
def test_a_comparison_starts_its_costliest_methods_items_first(tmp_path, monkeypatch, kind):
    """On two threads, FOR's items (several calls each) start before a single call's; every item still lands."""
    monkeypatch.chdir(tmp_path)
    methods = [MethodConfig("single"), MethodConfig("for", label="for_n1", options={"rounds": 1, "host": True})]

    def spec(lm):
        return ExperimentSpec(
            lm=lm,
            datasets=[DatasetConfig("gsm8k", "sample", first=3)],
            methods=methods,
            num_threads=2,
            cache=False,
            baseline="single",
            tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
            results_dir=str(tmp_path / "results"),
        )

    if kind == "scripted":
        lm = ScriptedLM(for_responder("18"))
        result = compare(spec(lm))
        systems = [system_text(call["messages"]) for call in lm.calls]
    else:
        import dspy

        with OpenAICompatibleServer(for_responder("18"), latency=0.05) as server:
            lm = dspy.LM("openai/test-model", api_base=server.base_url, api_key="sk-test", cache=False)
            result = compare(spec(lm))
            systems = [system_text(body["messages"]) for body in server.requests]
    assert result.ok and all(r.n_scored == 3 for r in result.results["gsm8k"].values())
    # a single call's request is the only one whose one output field is the answer; every other is FOR's
    single = ["Your output fields are:\n1. `answer`" in s for s in systems]
    assert sum(single) == 3 and len(systems) > 3 * 4
    # FOR's first two items start on the two threads, its third on the first free one; single's items then
    assert single.index(True) >= 3 and not any(single[:3])
