"""The process's trace writer (:mod:`dspy_for.experiments.tracking.writer`): one for every sink of a process, however
many methods and datasets run side by side (a comparison of 5 methods on 4 datasets once had 20 writers exhaust
SQLAlchemy's pool of 15 connections and lose traces); traces stored many per transaction; a store that refuses them
gets a warning for every item, and a run whose store keeps refusing is given up after ``GIVE_UP`` failed batches; a
writer process that dies hands every trace it had not stored to a thread of the run's process."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dspy_for.experiments.tracking import sink as sink_module
from dspy_for.experiments.tracking import traces
from dspy_for.experiments.tracking import writer as writer_module
from dspy_for.experiments.tracking.assessments import TraceContext
from dspy_for.experiments.tracking.sink import MlflowSink
from dspy_for.experiments.tracking.store import setup_tracking, start_run
from dspy_for.experiments.tracking.writer import GIVE_UP, TraceWriter


def _run() -> Any:
    return SimpleNamespace(
        spec=SimpleNamespace(traces=True),
        method=SimpleNamespace(label="cot", name="cot"),
        dataset=SimpleNamespace(name="gsm8k"),
    )


def _payload(item: str) -> dict[str, Any]:
    return {"item": json.dumps({"id": item}), "id": item, "calls": [], "reused": False}


def _context(run_id: str = "run", **kw: Any) -> TraceContext:
    return TraceContext(
        label="cot", method="cot", dataset="gsm8k/sample", metric="m", run_id=run_id, experiment_id="0", **kw
    )


@pytest.fixture
def thread_writer(monkeypatch):
    """A writer thread of this process (what the patches below reach), with traces built from their item id."""
    monkeypatch.setitem(writer_module._WRITER, "writer", TraceWriter("thread"))
    built = lambda ctx, payload: (SimpleNamespace(id=payload["id"], trace_id=f"tr-{payload['id']}"), [])  # noqa: E731
    monkeypatch.setattr(traces, "build_trace", built)
    monkeypatch.setattr(sink_module.traces, "trace_context", lambda run, run_id, served=None: _context(run_id))
    monkeypatch.setattr(sink_module.traces, "item_payload", lambda landed, method: _payload(landed.item.id))


def _landed(item: str) -> Any:
    return SimpleNamespace(item=SimpleNamespace(id=item, key=f"key-{item}"))


def test_one_writer_stores_every_sinks_traces_one_batch_at_a_time(thread_writer, monkeypatch):
    lock = threading.Lock()
    active, peak, written, batches = 0, 0, [], []

    def write(ctx: Any, built: list[Any]) -> dict[int, Exception]:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.02)
        with lock:
            active -= 1
            written.extend(info.id for info, _ in built)
            batches.append(len(built))
        return {}

    monkeypatch.setattr(traces, "write_traces", write)
    sinks = [MlflowSink(_run(), f"run-{i}") for i in range(12)]
    for i, sink in enumerate(sinks):
        for j in range(5):
            sink.add(_landed(f"item-{i}-{j}"))
    for sink in sinks:
        sink.finish_traces()
    assert sorted(written) == sorted(f"item-{i}-{j}" for i in range(12) for j in range(5))  # every trace written
    # each sink knows the id of every trace it stored, by record key (the item frame's `trace_id`)
    assert sinks[3].trace_ids == {f"key-item-3-{j}": f"tr-item-3-{j}" for j in range(5)}
    assert peak == 1  # one writer for the whole process: the store's pool is never exhausted by writers
    assert max(batches) > 1  # many per transaction


def test_a_store_that_keeps_refusing_warns_for_every_item_then_gives_up(thread_writer, monkeypatch, caplog):
    calls = 0

    def refuse(ctx: Any, built: list[Any]) -> dict[int, Exception]:
        nonlocal calls
        calls += 1
        raise RuntimeError("QueuePool limit reached")

    monkeypatch.setattr(traces, "write_traces", refuse)
    sink = MlflowSink(_run(), "run")
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        for i in range(6):
            sink.add(_landed(f"item-{i}"))
            sink.finish_traces()  # one batch each
    warned = [r.getMessage() for r in caplog.records if "could not log the trace" in r.getMessage()]
    assert len(warned) == 6 and all(f"item item-{i} of cot" in w for i, w in enumerate(warned))  # none unsaid
    assert calls == GIVE_UP and "not tried after" in warned[-1]  # then it stops trying


def test_finish_traces_before_any_record_is_a_no_op(thread_writer):
    MlflowSink(_run(), "run").finish_traces()


# -------------------------------------------------------------------------------- the writer process, for real


@pytest.fixture
def tracked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    setup_tracking(uri, "writers")
    return uri


def _item_payloads(n: int, tag: str, timed: bool = False) -> list[dict[str, Any]]:
    """``n`` records as a sink hands them over; ``timed``: each with its start and one LM call span."""
    from dspy_for.experiments.core import ItemResult

    t0 = 1_800_000_000.0
    usage = {"total": {"calls": 1, "prompt_tokens": 10, "completion_tokens": 5, "tokens": 15}}
    out = []
    for i in range(n):
        item = ItemResult(id=f"{tag}/{i}", question=f"q{i}?", gold="1", prediction={"answer": "1"}, score=1.0,
                          usage=usage, started_at=t0 + i if timed else None, wall_time=0.5)  # fmt: skip
        call = {"name": "task", "inputs": {"messages": [{"role": "user", "content": f"q{i}?"}]}, "outputs": ["1"],
                "attributes": {"dspy_for.role": "task"}, "error": None, "start_ns": int((t0 + i) * 1e9),
                "end_ns": int((t0 + i + 0.4) * 1e9), "chat": True}  # fmt: skip
        out.append({"item": item.to_json(), "id": item.id, "calls": [call] if timed else [], "reused": False})
    return out


def _stored_items(uri: str, run_id: str) -> set[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.search_traces(
        locations=[client.get_run(run_id).info.experiment_id], max_results=1000,
        filter_string=f"metadata.`mlflow.sourceRun` = '{run_id}'",
    )  # fmt: skip
    return {t.info.trace_metadata["dspy_for.item_id"] for t in found}


def _ctx(uri: str, run_id: str, experiment_id: str) -> TraceContext:
    from dspy_for.compat import mlflow as compat

    return TraceContext(
        label="cot", method="cot", dataset="gsm8k/sample", metric="m", run_id=run_id, experiment_id=experiment_id,
        tracking_uri=uri, client=compat.tracing_client(uri),
    )  # fmt: skip


def test_the_writer_process_stores_many_traces_per_transaction(tracked):
    from mlflow.tracking import MlflowClient

    run_id = start_run("many", "writers")
    experiment_id = MlflowClient(tracked).get_run(run_id).info.experiment_id
    writer = TraceWriter("process")
    assert writer.mode == "process"
    sink = writer.open(_ctx(tracked, run_id, experiment_id))
    for payload in _item_payloads(40, "many"):
        writer.add(sink, payload)
    writer.wait(sink)
    assert _stored_items(tracked, run_id) == {f"many/{i}" for i in range(40)}


def test_a_batch_the_store_refuses_in_part_keeps_the_others(tracked, monkeypatch):
    """One trace the store refuses (already stored) fails the batch's transaction: each is then stored on its own."""
    from mlflow.tracking import MlflowClient

    run_id = start_run("part", "writers")
    experiment_id = MlflowClient(tracked).get_run(run_id).info.experiment_id
    ctx = _ctx(tracked, run_id, experiment_id)
    built = [traces.build_trace(ctx, p) for p in _item_payloads(5, "part")]
    assert traces.write_traces(ctx, built[:1]) == {}  # the first one is stored already
    assert traces.write_traces(ctx, built) == {}  # one transaction fails; trace by trace, MLflow merges the first
    assert _stored_items(tracked, run_id) == {f"part/{i}" for i in range(5)}
    elsewhere = replace(ctx, experiment_id="99999999")  # no such experiment: the store refuses each
    failed = traces.write_traces(elsewhere, [traces.build_trace(elsewhere, p) for p in _item_payloads(2, "x")])
    assert sorted(failed) == [0, 1]  # every one is named


