"""Per-item MLflow traces, written live as each record lands, and MLflow datasets.

* :func:`log_dataset` (:mod:`~dspy_for.experiments.tracking.datasets`) logs the run's examples as an MLflow dataset
  input (``context="evaluation"``), named ``<dataset>/<split>`` with their content hash as its digest.
* :func:`trace_context` once per run, then :func:`log_item_trace` for every record as it lands (the run core's
  :class:`~dspy_for.experiments.tracking.sink.MlflowSink` calls them): one trace per item, linked to the run
  (``mlflow.sourceRun``), with the question as its request, the prediction as its response and the item's served
  tokens as its token usage. Its root span is the item — from its start to its end, measured — and inside it one
  span per LM call with the call's **own** start and end, what it sent and returned, model, tokens, cache hit,
  finish reason and outcome, named after its role and turn (:func:`~.spans.call_spans`: ``defender A0``,
  ``debater r1``, …; ``task step i``, …; else the role). A judge's calls come after the method's, inside the root.
  Each trace carries assessments (:mod:`~dspy_for.experiments.tracking.assessments`): the gold answer as the
  ``expected_response`` expectation and, for a scored item, the ``correct`` feedback from the dataset's metric,
  ``total_tokens`` and the judge's verdicts. A failed item's trace has state ERROR and the error, and no
  ``correct`` feedback (an error is not a score).

An item **reused** from the results store made no LM call in this run: its trace says so (``dspy_for.reused`` and,
when the record names it, ``dspy_for.reused_from`` = the MLflow run that produced it, as metadata, tag and root
attribute) and has no call spans. Its root span keeps the stored start and wall time of the run that produced it;
a record stored before starts were kept has no span at all and no duration (``execution_duration`` None), its
request time being when this run reused it (``dspy_for.timing`` says so). No time is ever shared out or invented.

A trace is made in two steps, so the second can run in another process: :func:`item_payload` (where the record
landed) names the item's LM calls (the method's registry entry knows its turns) and masks every text with
:func:`~dspy_for.secrets.redact` into plain data; :func:`build_trace` makes the trace (its info with the assessments,
and its spans) from that. Traces are stored many per store transaction (:func:`write_traces`, through
:mod:`dspy_for.compat.mlflow_batch`), not through MLflow's span exporter (a write per span and per assessment).
:func:`log_item_trace` raises on a failure: the sink turns it into a warning, so tracing never fails a comparison.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dspy_for.compat import mlflow as compat
from dspy_for.experiments.tracking.assessments import (
    CORRECT,
    DEFAULT_ASSESSORS,
    EXPECTED,
    SCORE,
    TOKENS,
    Assessor,
    TraceContext,
    masked,
    outcome,
    outcome_assessments,
    usage_assessments,
)
from dspy_for.experiments.tracking.spans import CallSpan, call_spans, usage_attribute
from dspy_for.jsonwalk import jsonable
from dspy_for.secrets import needs_redaction, redact, redact_obj

if TYPE_CHECKING:
    from mlflow.entities import Span, TraceInfo

    from dspy_for.experiments.core import ItemResult, Landed, PreparedRun

__all__ = [
    "CORRECT",
    "DEFAULT_ASSESSORS",
    "EXPECTED",
    "SCORE",
    "TOKENS",
    "Assessor",
    "TraceContext",
    "build_trace",
    "item_payload",
    "log_item_trace",
    "log_item_traces",
    "outcome",
    "outcome_assessments",
    "trace_context",
    "usage_assessments",
    "write_traces",
]

_MAX_METADATA = 250  # what every MLflow store keeps of a trace metadata value
_MAX_TAG = 4096
_PREVIEW = 1000  # what MLflow keeps of a request or response preview


def trace_context(run: PreparedRun, run_id: str, *, served: str | None = None) -> TraceContext:
    """What every trace of ``run`` on MLflow run ``run_id`` shares (call once per run). Raises
    :class:`~dspy_for.errors.MissingDependencyError` on an MLflow without the internals tracing uses. ``served``: the
    URI of a store the command line's tracking process serves, which finds the run's experiment and makes the client
    itself (MLflow is not loaded here)."""
    metric = run.metric
    shared = {
        "label": redact(run.method.label),
        "method": run.method.name,
        "dataset": redact(f"{run.dataset.name}/{run.dataset.split}"),
        "metric": redact(str(getattr(metric, "__name__", None) or type(metric).__name__)),
        "run_id": run_id,
    }
    if served is not None:
        return TraceContext(**shared, experiment_id=None, tracking_uri=served)
    import mlflow
    from mlflow.tracking import MlflowClient

    compat.check_supported()
    return TraceContext(
        **shared,
        experiment_id=str(MlflowClient().get_run(run_id).info.experiment_id),
        tracking_uri=mlflow.get_tracking_uri(),
        client=compat.tracing_client(),
    )


def log_item_trace(ctx: TraceContext, landed: Landed, *, assessors: Sequence[Assessor] = DEFAULT_ASSESSORS) -> str:
    """Write the trace of one landed record (see the module docstring) and return its id; raises if the store
    refuses it."""
    return log_item_traces(ctx, [landed], assessors=assessors)[landed.item.key]


def log_item_traces(
    ctx: TraceContext, landed: Sequence[Landed], *, assessors: Sequence[Assessor] = DEFAULT_ASSESSORS
) -> dict[str, str]:
    """Write the traces of several landed records in one store transaction and return each one's trace id, by its
    record key; raises if the store refuses any (the others are kept)."""
    built = [build_trace(ctx, item_payload(x, ctx.method), assessors) for x in landed]
    failed = write_traces(ctx, built)
    if failed:
        raise next(iter(failed.values()))
    return {x.item.key: info.trace_id for x, (info, _) in zip(landed, built, strict=True)}


def write_traces(ctx: TraceContext, built: Sequence[tuple[TraceInfo, list[Span]]]) -> dict[int, Exception]:
    """Store traces made by :func:`build_trace` (many per transaction, :mod:`dspy_for.compat.mlflow_batch`); the
    ones not stored, by index, with why."""
    from dspy_for.compat.mlflow_batch import write_traces as write

    client = ctx.client if ctx.client is not None else compat.tracing_client()
    return write(client, str(ctx.experiment_id), built)


def item_payload(landed: Landed, method: str | None) -> dict[str, Any]:
    """What :func:`build_trace` needs of one landed record, as plain data with every text masked: the record (its
    results line, :attr:`~dspy_for.experiments.core.sinks.Landed.line`, made once for the store and the trace) and its
    id, each LM call's span (named by ``method``'s registry entry, :func:`~.spans.call_spans`: its name, what it sent
    and returned, its attributes, error and times) and whether it was reused."""
    calls = call_spans(landed.item, () if landed.reused else landed.calls, method)
    shown = _masked(calls)
    for show, c in zip(shown, calls, strict=True):
        show.update(start_ns=c.start_ns, end_ns=c.end_ns, chat=c.chat)
    return {"item": landed.line, "id": landed.item.id, "calls": shown, "reused": landed.reused}


def build_trace(
    ctx: TraceContext, payload: Mapping[str, Any], assessors: Sequence[Assessor] = DEFAULT_ASSESSORS
) -> tuple[TraceInfo, list[Span]]:
    """One trace from :func:`item_payload`: its info (with its assessments) and its finished spans."""
    from mlflow.entities import TraceInfo, TraceLocation, TraceState

    from dspy_for.experiments.core import ItemResult

    item, calls, reused = ItemResult.from_json(payload["item"]), list(payload["calls"]), bool(payload["reused"])
    kind = outcome(item)
    reused_from = item.origin if reused else None
    inputs = {"question": item.question}
    outputs = None if item.failed else jsonable(item.prediction)
    usage = usage_attribute(item.usage.get("total", {}))
    times = _root_times(item, calls)
    spans = [] if times is None else _spans(ctx, item, calls, times, reused, reused_from, usage)
    trace_id = spans[0].trace_id if spans else compat.new_trace_id()

    request, response = json.dumps(inputs, ensure_ascii=False), json.dumps(outputs, ensure_ascii=False, default=str)
    metadata = compat.trace_metadata(
        inputs=_cut(request, _MAX_METADATA),
        outputs=_cut(response, _MAX_METADATA) if outputs is not None else "",
        token_usage=json.dumps(usage[compat.CHAT_USAGE]) if usage else None,
        source_run=ctx.run_id,
    )
    metadata.update(
        {
            "dspy_for.item_id": _cut(item.id, _MAX_METADATA),
            "dspy_for.epoch": str(item.epoch),
            "dspy_for.label": _cut(ctx.label, _MAX_METADATA),
            "dspy_for.method": ctx.method,
            "dspy_for.dataset": _cut(ctx.dataset, _MAX_METADATA),
            "dspy_for.reused": str(reused).lower(),
            **({"dspy_for.reused_from": reused_from} if reused_from else {}),
            **({"dspy_for.timing": _no_timing(item)} if times is None else {}),
        }
    )
    tags = {
        compat.TRACE_NAME: ctx.label,
        "dspy_for.item": _cut(item.id, _MAX_TAG),
        "dspy_for.epoch": str(item.epoch),  # one trace per epoch of an item (epochs = k)
        "dspy_for.outcome": kind,
        "dspy_for.reused": str(reused).lower(),
        **({"dspy_for.reused_from": reused_from} if reused_from else {}),
    }
    if item.error_class:
        tags["dspy_for.error_class"] = _cut(item.error_class, _MAX_TAG)
    assessments = [masked(a) for assess in assessors for a in assess(ctx, item)]
    for a in assessments:
        a.trace_id = trace_id
    info = TraceInfo(
        trace_id=trace_id,
        trace_location=TraceLocation.from_experiment_id(str(ctx.experiment_id)),
        request_time=time.time_ns() // 1_000_000 if times is None else times[0] // 1_000_000,
        execution_duration=None if times is None else (times[1] - times[0]) // 1_000_000,
        state=TraceState.ERROR if item.failed else TraceState.OK,
        request_preview=_cut(request, _PREVIEW),
        response_preview=_cut(response, _PREVIEW) if outputs is not None else None,
        trace_metadata=metadata,
        tags=tags,
        assessments=assessments,
    )
    return info, spans


def _spans(
    ctx: TraceContext,
    item: ItemResult,
    calls: list[dict[str, Any]],
    times: tuple[int, int],
    reused: bool,
    reused_from: str | None,
    usage: dict[str, Any],
) -> list[Span]:
    """The root span (the item, ``times``) and one child per timed LM call, at the call's own start and end."""
    from mlflow.entities import SpanType

    start_ns, end_ns = times
    root = compat.start_live_span(ctx.label, start_ns=start_ns, span_type=SpanType.CHAIN)
    root.set_inputs({"question": item.question})
    untimed = sum(1 for c in calls if c["start_ns"] is None or c["end_ns"] is None)
    root.set_attributes(
        jsonable(
            {
                "dspy_for.item_id": item.id,
                "dspy_for.gold": item.gold,
                "dspy_for.score": item.score,
                "dspy_for.outcome": outcome(item),
                "dspy_for.usage": item.usage,
                "dspy_for.stats": item.stats,
                "dspy_for.started_at": item.started_at,
                "dspy_for.wall_time": item.wall_time,  # the method's; a judge's calls may end after it
                "dspy_for.reused": reused,
                **({"dspy_for.reused_from": reused_from} if reused_from else {}),
                **({"dspy_for.untimed_calls": untimed} if untimed else {}),
                **({"dspy_for.answers_by_round": item.answers_by_round} if item.answers_by_round else {}),
                **usage,
            }
        )
    )
    finished = []
    for show in calls:
        if show["start_ns"] is None or show["end_ns"] is None:
            continue  # a call without its times (a record made by hand) has no place on the timeline
        span_type = SpanType.CHAT_MODEL if show["chat"] else SpanType.LLM
        child = compat.start_live_span(show["name"], start_ns=show["start_ns"], span_type=span_type, parent=root)
        if show["inputs"] is not None:
            child.set_inputs(show["inputs"])
        child.set_attributes(show["attributes"])
        if show["error"]:
            child.record_exception(show["error"])
        status = "ERROR" if show["error"] else "OK"
        compat.end_live_span(child, outputs=show["outputs"], status=status, end_ns=show["end_ns"])
        finished.append(compat.finished_span(child))
    if item.failed:
        root.record_exception(str(item.error))
    outputs = None if item.failed else jsonable(item.prediction)
    compat.end_live_span(root, outputs=outputs, status="ERROR" if item.failed else "OK", end_ns=end_ns)
    return [compat.finished_span(root), *finished]


