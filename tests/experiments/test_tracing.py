"""Per-item MLflow traces and MLflow datasets of ``compare`` (issue #19), with scripted LMs into a temporary store."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dspy_for.experiments import trace_datasets, tracing
from dspy_for.experiments.comparison import compare
from dspy_for.experiments.records import ItemResult, MethodResult
from dspy_for.testing import system_text

CANARY = "sk-canary-DO-NOT-LEAK-0123456789abcdef"
FAIL_ON = "bakery"  # the second sample item: its LM calls fail


def responder(messages, max_tokens):
    sys_text = system_text(messages)
    if "You are the Debater" in sys_text:
        return {"questions": ["How did you get 27?"]}
    if "asked questions about your previous answer" in sys_text:
        return {
            "responses": ["I re-checked."],
            "error_found": "False",
            "error": "none",
            "reasoning": "36 - 9 = 27",
            "answer": "27",
        }
    return {"reasoning": "3 * 12 = 36; 36 - 9 = 27", "answer": "27"}


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

FOR_SPANS = ["defender A0", "debater r1", "defender r1", "host"]


def leaky(messages, max_tokens):
    """The scripted answers, echoing the key (as an endpoint may echo one in an error body)."""
    out = responder(messages, max_tokens)
    if "questions" in out:
        return {"questions": [f"Is {CANARY} your key?"]}
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


def _traces(uri: str, run) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return list(
        client.search_traces(
            locations=[run.info.experiment_id],
            max_results=1000,
            filter_string=f"metadata.`mlflow.sourceRun` = '{run.info.run_id}'",
        )
    )


def _by_item(traces: list) -> dict[str, object]:
    return {t.info.trace_metadata["dspy_for.item_id"]: t for t in traces}


def _assessment(trace, name: str):
    found = [a for a in trace.info.assessments if a.name == name]
    return found[0] if found else None


# ------------------------------------------------------------------------------------------ end to end


def test_one_trace_per_item_with_role_spans_assessments_and_the_dataset(scripted, tmp_path):
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
            names = [s.name for s in trace.data.spans if s.parent_id is not None]
            if label == "for":
                assert names == FOR_SPANS
                spans = {s.name: s for s in trace.data.spans}
                assert spans["debater r1"].outputs["questions"] == ["How did you get 27?"]
                assert spans["defender r1"].outputs["responses"] == ["I re-checked."]
                assert spans["defender r1"].inputs == {"questions": ["How did you get 27?"]}
                assert spans["defender A0"].attributes["mlflow.chat.tokenUsage"]["output_tokens"] > 0
                turns = sum(
                    s.attributes["mlflow.chat.tokenUsage"]["total_tokens"]
                    for s in trace.data.spans
                    if s.parent_id is not None
                )
                assert turns == tokens  # per-turn usage adds up to the item's
            else:
                assert names == ["task"]
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


def test_reused_records_are_traced_in_the_new_run(scripted, tmp_path):
    uri = _uri(tmp_path)
    compare(_write(tmp_path), tracking_uri=uri)
    calls = len(scripted.calls)
    second = compare(_write(tmp_path), tracking_uri=uri)
    assert len(scripted.calls) == calls  # every record reused
    for run in _children(uri, second).values():
        traces = _traces(uri, run)
        assert len(traces) == 3
        assert all(_assessment(t, tracing.CORRECT) is not None for t in traces)


def test_a_failed_item_has_an_error_trace_and_no_correct_assessment(monkeypatch, scripted, tmp_path):
    def failing(messages, max_tokens):
        if FAIL_ON in "".join(str(m.get("content", "")) for m in messages):
            raise ConnectionError("connection refused")
        return responder(messages, max_tokens)

    scripted.responder = failing
    uri = _uri(tmp_path)
    result = compare(_write(tmp_path), tracking_uri=uri)
    for label, run in _children(uri, result).items():
        failed = [i for i in result.results["gsm8k"][label].items if i.failed]
        assert len(failed) == 1
        trace = _by_item(_traces(uri, run))[failed[0].id]
        assert trace.info.state.value == "ERROR"
        assert trace.info.tags["dspy_for.outcome"] == "failed"
        assert _assessment(trace, tracing.CORRECT) is None  # an error is not a score
        assert _assessment(trace, tracing.TOKENS) is None  # nor a cost of the accuracy
        assert _assessment(trace, tracing.EXPECTED) is not None
        root = next(s for s in trace.data.spans if s.parent_id is None)
        assert root.status.status_code == "ERROR"
        assert any("connection refused" in json.dumps(e.attributes) for e in root.events)


def test_no_secret_reaches_a_trace(monkeypatch, scripted, tmp_path):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    scripted.responder = leaky
    uri = _uri(tmp_path)
    result = compare(_write(tmp_path), tracking_uri=uri)
    # the model echoed the key into the records it returned: the traces must not carry it
    echoed = [json.dumps([i.prediction, i.trajectory]) for r in result.results["gsm8k"].values() for i in r.items]
    assert len(echoed) == 6 and all(CANARY in text for text in echoed)
    client = MlflowClient(uri)
    for run in _children(uri, result).values():
        traces = _traces(uri, run)
        assert len(traces) == 3
        for t in traces:
            text = json.dumps(t.to_dict(), default=str)
            assert CANARY not in text and "my key is ***" in text
            for s in t.data.spans:
                assert CANARY not in json.dumps(
                    [s.name, s.inputs, s.outputs, s.attributes, [e.attributes for e in s.events]], default=str
                )
            assert CANARY not in json.dumps([a.to_dictionary() for a in t.info.assessments], default=str)
        ds = client.get_run(run.info.run_id).inputs.dataset_inputs[0].dataset
        assert CANARY not in json.dumps([ds.name, ds.source, ds.schema, ds.profile])


@pytest.fixture
def autolog_off():
    """Autolog and its span masking are process-wide: turned off again after the test."""
    yield
    import mlflow

    from dspy_for.compat import mlflow as compat
    from dspy_for.experiments.trace_masking import mask_span

    mlflow.dspy.autolog(disable=True)
    compat.remove_span_processor(mask_span)


def test_no_secret_reaches_the_store_with_autolog(monkeypatch, scripted, tmp_path, autolog_off):
    import mlflow
    from mlflow.tracking import MlflowClient

    from dspy_for.compat import mlflow as compat
    from dspy_for.experiments.trace_masking import mask_span

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
    import mlflow

    from dspy_for.compat import mlflow as compat
    from dspy_for.experiments.trace_masking import mask_span

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
    monkeypatch.setattr(tracing, "_build_trace", boom)
    monkeypatch.setattr(trace_datasets, "_log_dataset", boom)
    uri = _uri(tmp_path)
    with caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        result = compare(_write(tmp_path), tracking_uri=uri)
    assert result.ok and set(result.results["gsm8k"]) == {"cot", "for"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "dspy_for.tracing"]
    assert any("item traces" in w and "tracing exploded ***" in w for w in warnings)
    assert any("dataset" in w for w in warnings)
    assert not any(CANARY in w for w in warnings)
    for run in _children(uri, result).values():
        assert run.info.status == "FINISHED" and run.data.metrics["n"] == 3.0


def test_a_failing_store_is_a_warning(monkeypatch, tmp_path, caplog):
    import mlflow

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tracing._Writer, "write", boom)
    mlflow.set_tracking_uri(_uri(tmp_path))
    (tmp_path / "mlruns").mkdir()
    mlflow.set_experiment("failing")
    run = SimpleNamespace(
        method=SimpleNamespace(label="cot", name="cot"), dataset=SimpleNamespace(name="d", split="s"), metric=len
    )
    with mlflow.start_run(), caplog.at_level(logging.WARNING, logger="dspy_for.tracing"):
        assert tracing.log_item_traces(run, MethodResult(label="cot", items=[_item()])) == 0
    assert any("disk full" in r.getMessage() for r in caplog.records)


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

    from dspy_for.experiments.sweeps import sweep

    uri = _uri(tmp_path)
    result = sweep(_write(tmp_path, SWEEP), tracking_uri=uri, final_test=True)
    assert result.final_test is not None and result.final_test["n"] == 45
    client = MlflowClient(uri)
    parent = client.get_run(result.parent_run_id)
    traces = _traces(uri, parent)
    assert len(traces) == 45 and {t.info.trace_metadata["dspy_for.label"] for t in traces} == {"final-test"}
    assert sum(_assessment(t, tracing.CORRECT).value for t in traces) == round(result.final_test["accuracy"] * 45)
    (ds,) = parent.inputs.dataset_inputs
    assert ds.dataset.name == "gsm8k/sample" and {t.key: t.value for t in ds.tags}["mlflow.data.context"] == "test"


# ---------------------------------------------------------------------------------------- spans, speed


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


def test_prorefine_spans_are_named_by_step_with_parsed_fields():
    steps = [
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
    usage = {r: {"calls": 2, "completion_tokens": 8} for r in ("task", "feedback", "optimizer")}
    usage["verifier"] = {"calls": 1, "completion_tokens": 1}
    spans = tracing.item_spans(_item(steps, usage=usage, stats={"refined": 1.0}))
    assert [s.name for s in spans] == [
        "verifier",
        "task step 1",
        "feedback 1",
        "optimizer 1",
        "task step 2",
        "feedback 2",
        "optimizer 2",
    ]
    by = {s.name: s for s in spans}
    assert by["verifier"].outputs == {"initial_answer_judged_correct": False}
    assert by["feedback 1"].outputs == {"feedback": "f1", "is_correct": False}
    assert by["optimizer 1"].outputs == {"improved_prompt": "p2", "accepted": True, "rejected_reason": None}
    assert by["optimizer 2"].outputs == {
        "improved_prompt": "bad 42",
        "accepted": False,
        "rejected_reason": "problem_numbers",
    }
    assert by["task step 2"].outputs["eos"] is True and by["task step 2"].inputs["max_tokens"] == 20


def test_for_spans_name_a_reask_and_an_unreadable_turn():
    turns = [
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
    spans = tracing.item_spans(_item(turns))
    assert [s.name for s in spans] == ["defender A0", "debater r1", "debater r1 (re-ask)", "defender r1", "host"]
    assert spans[1].inputs == {"answer": 3} and spans[3].inputs == {"questions": ["Why?"]}
    assert spans[3].error == "bad" and spans[0].error is None


def test_an_unparsed_item_is_incorrect_not_failed():
    ctx = tracing.TraceContext("cot", "cot", "d/s", "numeric_match", None, None)
    item = _item(score=0.0, unparsed=True, prediction={})
    assert tracing.outcome(item) == "unparsed"
    (gold, correct) = tracing.outcome_assessments(ctx, item)
    assert gold.name == tracing.EXPECTED and correct.value is False and "parsed" in correct.rationale


def test_hundreds_of_traces_are_written_in_seconds(tmp_path):
    import mlflow

    turns = [
        {
            "role": r,
            "type": k,
            "round": n,
            "fields": {"answer": 1, "questions": ["q"] * 3, "responses": ["a"]},
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "cache_hit": False},
        }
        for r, k, n in (
            ("defender", "answer", 0),
            ("debater", "questions", 1),
            ("defender", "revision", 1),
            ("host", "synthesis", 1),
        )
    ]
    items = [_item(turns, id=f"d/s/{i}", question=f"question {i} " * 20) for i in range(100)]
    run = SimpleNamespace(
        method=SimpleNamespace(label="for", name="for"), dataset=SimpleNamespace(name="d", split="s"), metric=len
    )
    mlflow.set_tracking_uri(_uri(tmp_path))
    (tmp_path / "mlruns").mkdir()
    exp = mlflow.set_experiment("speed")
    with mlflow.start_run() as active:
        start = time.perf_counter()
        assert tracing.log_item_traces(run, MethodResult(label="for", items=items)) == 100
        elapsed = time.perf_counter() - start
    found = mlflow.search_traces(locations=[exp.experiment_id], run_id=active.info.run_id, return_type="list")
    assert len(found) == 100 and all(len(t.data.spans) == 5 for t in found)
    assert elapsed < 30, f"100 traces took {elapsed:.1f}s"
