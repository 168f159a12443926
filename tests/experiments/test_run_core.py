"""The streaming run core's stop rule (``Evaluation.feed(..., stop=)``) with a scripted LM: no item starts once
the rule fires, and an item already running on another thread still lands and is stored (its tokens are spent)."""

from __future__ import annotations

import threading

import pytest

import dspy_for.experiments.core.prepare as prepare_mod
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.experiments.core import Evaluation, ResultStore, prepare_run
from dspy_for.testing import ScriptedLM, user_text


def _scripted_run(monkeypatch, first: int, threads: int, delay: float):
    """CoT on the first ``first`` sample items, its LM scripted to answer after ``delay``; and the questions it was
    asked, as they are."""
    asked: list[str] = []
    lock = threading.Lock()

    def responder(messages, max_tokens):
        with lock:
            asked.append(user_text(messages))
        return {"reasoning": "r", "answer": "1"}

    monkeypatch.setattr(prepare_mod, "make_lm", lambda spec, **options: ScriptedLM(responder, delay=delay))
    data, method = DatasetConfig("gsm8k", "sample", first=first), MethodConfig("cot")
    spec = ExperimentSpec(lm="openai/fake", datasets=[data], methods=[method], cache=False, num_threads=threads)
    return prepare_run(spec, data, method), asked


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_stop_lands_every_started_item_and_starts_no_more(tmp_path, monkeypatch, threads):
    run, asked = _scripted_run(monkeypatch, 8, threads, 0.2)
    store = ResultStore(tmp_path / "items.jsonl")
    with Evaluation(run, store=store, progress=False) as ev:
        landed = ev.feed(run.examples, stop=lambda result: len(result.items) >= 1)
    # the rule fired on the first record: only the items running then ran; nothing started after it
    assert 1 <= len(landed) <= threads < len(run.examples)
    assert len(set(asked)) == len(landed)  # every item that called the LM landed: none was dropped in flight
    assert [i.id for i in ev.result.items] == [i.id for i in landed]
    assert set(store.load()) == {i.key for i in landed}  # and is stored, so a resume reuses it


@pytest.mark.parametrize("threads", [1, 3])
def test_items_run_on_while_their_runs_id_is_not_known_and_land_with_it(tmp_path, monkeypatch, threads):
    """A run's id (its origin) is a future until the tracking process has started the run: no item waits for it.
    Every item calls its LM before the id is known; each record lands once it is, stamped with it."""
    from concurrent.futures import Future

    run, calls = _scripted_run(monkeypatch, 6, threads, 0.05)
    origin: Future[str | None] = Future()
    every_item_called = threading.Event()
    before_the_id: list[bool] = []

    def known_once_every_item_called() -> None:
        before_the_id.append(every_item_called.wait(timeout=10))  # (False: items waited for the id)
        origin.set_result("run-123")

    threading.Thread(target=known_once_every_item_called, daemon=True).start()
    store = ResultStore(tmp_path / "items.jsonl")

    def watch() -> None:
        while len(calls) < len(run.examples):
            threading.Event().wait(0.01)
        every_item_called.set()

    threading.Thread(target=watch, daemon=True).start()
    with Evaluation(run, store=store, progress=False, origin=origin) as ev:
        landed = ev.feed(run.examples)
    assert before_the_id == [True] and len(calls) == len(run.examples)
    assert [r.origin for r in landed] == ["run-123"] * len(run.examples)
    assert {r.origin for r in store.load().values()} == {"run-123"}
