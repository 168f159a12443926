"""Per-item MLflow traces written live by the run core (issue 28 §4) and MLflow datasets of ``compare`` (issue 19),
with scripted LMs into a temporary store: one span per LM call with its real start and end, reused items that say
so, assessments, masking, and a tracing failure as a warning only."""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pytest

from dspy_for.compat import mlflow as compat
from dspy_for.compat import mlflow_batch
from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.core import Evaluation, ItemResult, Landed, ResultStore, prepare_run
from dspy_for.experiments.spec.model import JudgeConfig
from dspy_for.experiments.tracking import runs as trace_runs
from dspy_for.experiments.tracking import traces as tracing
from dspy_for.experiments.tracking import writer as trace_writers
from dspy_for.experiments.tracking.sink import MlflowSink
from dspy_for.experiments.tracking.spans import call_spans
from dspy_for.experiments.tracking.store import setup_tracking, start_run
from dspy_for.lm.usage import CallContent, CallRecord
from dspy_for.testing import OpenAICompatibleServer, ScriptedLM, for_responder, system_text, user_text

CANARY = "sk-canary-DO-NOT-LEAK-0123456789abcdef"
FAIL_ON = "bakery"  # the second sample item: its LM calls fail
DELAY = 0.2  # seconds each scripted LM call takes in the timing tests


def responder(messages, max_tokens):
    if "strict grader" in system_text(messages):
        return {"match": "True", "reasoning_score": "0.9", "coherence_score": "0.8", "holistic_score": "0.7"}
    return for_responder()(messages, max_tokens)


CONFIG = """
experiment = "test"
lm = "openai/fake-model"
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 3
[[methods]]
name = "cot"
[[methods]]
name = "for"
options = { rounds = 1 }
"""

FOR_SPANS = ["FORPrompting.defender A0", "FORPrompting.debater r1", "FORPrompting.defender r1", "FORPrompting.host"]


def leaky(messages, max_tokens):
    """The scripted answers, echoing the key (as an endpoint may echo one in an error body)."""
    out = responder(messages, max_tokens)
    if "questions" in out:
        return {"questions": [f"Is {CANARY} your key?"]}
    if "match" in out:
        return out
    return {**out, "reasoning": f"my key is {CANARY}"}


@pytest.fixture
def scripted(install_scripted_lm):
    """Every LM the comparison builds is one scripted LM (with its DSPy cache on, in a temp dir)."""
    return install_scripted_lm(responder)