def test_a_store_that_refuses_the_writer_process_warns_for_every_item(tracked, caplog):
    run_id = start_run("refused", "writers")
    writer = TraceWriter("process")
    sink = writer.open(_ctx(tracked, run_id, "99999999"))  # no such experiment: the store refuses every trace
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        for payload in _item_payloads(3, "refused"):
            writer.add(sink, payload)
        writer.wait(sink)
    warned = [r.getMessage() for r in caplog.records if "could not log the trace" in r.getMessage()]
    assert len(warned) == 3 and all(f"item refused/{i} of cot" in w for i, w in enumerate(sorted(warned)))


def test_a_writer_process_that_dies_hands_its_traces_to_a_thread(tracked, monkeypatch, caplog):
    from mlflow.tracking import MlflowClient

    run_id = start_run("failover", "writers")
    experiment_id = MlflowClient(tracked).get_run(run_id).info.experiment_id
    writer = TraceWriter("process")
    sink = writer.open(_ctx(tracked, run_id, experiment_id))
    assert writer._process is not None
    os.kill(writer._process.pid, signal.SIGKILL)  # before it stored anything
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        for payload in _item_payloads(10, "failover"):
            writer.add(sink, payload)
        writer.wait(sink)
    assert writer.mode == "thread" and any("tracking process stopped" in r.getMessage() for r in caplog.records)
    assert _stored_items(tracked, run_id) == {f"failover/{i}" for i in range(10)}