def _root_times(item: ItemResult, calls: list[dict[str, Any]]) -> tuple[int, int] | None:
    """The item's measured start and end (ns): from its recorded start for its wall time, widened to any call
    that ended later (a judge's); from its first call when its start was not recorded; None when neither is."""
    starts = [c["start_ns"] for c in calls if c["start_ns"] is not None]
    ends = [c["end_ns"] for c in calls if c["end_ns"] is not None]
    if item.started_at is not None:
        start = int(item.started_at * 1e9)
        end = start + int(item.wall_time * 1e9)
    elif starts:
        start = end = min(starts)
    else:
        return None
    return min([start, *starts]), max([end, *ends])


def _masked(calls: list[CallSpan]) -> list[dict[str, Any]]:
    """What each call's span shows, every text masked (one scan when nothing needs masking)."""
    shown = [
        {"name": c.name, "inputs": c.inputs, "outputs": c.outputs, "attributes": c.attributes, "error": c.error}
        for c in calls
    ]
    return redact_obj(shown) if needs_redaction(shown) else shown


def _no_timing(item: ItemResult) -> str:
    took = f"; it took {item.wall_time:.2f} s when it ran" if item.wall_time else ""
    return (
        "start not recorded (a record stored before starts were kept): no spans, no duration; request time = "
        f"when reused{took}"
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