def _write(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlruns/mlflow.db"


def _children(uri: str, result) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("test")
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{result.run_id}'")
    return {r.data.params["label"]: r for r in runs}


def _traces_of(run_id: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow.get_tracking_uri())
    experiment_id = client.get_run(run_id).info.experiment_id
    return list(
        client.search_traces(
            locations=[experiment_id],
            max_results=1000,
            filter_string=f"metadata.`mlflow.sourceRun` = '{run_id}'",
        )
    )


def _traces(uri: str, run) -> list:
    mlflow.set_tracking_uri(uri)
    return _traces_of(run.info.run_id)


def _by_item(traces: list) -> dict[str, object]:
    return {t.info.trace_metadata["dspy_for.item_id"]: t for t in traces}


def _assessment(trace, name: str):
    found = [a for a in trace.info.assessments if a.name == name]
    return found[0] if found else None


def _root(trace):
    (root,) = [s for s in trace.data.spans if s.parent_id is None]
    return root


def _calls(trace) -> list:
    return sorted((s for s in trace.data.spans if s.parent_id is not None), key=lambda s: s.start_time_ns)


# ------------------------------------------------------------------------------- live, through the run core


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    """One temporary tracking store for the tests below (each test its own MLflow runs): creating one takes seconds."""
    return tmp_path_factory.mktemp("store")


@pytest.fixture
def tracked(store_dir, tmp_path, monkeypatch) -> Path:
    """MLflow pointed at the module's store (experiment ``live``), the test in its own directory; the store's."""
    monkeypatch.chdir(tmp_path)
    setup_tracking(_uri(store_dir), "live")
    return store_dir / "mlruns"


@pytest.fixture
def live(tracked, tmp_path):
    """``live(lm, name, ...)`` streams a method's items through the run core into a new MLflow run (its results store
    shared by every run of the test) and returns (result, run id); ``live.run_ids`` lists the runs started, each as
    soon as it starts."""
    run_ids: list[str] = []

    def run(lm, name, *, method=None, first=2, judge=None):
        method = method or MethodConfig("for", options={"rounds": 1})
        data = DatasetConfig("gsm8k", "sample", first=first)
        spec = ExperimentSpec(lm=lm, datasets=[data], methods=[method], experiment="live", cache=False, judge=judge)
        prepared = prepare_run(spec, data, method)
        run_ids.append(start_run(name, "live"))
        store = ResultStore(tmp_path / "items.jsonl")
        sink = MlflowSink(prepared, run_ids[-1])
        with Evaluation(prepared, store=store, sinks=[sink], origin=run_ids[-1], progress=False) as ev:
            ev.feed(prepared.examples)
        return ev.result, run_ids[-1]

    run.run_ids = run_ids  # type: ignore[attr-defined]
    return run


def test_each_lm_call_is_a_span_with_its_own_start_and_end(live):
    lm = ScriptedLM(responder, delay=DELAY)
    result, run_id = live(lm, "first")
    traces = _by_item(_traces_of(run_id))
    assert set(traces) == {i.id for i in result.items} and len(traces) == 2
    for item in result.items:
        trace = traces[item.id]
        root, calls = _root(trace), _calls(trace)
        assert [s.name for s in calls] == FOR_SPANS
        for span in calls:
            assert (span.end_time_ns - span.start_time_ns) / 1e9 >= DELAY  # covers its call's sleep
            assert span.span_type == "CHAT_MODEL" and span.status.status_code == "OK"
            assert span.attributes["dspy_for.model"] == "scripted" and span.attributes["dspy_for.ok"] is True
            assert span.attributes["mlflow.chat.tokenUsage"]["output_tokens"] > 0
        for a, b in itertools.pairwise(calls):
            assert a.end_time_ns <= b.start_time_ns  # siblings do not overlap
        assert root.start_time_ns <= calls[0].start_time_ns and calls[-1].end_time_ns <= root.end_time_ns
        # the root is the item as measured: its recorded start, its wall time; nothing shared out
        assert root.start_time_ns == int(item.started_at * 1e9)
        assert (root.end_time_ns - root.start_time_ns) / 1e9 == pytest.approx(item.wall_time, abs=0.01)
        assert trace.info.request_time == root.start_time_ns // 1_000_000
        assert trace.info.execution_duration == (root.end_time_ns - root.start_time_ns) // 1_000_000
        assert "dspy_for.span_times" not in root.attributes and root.attributes["dspy_for.reused"] is False
        assert trace.info.trace_metadata["dspy_for.reused"] == "false"
        # what each call sent and returned, and the turn it made
        debater = calls[1]
        assert "You are the Debater" in debater.inputs["messages"][0]["content"]
        assert "How did you get 27?" in debater.outputs[0]
        assert debater.attributes["dspy_for.parsed"]["questions"] == ["How did you get 27?"]
        assert debater.attributes["dspy_for.turn"] == "questions" and debater.attributes["dspy_for.round"] == 1
        total = sum(s.attributes["mlflow.chat.tokenUsage"]["total_tokens"] for s in calls)
        assert total == trace.info.token_usage["total_tokens"] == item.usage["total"]["tokens"] > 0
    first, second = sorted(traces.values(), key=lambda t: t.info.request_time)
    assert _root(first).end_time_ns <= _root(second).start_time_ns  # one item after the other


def prorefine_responder(messages, max_tokens):
    """ProRefine's roles, told apart by their instructions; the task's answer is longer than a step's cap."""
    sys_text = system_text(messages)
    if "PARTIAL output" in sys_text:
        return {"is_correct": "False", "feedback": "Check each multiplication."}
    if "You improve a prompt" in sys_text:
        return {"improved_prompt": "Solve the problem step by step and double-check."}
    if "You check a model's answer" in sys_text:
        return {"correct": "False"}
    return {"reasoning": "3 * 12 = 36; 36 - 9 = 27 " + "w " * 40, "answer": "27"}


def test_prorefine_calls_are_named_after_their_steps(live):
    method = MethodConfig("prorefine", options={"k": 5, "n": 2, "verifier": "llm"})
    _, run_id = live(ScriptedLM(prorefine_responder, delay=0.05), "prorefine", method=method, first=1)
    (trace,) = _traces_of(run_id)
    calls = _calls(trace)
    assert [s.name for s in calls] == [
        f"ProRefine.{name}"
        for name in (
            "task (initial answer)",
            "verifier",
            "task step 1",
            "feedback 1",
            "optimizer 1",
            "task step 2",
            "feedback 2",
            "optimizer 2",
            "task (final answer)",
        )
    ]
    assert {s.attributes["dspy_for.module"] for s in calls} == {"ProRefine"}
    assert [s.inputs.get("kwargs", {}).get("max_tokens") for s in calls if "step" in s.name] == [5, 10]
    assert calls[3].attributes["dspy_for.parsed"] == {"feedback": "Check each multiplication.", "is_correct": False}
    assert all(a.end_time_ns <= b.start_time_ns for a, b in itertools.pairwise(calls))
    assert all((s.end_time_ns - s.start_time_ns) / 1e9 >= 0.05 for s in calls)


def test_a_trace_is_written_as_its_item_lands(live):
    """While the second item runs, the first item's trace is in the store (written by the sink's writer thread
    moments after the item landed, without holding up the items)."""
    seen: list[int] = []

    def watching(messages, max_tokens):
        if FAIL_ON in user_text(messages) and not seen:  # the second item's first call
            deadline = time.monotonic() + 10
            while not _traces_of(live.run_ids[-1]) and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.append(len(_traces_of(live.run_ids[-1])))
        return responder(messages, max_tokens)

    _, run_id = live(ScriptedLM(watching), "live")
    assert seen == [1] and len(_traces_of(run_id)) == 2


@pytest.mark.parametrize("lm_kind", ["scripted", "server"])
def test_a_record_is_made_into_its_line_once_for_the_store_and_its_trace(live, tmp_path, monkeypatch, lm_kind):
    """Each landed record is turned into its masked JSON line once; the results store writes that line and the trace
    is built from the very same text (a ScriptedLM, and a plain ``dspy.LM`` against the test server)."""
    import dspy

    made: list[str] = []
    real_line = ItemResult.to_json
    monkeypatch.setattr(ItemResult, "to_json", lambda self: made.append(self.id) or real_line(self))
    handed: list[dict] = []
    real_payload = tracing.item_payload
    monkeypatch.setattr(
        tracing, "item_payload", lambda landed, method: handed.append(real_payload(landed, method)) or handed[-1]
    )
    if lm_kind == "scripted":
        result, run_id = live(ScriptedLM(responder), "once")
        models = {"scripted"}
    else:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        with OpenAICompatibleServer(responder) as server:
            result, run_id = live(dspy.LM("openai/test-model", api_base=server.base_url, cache=False), "once")
            models = {r["model"] for r in server.requests}
        assert models == {"test-model"}
    assert sorted(made) == sorted(i.id for i in result.items)  # once per record, for every sink
    stored = (tmp_path / "items.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(isinstance(p["item"], str) for p in handed)
    assert sorted(p["item"] for p in handed) == sorted(stored)  # the trace's record is the stored line itself
    traces = _by_item(_traces_of(run_id))
    assert set(traces) == {i.id for i in result.items}
    for item in result.items:
        assert json.loads(traces[item.id].info.request_preview) == {"question": item.question}


def test_a_reused_item_says_so_points_to_its_origin_and_has_no_call_spans(live):
    lm = ScriptedLM(responder)
    _, first_id = live(lm, "first")
    calls = len(lm.calls)
    again, second_id = live(lm, "second")
    assert len(lm.calls) == calls  # every item reused from the results store
    originals = _by_item(_traces_of(first_id))
    for item in again.items:
        trace = _by_item(_traces_of(second_id))[item.id]
        root = _root(trace)
        assert _calls(trace) == []  # no LM call in this run
        assert trace.info.trace_metadata["dspy_for.reused"] == "true" and trace.info.tags["dspy_for.reused"] == "true"
        assert trace.info.trace_metadata["dspy_for.reused_from"] == first_id == item.origin
        assert trace.info.tags["dspy_for.reused_from"] == first_id
        assert root.attributes["dspy_for.reused"] is True and root.attributes["dspy_for.reused_from"] == first_id
        # only measured times: the run that produced it, as stored
        original = _root(originals[item.id])
        assert (root.start_time_ns, root.end_time_ns) == (original.start_time_ns, original.end_time_ns)
        assert trace.info.execution_duration == originals[item.id].info.execution_duration
        assert _assessment(trace, tracing.CORRECT) is not None and _assessment(trace, tracing.EXPECTED) is not None


def test_a_record_stored_without_its_start_has_no_invented_time(tracked):
    run_id = start_run("old", "live")
    old = _item(wall_time=3.25, origin=None)  # written before started_at was kept
    ctx = tracing.trace_context(_run(), run_id)
    before = time.time()
    tracing.log_item_trace(ctx, Landed(old, (), reused=True, changed=False))
    (trace,) = _traces_of(run_id)
    assert trace.data.spans == [] and trace.info.execution_duration is None
    assert before * 1000 - 1 <= trace.info.request_time <= time.time() * 1000 + 1  # when this run reused it
    timing = trace.info.trace_metadata["dspy_for.timing"]
    assert "not recorded" in timing and "3.25 s" in timing
    assert trace.info.trace_metadata["dspy_for.reused"] == "true" and "dspy_for.reused_from" not in trace.info.tags
    assert json.loads(trace.info.request_preview) == {"question": "q?"} and _assessment(trace, tracing.CORRECT)


def test_a_judges_calls_come_after_the_methods_inside_the_item(live):
    lm = ScriptedLM(responder, delay=0.05)
    result, run_id = live(lm, "judged", method=MethodConfig("cot"), first=1, judge=JudgeConfig(lm=lm))
    (item,) = result.items
    (trace,) = _traces_of(run_id)
    calls, root = _calls(trace), _root(trace)
    assert [s.name for s in calls] == ["task", "judge"]
    assert calls[0].end_time_ns <= calls[1].start_time_ns and calls[1].end_time_ns <= root.end_time_ns
    assert root.end_time_ns > root.start_time_ns + int(item.wall_time * 1e9)  # widened to the judge's own end
    assert trace.info.token_usage["total_tokens"] == item.usage["total"]["tokens"]  # the method's, as before
    assert _assessment(trace, "judged_correct").value is True


def test_a_failed_call_and_item_are_errors_on_the_trace(live):
    def failing(messages, max_tokens):
        if FAIL_ON in user_text(messages):
            raise ConnectionError("connection refused")
        return responder(messages, max_tokens)

    result, run_id = live(ScriptedLM(failing), "failing", method=MethodConfig("cot"))
    (failed,) = [i for i in result.items if i.failed]
    trace = _by_item(_traces_of(run_id))[failed.id]
    assert trace.info.state.value == "ERROR" and _assessment(trace, tracing.CORRECT) is None
    calls = _calls(trace)
    assert calls and all(s.status.status_code == "ERROR" and s.attributes["dspy_for.ok"] is False for s in calls)
    assert any("connection refused" in json.dumps(e.attributes) for s in calls for e in s.events)
    assert _root(trace).status.status_code == "ERROR"


def test_no_secret_an_lm_returns_reaches_the_store(live, tracked, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    result, run_id = live(ScriptedLM(leaky), "leaky")
    assert all(CANARY in json.dumps(i.trajectory) for i in result.items)  # the LM echoed the key
    mlflow.flush_trace_async_logging()
    for trace in _traces_of(run_id):
        text = json.dumps(trace.to_dict(), default=str)
        assert CANARY not in text and "my key is ***" in text
        assert any("Is *** your key?" in json.dumps(s.outputs) for s in _calls(trace))  # the call's own output
    leaks = [p.name for p in tracked.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert not leaks, f"the key reached {leaks}"


def test_a_failing_store_call_is_only_a_warning(live, monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise OSError(f"disk full {CANARY}")

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setitem(trace_writers._WRITER, "writer", trace_writers.TraceWriter("thread"))  # (patched here)
    monkeypatch.setattr(mlflow_batch, "write_traces", boom)
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        result, run_id = live(ScriptedLM(responder), "refused")
    assert len(result.items) == 2 and not any(i.failed for i in result.items)
    warnings = [r.getMessage() for r in caplog.records if r.name == "dspy_for.tracing"]
    assert len(warnings) == 2 and all("disk full ***" in w and CANARY not in w for w in warnings)
    from mlflow.tracking import MlflowClient

    run = MlflowClient(mlflow.get_tracking_uri()).get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["n"] == 2.0


# ------------------------------------------------------------------------------------------ compare, end to end


def test_compare_logs_one_trace_per_item_with_call_spans_assessments_and_the_dataset(scripted, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = _uri(tmp_path)
    result = compare(_write(tmp_path), tracking_uri=uri)
    children = _children(uri, result)
    assert set(children) == {"cot", "for"}
    client = MlflowClient(uri)
    for label, run in children.items():
        traces = _traces(uri, run)
        assert len(traces) == 3
        items = result.results["gsm8k"][label].items
        by_item = _by_item(traces)
        assert set(by_item) == {i.id for i in items}
        for item in items:
            trace = by_item[item.id]
            assert trace.info.trace_metadata["mlflow.sourceRun"] == run.info.run_id
            assert trace.info.state.value == "OK"
            assert json.loads(trace.info.request_preview) == {"question": item.question}
            correct = _assessment(trace, tracing.CORRECT)
            assert correct is not None and correct.value is (item.score == 1.0)
            assert _assessment(trace, tracing.EXPECTED).value == item.gold
            tokens = item.usage["total"]["tokens"] + item.usage["total"]["cached_tokens"]
            assert trace.info.token_usage["total_tokens"] == tokens > 0
            assert _assessment(trace, tracing.TOKENS).value == tokens  # sortable in the UI
            names = [s.name for s in _calls(trace)]
            assert names == (FOR_SPANS if label == "for" else ["task"])
            served = sum(s.attributes["mlflow.chat.tokenUsage"]["total_tokens"] for s in _calls(trace))
            assert served == tokens  # per-call usage adds up to the item's
        assert sum(_assessment(t, tracing.CORRECT).value for t in traces) == 1  # only the first answer is 27
        mean_tokens = sum(_assessment(t, tracing.TOKENS).value for t in traces) / 3
        assert mean_tokens == pytest.approx(run.data.metrics["tokens_per_item"])
        inputs = client.get_run(run.info.run_id).inputs.dataset_inputs
        assert len(inputs) == 1
        ds = inputs[0]
        assert ds.dataset.name == "gsm8k/sample" and ds.dataset.digest == run.data.params["data_hash"]
        assert json.loads(ds.dataset.source)["source"] == "bundled sample"
        assert json.loads(ds.dataset.profile)["num_rows"] == 3
        assert {t.key: t.value for t in ds.tags}["mlflow.data.context"] == "evaluation"


def test_compare_traces_reused_records_in_the_new_run(scripted, tmp_path):
    uri = _uri(tmp_path)
    first = compare(_write(tmp_path), tracking_uri=uri)
    calls = len(scripted.calls)
    second = compare(_write(tmp_path), tracking_uri=uri)
    assert len(scripted.calls) == calls  # every record reused
    origins = {label: run.info.run_id for label, run in _children(uri, first).items()}
    for label, run in _children(uri, second).items():
        traces = _traces(uri, run)
        assert len(traces) == 3
        assert all(_assessment(t, tracing.CORRECT) is not None for t in traces)
        assert {t.info.trace_metadata["dspy_for.reused_from"] for t in traces} == {origins[label]}
        assert all(_calls(t) == [] for t in traces)


@pytest.fixture
def autolog_off():
    """Autolog and its span masking are process-wide: turned off again after the test."""
    yield
    from dspy_for.experiments.tracking.masking import mask_span

    mlflow.dspy.autolog(disable=True)
    compat.remove_span_processor(mask_span)


def test_no_secret_reaches_the_store_with_autolog(monkeypatch, scripted, tmp_path, autolog_off):
    from mlflow.tracking import MlflowClient

    from dspy_for.experiments.tracking.masking import mask_span

    def leaky_or_failing(messages, max_tokens):
        if FAIL_ON in "".join(str(m.get("content", "")) for m in messages):  # the key in an error: span events
            raise ConnectionError(f"connection refused for key {CANARY}")
        return leaky(messages, max_tokens)

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    scripted.responder = leaky_or_failing
    uri = _uri(tmp_path)
    compare(_write(tmp_path), tracking_uri=uri, autolog=True)
    compare(_write(tmp_path, CONFIG.replace("first = 3", "first = 4")), tracking_uri=uri, autolog=True)
    mlflow.flush_trace_async_logging()
    # the key is nowhere in the store: the database (read as bytes), its journal, artifacts, results files
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files)
    leaks = [str(p.relative_to(tmp_path)) for p in files if CANARY.encode() in p.read_bytes()]
    assert not leaks, f"the key reached {leaks}"
    # ... though DSPy's own traces (autolog's, not ours) were written, with the echoed key masked
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("test")
    traces = client.search_traces(locations=[exp.experiment_id], max_results=1000)
    texts = [json.dumps(t.to_dict(), default=str) for t in traces if "dspy_for.item_id" not in t.info.trace_metadata]
    assert any("my key is ***" in text for text in texts)
    assert any("connection refused for key ***" in text for text in texts)
    assert compat.span_processors().count(mask_span) == 1  # installed once across runs


def test_mask_span_masks_inputs_outputs_attributes_events_and_status(monkeypatch):
    from dspy_for.experiments.tracking.masking import mask_span

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    span = compat.start_live_span("call", start_ns=1, span_type="LLM")
    span.set_inputs({"messages": [{"role": "user", "content": f"key {CANARY}"}]})
    span.set_attributes({"lm.kwargs": {"api_base": "x", "note": CANARY}, "n": 3})
    span.record_exception(f"refused for {CANARY}")
    with mlflow.tracing.configure(span_processors=[mask_span]):  # as autolog's spans: masked as they end
        compat.end_live_span(span, outputs={"answer": f"it is {CANARY}"}, status=None, end_ns=2)
    done = compat.finished_span(span)
    assert CANARY not in json.dumps([done.to_dict(), done.status.description], default=str)
    assert done.inputs == {"messages": [{"role": "user", "content": "key ***"}]}
    assert done.outputs == {"answer": "it is ***"}
    assert done.attributes["lm.kwargs"] == {"api_base": "x", "note": "***"} and done.attributes["n"] == 3
    assert done.events[0].attributes["exception.message"] == "refused for ***"
    assert done.status.status_code == "ERROR" and done.status.description == "Exception: refused for ***"


def test_a_tracing_failure_never_fails_the_comparison(monkeypatch, scripted, tmp_path, caplog):
    def boom(*args, **kwargs):
        raise RuntimeError(f"tracing exploded {CANARY}")

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setattr(tracing, "item_payload", boom)
    monkeypatch.setattr(trace_runs, "log_dataset_input", boom)
    uri = _uri(tmp_path)
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        result = compare(_write(tmp_path), tracking_uri=uri)
    assert result.ok and set(result.results["gsm8k"]) == {"cot", "for"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "dspy_for.tracing"]
    assert any("trace of item" in w and "tracing exploded ***" in w for w in warnings)
    assert any("dataset" in w for w in warnings)
    assert not any(CANARY in w for w in warnings)
    for run in _children(uri, result).values():
        assert run.info.status == "FINISHED" and run.data.metrics["n"] == 3.0


SWEEP = """
method = "for"
study = "traced"
lm = "openai/fake"
n_trials = 2
chunk_size = 3
test_split = "sample"
[dataset]
name = "gsm8k"
split = "sample"
first = 3
[search.rounds]
type = "int"
low = 0
high = 1
"""


def test_the_sweeps_final_test_is_traced_on_its_parent_run(scripted, tmp_path):
    from mlflow.tracking import MlflowClient

    from dspy_for.experiments.sweeps.sweep import sweep

    uri = _uri(tmp_path)
    result = sweep(_write(tmp_path, SWEEP), tracking_uri=uri, final_test=True)
    assert result.final_test is not None and result.final_test.summary.n == 45
    client = MlflowClient(uri)
    parent = client.get_run(result.parent_run_id)
    traces = _traces(uri, parent)
    assert len(traces) == 45 and {t.info.trace_metadata["dspy_for.label"] for t in traces} == {"final-test"}
    assert sum(_assessment(t, tracing.CORRECT).value for t in traces) == round(
        (result.final_test.summary.accuracy or 0.0) * 45
    )
    (ds,) = parent.inputs.dataset_inputs
    assert ds.dataset.name == "gsm8k/sample" and {t.key: t.value for t in ds.tags}["mlflow.data.context"] == "test"


# ------------------------------------------------------------------------------------ naming the call spans


def _item(trajectory=None, usage=None, **kw) -> ItemResult:
    base = {
        "id": "d/s/0",
        "question": "q?",
        "gold": 4,
        "prediction": {"reasoning": "r", "answer": 4},
        "score": 1.0,
        "usage": usage or {"total": {"calls": 1, "prompt_tokens": 10, "completion_tokens": 5}},
        "trajectory": trajectory,
    }
    return ItemResult(**{**base, **kw})


def _run() -> SimpleNamespace:
    return SimpleNamespace(
        method=SimpleNamespace(label="for", name="for"), dataset=SimpleNamespace(name="d", split="s"), metric=len
    )


def _call(role: str, at: float = 0.0, *, max_tokens: int | None = None, ok: bool = True) -> CallRecord:
    sent = {
        "messages": [{"role": "user", "content": "u"}],
        **({"kwargs": {"max_tokens": max_tokens}} if max_tokens else {}),
    }
    return CallRecord(
        role, "m", 10, 2, False, "stop" if ok else None, 0.1, ok=ok, error=None if ok else "Timeout",
        started_at=at, ended_at=at + 0.1, content=CallContent(sent, ["out"] if ok else None, None if ok else "slow"),
    )  # fmt: skip


def _usage(n: int) -> dict:
    return {"total": {"calls": n, "prompt_tokens": 10 * n, "completion_tokens": 2 * n}}


STEPS = [
    {
        "step": i,
        "prompt": f"p{i}",
        "max_tokens": 10 * i,
        "output": f"o{i}",
        "finish_reason": "length",
        "completion_tokens": 10 * i,
        "eos": i == 2,
        "feedback": f"f{i}",
        "is_correct": False,
        "new_prompt": f"p{i + 1}" if i == 1 else f"p{i}",
        "rejected_prompt": None if i == 1 else "bad 42",
        "rejected_reason": None if i == 1 else "problem_numbers",
    }
    for i in (1, 2)
]


def test_prorefine_calls_are_named_by_step_when_they_line_up():
    roles = ["task", "verifier", "task", "feedback", "optimizer", "task", "feedback", "optimizer", "task"]
    tokens = {2: 10, 5: 20}  # the task steps' calls ask for i·k tokens
    calls = [_call(r, i, max_tokens=tokens.get(i)) for i, r in enumerate(roles)]
    spans = call_spans(_item(STEPS, usage=_usage(len(calls))), calls)
    assert [s.name for s in spans] == [
        "task (initial answer)",
        "verifier",
        "task step 1",
        "feedback 1",
        "optimizer 1",
        "task step 2",
        "feedback 2",
        "optimizer 2",
        "task (final answer)",
    ]
    by = {s.name: s.attributes for s in spans}
    assert by["verifier"]["dspy_for.parsed"] == {"initial_answer_judged_correct": False}
    assert by["feedback 1"]["dspy_for.parsed"] == {"feedback": "f1", "is_correct": False}
    assert by["optimizer 2"]["dspy_for.parsed"] == {
        "improved_prompt": "bad 42",
        "accepted": False,
        "rejected_reason": "problem_numbers",
    }
    assert by["task step 2"]["dspy_for.step"] == 2 and by["task step 2"]["dspy_for.parsed"]["eos"] is True


def test_prorefine_calls_that_do_not_line_up_are_named_by_role():
    # an adapter retried the first feedback call: one call more than Algorithm 1 makes for these steps
    roles = ["task", "feedback", "feedback", "optimizer", "task", "feedback", "optimizer"]
    spans = call_spans(_item(STEPS, usage=_usage(len(roles))), [_call(r, i) for i, r in enumerate(roles)])
    assert [s.name for s in spans] == [
        "task call 1",
        "feedback call 1",
        "feedback call 2",
        "optimizer call 1",
        "task call 2",
        "feedback call 3",
        "optimizer call 2",
    ]
    assert all("dspy_for.parsed" not in s.attributes for s in spans)
    # the right roles, but a step call that asked for other tokens than its step: not named by step either
    roles = ["task", "feedback", "optimizer", "task", "feedback", "optimizer"]
    calls = [_call(r, i, max_tokens={0: 10, 3: 99}.get(i)) for i, r in enumerate(roles)]
    assert "task step 1" not in [s.name for s in call_spans(_item(STEPS, usage=_usage(6)), calls)]


FOR_TURNS = [
    {"role": "defender", "type": "answer", "round": 0, "fields": {"reasoning": "r", "answer": 3}},
    {"role": "debater", "type": "questions", "round": 1, "fields": {"questions": ["Why 3?"], "attempt": 0}},
    {"role": "debater", "type": "questions", "round": 1, "fields": {"questions": ["Why?"], "attempt": 1}},
    {
        "role": "defender",
        "type": "revision",
        "round": 1,
        "fields": {"responses": [], "error_found": False, "parse_error": "bad", "kept_previous": False},
    },
    {"role": "host", "type": "synthesis", "round": 1, "fields": {"reasoning": "r", "answer": 3}},
]


def test_for_calls_are_named_by_turn_and_then_the_judges():
    calls = [_call(t["role"], i) for i, t in enumerate(FOR_TURNS)] + [_call("judge", 9)]
    spans = call_spans(_item(FOR_TURNS, usage=_usage(5)), calls)
    assert [s.name for s in spans] == [
        "defender A0",
        "debater r1",
        "debater r1 (re-ask)",
        "defender r1",
        "host",
        "judge",
    ]
    assert spans[3].attributes["dspy_for.parse_error"] == "bad" and spans[2].attributes["dspy_for.parsed"]["attempt"]
    assert spans[0].start_ns == 0 and spans[-1].end_ns == int(9.1 * 1e9)  # the calls' own times


def test_for_calls_that_do_not_line_up_are_named_by_role():
    roles = ["defender", "defender", "debater", "debater", "defender", "host"]  # a retried first answer
    spans = call_spans(_item(FOR_TURNS, usage=_usage(6)), [_call(r, i) for i, r in enumerate(roles)])
    assert [s.name for s in spans] == [
        "defender call 1",
        "defender call 2",
        "debater call 1",
        "debater call 2",
        "defender call 3",
        "host",
    ]


def test_a_failed_call_span_carries_its_error_and_a_cache_hit_is_not_priced():
    failed = call_spans(_item(usage=_usage(1)), [_call("task", ok=False)])[0]
    assert failed.error == "Timeout: slow" and failed.attributes["dspy_for.ok"] is False and failed.outputs is None
    hit = CallRecord("task", "openai/gpt-4.1-mini", 10, 2, True, "stop", 0.0, started_at=1.0, ended_at=1.0)
    (span,) = call_spans(_item(usage=_usage(1)), [hit])
    assert "mlflow.llm.model" not in span.attributes and span.attributes["dspy_for.model"] == "openai/gpt-4.1-mini"
    assert span.attributes["dspy_for.cache_hit"] is True and span.inputs is None  # its content was not kept
    assert span.attributes["dspy_for.content"].startswith("not kept")


def test_a_priced_calls_span_carries_the_runs_own_price_and_the_trace_sums_it(tracked):
    priced = replace(_call("task", 1_800_000_000.0), model="openai/test-model", cost=0.0125)
    unpriced = replace(_call("task", 1_800_000_000.5), model="openai/test-model")  # nobody priced it: no cost
    spans = call_spans(_item(usage=_usage(2)), [priced, unpriced])
    assert spans[0].attributes["mlflow.llm.cost"] == {"total_cost": 0.0125}
    assert spans[0].attributes["mlflow.llm.model"] == "openai/test-model"
    # nobody priced it: no cost, and no model MLflow would look a price up for
    assert "mlflow.llm.cost" not in spans[1].attributes and "mlflow.llm.model" not in spans[1].attributes
    assert spans[1].attributes["dspy_for.model"] == "openai/test-model"
    run_id = start_run("priced", "live")
    ctx = tracing.trace_context(_run(), run_id)
    item = _item(usage=_usage(1), id="d/s/priced", started_at=1_800_000_000.0, wall_time=0.2)
    tracing.log_item_trace(ctx, Landed(item, (priced,), reused=False, changed=True))
    (trace,) = _traces_of(run_id)
    (call,) = _calls(trace)
    assert call.attributes["mlflow.llm.cost"]["total_cost"] == pytest.approx(0.0125)  # ours, not a price looked up
    assert json.loads(trace.info.trace_metadata["mlflow.trace.cost"])["total_cost"] == pytest.approx(0.0125)
    unpriced_id = start_run("unpriced", "live")
    ctx = tracing.trace_context(_run(), unpriced_id)
    tracing.log_item_trace(ctx, Landed(replace(item, id="d/s/unpriced"), (unpriced,), reused=False, changed=True))
    (trace,) = _traces_of(unpriced_id)
    assert "mlflow.trace.cost" not in trace.info.trace_metadata  # absent, never $0


def test_a_sqlite_store_writes_ahead_and_mlflow_still_reads_it(tracked, store_dir):
    db = store_dir / "mlruns" / "mlflow.db"
    with closing(sqlite3.connect(db)) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # kept in the file
    run_id = start_run("wal", "live")
    assert mlflow.get_run(run_id).info.run_name == "wal"


def test_an_unparsed_item_is_incorrect_not_failed():
    ctx = tracing.TraceContext("cot", "cot", "d/s", "numeric_match", None, None)
    item = _item(score=0.0, unparsed=True, prediction={})
    assert tracing.outcome(item) == "unparsed"
    (gold, correct) = tracing.outcome_assessments(ctx, item)
    assert gold.name == tracing.EXPECTED and correct.value is False and "parsed" in correct.rationale


def test_traces_are_written_in_a_fraction_of_a_second_each(tracked):
    run_id = start_run("speed", "live")
    ctx = tracing.trace_context(_run(), run_id)
    turns = [dict(t, fields={**t["fields"], "questions": ["q"] * 3}) for t in FOR_TURNS]

    def landed(i: int) -> Landed:
        t0 = 1_800_000_000.0 + 10 * i
        calls = tuple(_call(t["role"], t0 + j * 0.2) for j, t in enumerate(turns))
        item = _item(turns, usage=_usage(5), id=f"d/s/{i}", question=f"question {i} " * 20, started_at=t0, wall_time=1)
        return Landed(item, calls, reused=False, changed=True)

    items = [landed(i) for i in range(40)]
    tracing.log_item_trace(ctx, items[0])  # the first one pays for MLflow's imports
    start = time.perf_counter()
    for one in items[1:]:
        tracing.log_item_trace(ctx, one)
    elapsed = time.perf_counter() - start
    found = _traces_of(run_id)
    assert len(found) == 40 and all(len(t.data.spans) == 6 for t in found)
    assert elapsed < 20, f"39 traces took {elapsed:.1f}s"