def test_only_a_processes_own_writer_is_used_after_a_fork(monkeypatch):
    old = TraceWriter("thread")
    monkeypatch.setitem(writer_module._WRITER, "writer", old)
    monkeypatch.setattr(old, "pid", -1)  # as a forked child sees its parent's writer
    monkeypatch.setenv(writer_module.MODE_ENV, "thread")
    assert writer_module.trace_writer() is not old and writer_module.trace_writer().pid == os.getpid()


def test_a_trace_stored_in_a_batch_is_the_trace_stored_alone(tracked):
    """The one-transaction path stores what MLflow's own start_trace and log_spans store for each trace: the same
    trace, read back, as one stored on its own (ids and the artifact location aside)."""
    from mlflow.tracking import MlflowClient

    run_id = start_run("same", "writers")
    experiment_id = MlflowClient(tracked).get_run(run_id).info.experiment_id
    ctx = _ctx(tracked, run_id, experiment_id)
    payloads = _item_payloads(3, "same", timed=True)
    assert traces.write_traces(ctx, [traces.build_trace(ctx, p) for p in payloads]) == {}  # one transaction
    assert traces.write_traces(ctx, [traces.build_trace(ctx, payloads[0])]) == {}  # alone
    client = MlflowClient(tracked)
    found = client.search_traces(
        locations=[experiment_id], max_results=10, filter_string="metadata.`dspy_for.item_id` = 'same/0'"
    )
    batched, alone = sorted(found, key=lambda t: t.info.request_time)  # the same item: same times
    assert _shown(batched) == _shown(alone) and len(batched.data.spans) == 2


def test_a_batch_writes_the_rows_mlflow_writes_trace_by_trace(tmp_path, monkeypatch):
    """Every row of every table a batch writes (its traces' rows held and inserted together) is the row MLflow's own
    ``start_trace`` and ``log_spans`` write for the same traces one at a time, each in its own transaction."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from dspy_for.compat import mlflow_batch

    dumps, built, batches = [], None, []
    in_one = mlflow_batch._in_one_transaction
    monkeypatch.setattr(mlflow_batch, "_in_one_transaction", lambda *a: batches.append(in_one(*a)) or batches[-1])
    for one_by_one in (False, True):
        store = tmp_path / ("alone" if one_by_one else "batch")
        uri = f"sqlite:///{store}/mlflow.db"
        monkeypatch.chdir(tmp_path)
        setup_tracking(uri, "rows")
        client = MlflowClient(uri)
        experiment_id = client.get_experiment_by_name("rows").experiment_id
        ctx = _ctx(uri, "the-run", experiment_id)
        payloads = [*_item_payloads(6, "rows", timed=True), *_item_payloads(2, "untimed")]
        built = built or [traces.build_trace(ctx, p) for p in payloads]  # the same traces, ids included, in both
        if one_by_one:
            monkeypatch.setattr(mlflow_batch, "_in_one_transaction", lambda *a: None)
        assert traces.write_traces(ctx, built) == {}
        with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as db:
            tables = [t for (t,) in db.execute("select name from sqlite_master where type = 'table'")]
            dumps.append({t: sorted(repr(r).replace(str(store), "STORE") for r in db.execute(f"select * from {t}"))
                          for t in tables if t.startswith(("trace", "span", "assessment"))})  # fmt: skip
    batched, alone = dumps
    assert len(batches) == 1 and batches[0] is not None  # the batch was stored in one transaction
    assert batched == alone
    assert len(batched["trace_info"]) == 8 and len(batched["spans"]) == 12 and batched["assessments"]


def test_with_mlflows_trace_rollups_on_a_batchs_rows_are_flushed_as_mlflow_does(tracked, monkeypatch):
    """MLflow's opt-in rollups make ``start_trace`` queue rebuilds it reads back within the batch: no rows held then."""
    from mlflow.tracking import MlflowClient
    from sqlalchemy.orm import Session

    bulk: list[int] = []
    real = Session.bulk_save_objects
    monkeypatch.setattr(Session, "bulk_save_objects", lambda self, rows: bulk.append(len(rows)) or real(self, rows))
    run_id = start_run("rollups", "writers")
    ctx = _ctx(tracked, run_id, MlflowClient(tracked).get_run(run_id).info.experiment_id)
    monkeypatch.setenv("MLFLOW_SQL_TRACE_ROLLUPS_ENABLED", "true")
    assert traces.write_traces(ctx, [traces.build_trace(ctx, p) for p in _item_payloads(3, "rollups")]) == {}
    assert bulk == [] and _stored_items(tracked, run_id) == {f"rollups/{i}" for i in range(3)}
    monkeypatch.delenv("MLFLOW_SQL_TRACE_ROLLUPS_ENABLED")
    more = [traces.build_trace(ctx, p) for p in _item_payloads(3, "held")]
    assert traces.write_traces(ctx, more) == {}
    assert bulk and _stored_items(tracked, run_id) >= {f"held/{i}" for i in range(3)}


