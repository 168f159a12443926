"""The streaming run core's stop rule (``Evaluation.feed(..., stop=)``) with a scripted LM: no item starts once
the rule fires, and an item already running on another thread still lands and is stored (its tokens are spent)."""

from __future__ import annotations

import threading

import pytest

import dspy_for.experiments.core.prepare as prepare_mod
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.experiments.core import Evaluation, ResultStore, prepare_run
from dspy_for.testing import ScriptedLM, user_text


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_stop_lands_every_started_item_and_starts_no_more(tmp_path, monkeypatch, threads):
    started: set[str] = set()
    lock = threading.Lock()

    def responder(messages, max_tokens):
        with lock:
            started.add(user_text(messages))
        return {"reasoning": "r", "answer": "1"}

    monkeypatch.setattr(prepare_mod, "make_lm", lambda spec, **options: ScriptedLM(responder, delay=0.2))
    data = DatasetConfig("gsm8k", "sample", first=8)
    method = MethodConfig("cot")
    spec = ExperimentSpec(lm="openai/fake", datasets=[data], methods=[method], cache=False, num_threads=threads)
    run = prepare_run(spec, data, method)
    store = ResultStore(tmp_path / "items.jsonl")
    with Evaluation(run, store=store, progress=False) as ev:
        landed = ev.feed(run.examples, stop=lambda result: len(result.items) >= 1)
    # the rule fired on the first record: only the items running then ran; nothing started after it
    assert 1 <= len(landed) <= threads < len(run.examples)
    assert len(started) == len(landed)  # every item that called the LM landed: none was dropped in flight
    assert [i.id for i in ev.result.items] == [i.id for i in landed]
    assert set(store.load()) == {i.key for i in landed}  # and is stored, so a resume reuses it
