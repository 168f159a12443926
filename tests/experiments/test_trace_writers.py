"""The sinks' trace writers share the tracking store: however many methods and datasets a comparison runs side by
side, at most ``MAX_TRACE_WRITERS`` write at once (a comparison of 5 methods on 4 datasets had 20 writers exhaust
SQLAlchemy's pool of 15 connections and lose traces); a store that keeps refusing gets a warning for every item."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

from dspy_for.experiments.tracking import sink as sink_module
from dspy_for.experiments.tracking.sink import MAX_TRACE_WRITERS, MlflowSink


def _run() -> Any:
    return SimpleNamespace(
        spec=SimpleNamespace(traces=True), method=SimpleNamespace(label="cot"), dataset=SimpleNamespace(name="gsm8k")
    )


def _landed(item: str) -> Any:
    return SimpleNamespace(item=SimpleNamespace(id=item))


def test_no_more_than_max_trace_writers_write_at_once(monkeypatch):
    lock = threading.Lock()
    active, peak, written = 0, 0, []

    def log_item_traces(context: Any, landed: list[Any]) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
            written.extend(x.item.id for x in landed)

    monkeypatch.setattr(sink_module.traces, "trace_context", lambda run, run_id: object())
    monkeypatch.setattr(sink_module.traces, "log_item_traces", log_item_traces)
    sinks = [MlflowSink(_run(), f"run-{i}") for i in range(3 * MAX_TRACE_WRITERS)]
    for i, sink in enumerate(sinks):
        sink.add(_landed(f"item-{i}"))
    for sink in sinks:
        sink.finish_traces()
    assert sorted(written) == sorted(f"item-{i}" for i in range(len(sinks)))  # every trace written
    assert 2 <= peak <= MAX_TRACE_WRITERS  # side by side, but never more than the limit


def test_a_store_that_keeps_refusing_warns_for_every_item(monkeypatch, caplog):
    calls = 0

    def refuse(context: Any, landed: list[Any]) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("QueuePool limit reached")

    monkeypatch.setattr(sink_module.traces, "trace_context", lambda run, run_id: object())
    monkeypatch.setattr(sink_module.traces, "log_item_traces", refuse)
    sink = MlflowSink(_run(), "run")
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        for i in range(6):
            sink.add(_landed(f"item-{i}"))
            time.sleep(0.02)  # one batch each
        sink.finish_traces()
    warned = [r.getMessage() for r in caplog.records if "could not log the trace" in r.getMessage()]
    assert len(warned) == 6  # no item's missing trace goes unsaid
    assert 1 <= calls <= 3  # then it stops trying


def test_finish_traces_before_any_record_is_a_no_op(monkeypatch):
    monkeypatch.setattr(sink_module.traces, "trace_context", lambda run, run_id: object())
    MlflowSink(_run(), "run").finish_traces()