def _shown(trace: Any) -> dict[str, Any]:
    info = trace.info
    return {
        "tags": {k: v for k, v in info.tags.items() if k != "mlflow.artifactLocation"},
        "metadata": info.trace_metadata,
        "state": info.state,
        "duration": info.execution_duration,
        "previews": (info.request_preview, info.response_preview),
        "usage": info.token_usage,
        "assessments": sorted((a.name, str(a.value)) for a in info.assessments),
        "spans": [(s.name, s.parent_id is None, {k: v for k, v in s.attributes.items() if k != "mlflow.traceRequestId"},
                   s.inputs, s.outputs, s.status.status_code, s.end_time_ns - s.start_time_ns)
                  for s in sorted(trace.data.spans, key=lambda s: s.start_time_ns)],
    }  # fmt: skip


@pytest.mark.parametrize("traces", [True, False])
def test_tracking_with_traces_starts_the_writer_first(tmp_path, monkeypatch, traces):
    """``setup_tracking(..., traces=True)`` starts the trace writer before MLflow is set up (its own start-up, a
    process importing MLflow and its store, then runs beside the run's); without traces none is started."""
    import mlflow

    order: list[str] = []
    monkeypatch.setattr(writer_module, "trace_writer", lambda: order.append("writer"))
    real = mlflow.set_tracking_uri
    monkeypatch.setattr(mlflow, "set_tracking_uri", lambda uri: (order.append("mlflow"), real(uri)))
    setup_tracking(f"sqlite:///{tmp_path}/mlruns/mlflow.db", "early", traces=traces)
    assert order == (["writer", "mlflow"] if traces else ["mlflow"])


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads a process's memory map (Linux)")
def test_the_writer_process_imports_mlflow_before_its_first_trace():
    """A new writer process, sent nothing, imports MLflow and its SQL store at once: SQLite's module, which the
    writer's own start-up does not load, is mapped into it (read from its memory map)."""
    writer = TraceWriter("process")
    assert writer.mode == "process" and writer._process is not None
    pid = writer._process.pid
    deadline = time.monotonic() + 60
    loaded = False
    while not loaded and time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(OSError):
            loaded = "_sqlite3" in Path(f"/proc/{pid}/maps").read_text()
    assert loaded


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads a process's memory map (Linux)")
def test_the_writer_process_runs_this_dspy_for_whatever_the_working_directory_holds(tmp_path, monkeypatch):
    """Started from a folder holding another ``dspy_for`` (a checkout of another version), the writer process imports
    the run's own: the other one, were it imported, would leave a mark and end the process."""
    mark = tmp_path / "imported"
    other = tmp_path / "dspy_for"
    other.mkdir()
    (other / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    writer = TraceWriter("process")
    assert writer.mode == "process" and writer._process is not None
    pid = writer._process.pid
    deadline = time.monotonic() + 60
    loaded = False
    while not loaded and writer._process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(OSError):
            loaded = "_sqlite3" in Path(f"/proc/{pid}/maps").read_text()  # its own warm-up: this dspy_for's
    assert not mark.exists() and writer._process.poll() is None
