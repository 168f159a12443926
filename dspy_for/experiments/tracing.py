"""Per-item MLflow traces and MLflow datasets for ``compare`` runs (and the sweep's final test).

* :func:`log_dataset` (:mod:`~dspy_for.experiments.trace_datasets`) logs the run's examples as an MLflow dataset
  input (``context="evaluation"``), named ``<dataset>/<split>`` with their content hash as its digest.
* :func:`log_item_traces` logs one trace per evaluated item, linked to the run (``mlflow.sourceRun``): the
  question as its request, the prediction as its response, the item's served tokens as the trace's token
  usage, and one span per LM call turn holding the turn's *parsed* fields (:func:`item_spans`, in
  :mod:`~dspy_for.experiments.trace_spans`). Each trace carries assessments
  (:mod:`~dspy_for.experiments.trace_assessments`): the gold answer as the ``expected_response`` expectation and,
  for a scored item, the ``correct`` feedback (bool) from the dataset's metric. A failed item's trace has state
  ERROR and the error, and no ``correct`` feedback (an error is not a score). More assessments (e.g. an LLM
  judge's) plug in as :data:`Assessor` functions.

The items ran before their traces are written, so each trace's root span lasts the item's measured wall time;
the times of the spans inside it are spread over it in proportion to their tokens (per-call times are not
recorded). The traces are built in memory and written with one store call per trace (its info and
assessments) and one per 100 traces' spans, not through MLflow's span exporter (a write per span and per
assessment, ~5x slower): 100 FOR items take about a second on SQLite. The MLflow internals this needs are in
:mod:`dspy_for.compat.mlflow`. Every text is masked by :func:`~dspy_for.secrets.redact`. Tracing never fails a
comparison: an error (an unsupported MLflow included) is logged as a warning and the run goes on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from dspy_for.compat import mlflow as compat
from dspy_for.experiments.trace_assessments import (
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
from dspy_for.experiments.trace_datasets import log_dataset
from dspy_for.experiments.trace_masking import needs_masking
from dspy_for.experiments.trace_spans import SpanSpec, item_spans, jsonable, usage_attribute
from dspy_for.secrets import redact, redact_obj

if TYPE_CHECKING:
    from mlflow.entities import Span, TraceInfo

    from dspy_for.experiments.records import ItemResult, MethodResult
    from dspy_for.experiments.run import PreparedRun

__all__ = [
    "CORRECT",
    "DEFAULT_ASSESSORS",
    "EXPECTED",
    "SCORE",
    "TOKENS",
    "Assessor",
    "SpanSpec",
    "TraceContext",
    "item_spans",
    "log_dataset",
    "log_item_traces",
    "outcome",
    "outcome_assessments",
    "usage_assessments",
]

logger = logging.getLogger("dspy_for.tracing")

_CHUNK = 100  # traces built, then written, at a time
_MAX_METADATA = 250  # what every MLflow store keeps of a trace metadata value
_MAX_TAG = 4096
_PREVIEW = 1000  # what MLflow keeps of a request or response preview


def log_item_traces(
    run: PreparedRun,
    result: MethodResult,
    *,
    run_id: str | None = None,
    assessors: Sequence[Assessor] = DEFAULT_ASSESSORS,
) -> int:
    """One trace per item of ``result`` (see the module docstring), linked to ``run_id`` (default: the active
    MLflow run). Returns how many traces were written; a failure is logged as a warning, never raised."""
    try:
        compat.check_supported()
        return _log_item_traces(run, result, run_id, assessors)
    except Exception as exc:
        logger.warning(
            "could not log the item traces of %s on %s to MLflow: %s",
            run.method.label,
            run.dataset.name,
            redact(f"{type(exc).__name__}: {exc}"),
        )
        return 0


def _log_item_traces(run: PreparedRun, result: MethodResult, run_id: str | None, assessors: Sequence[Assessor]) -> int:
    if not result.items:
        return 0
    start = time.perf_counter()
    ctx = _context(run, run_id)
    writer = _Writer(str(ctx.experiment_id))
    step = 1_000_000  # 1 ms apart: the traces list in the dataset's order
    base = time.time_ns() - step * len(result.items)
    errors: list[str] = []
    written = 0
    for lo in range(0, len(result.items), _CHUNK):
        built = []
        for i, item in enumerate(result.items[lo : lo + _CHUNK], lo):
            try:
                built.append(_build_trace(ctx, _redacted(item), assessors, base + i * step))
            except Exception as exc:
                errors.append(f"item {item.id}: {type(exc).__name__}: {exc}")
        try:
            n, errs = writer.write(built)
        except Exception as exc:  # the store refused the chunk: say so, try the next one
            n, errs = 0, [f"{type(exc).__name__}: {exc}"]
        written += n
        errors += errs
    if errors:
        logger.warning(
            "%d of %d item traces of %s on %s were not logged to MLflow (first error: %s)",
            len(result.items) - written,
            len(result.items),
            ctx.label,
            ctx.dataset,
            redact(errors[0]),
        )
    logger.debug("logged %d item traces of %s in %.2fs", written, ctx.label, time.perf_counter() - start)
    return written


def _context(run: PreparedRun, run_id: str | None) -> TraceContext:
    """The run's :class:`TraceContext`: ``run_id`` (default: the active run) and the experiment it is in."""
    import mlflow

    active = mlflow.active_run()
    run_id = run_id or (active.info.run_id if active else None)
    if run_id is None:
        experiment_id = compat.active_experiment_id()
    elif active is not None and active.info.run_id == run_id:
        experiment_id = active.info.experiment_id
    else:
        experiment_id = mlflow.tracking.MlflowClient().get_run(run_id).info.experiment_id
    metric = run.metric
    return TraceContext(
        label=redact(run.method.label),
        method=run.method.name,
        dataset=redact(f"{run.dataset.name}/{run.dataset.split}"),
        metric=redact(str(getattr(metric, "__name__", None) or type(metric).__name__)),
        run_id=run_id,
        experiment_id=experiment_id,
    )


def _redacted(item: ItemResult) -> ItemResult:
    """``item`` with every text masked (one scan of the environment when nothing needs masking)."""
    from dspy_for.experiments.records import ItemResult

    data = asdict(item)
    return ItemResult(**redact_obj(data)) if needs_masking(data) else item


@dataclass
class _Built:
    """One item's trace, built in memory: its info (with assessments) and its finished spans."""

    info: TraceInfo
    spans: list[Span]


class _Writer:
    """Writes built traces to the tracking store: each trace's info (with its assessments) in one call, then
    the spans of up to :data:`_CHUNK` traces in one call — instead of a write per span and per assessment."""

    def __init__(self, experiment_id: str) -> None:
        self.experiment_id = experiment_id
        self.client = compat.tracing_client()

    def write(self, built: list[_Built]) -> tuple[int, list[str]]:
        started: list[tuple[TraceInfo, _Built]] = []
        errors: list[str] = []
        for b in built:
            try:
                started.append((compat.start_trace(self.client, b.info), b))
            except Exception as exc:
                errors.append(f"trace {b.info.trace_id}: {type(exc).__name__}: {exc}")
        spans = [s for _, b in started for s in b.spans]
        if not spans:
            return len(started), errors
        try:
            compat.log_spans(self.client, self.experiment_id, spans)
        except Exception as exc:
            if not (isinstance(exc, NotImplementedError) or "not supported" in str(exc)):
                raise
            for info, b in started:  # a store that keeps spans as artifacts (a file store, an older server)
                compat.upload_spans(self.client, info, b.spans)
        return len(started), errors


def _build_trace(ctx: TraceContext, item: ItemResult, assessors: Sequence[Assessor], start_ns: int) -> _Built:
    from mlflow.entities import SpanType, TraceInfo, TraceLocation, TraceState

    kind = outcome(item)
    end_ns = start_ns + max(int(item.wall_time * 1e9), 1_000)
    root = compat.start_live_span(ctx.label, start_ns=start_ns, span_type=SpanType.CHAIN)
    inputs = {"question": item.question}
    outputs = None if item.failed else jsonable(item.prediction)
    usage = usage_attribute(item.usage.get("total", {}))
    root.set_inputs(inputs)
    root.set_attributes(
        jsonable(
            {
                "dspy_for.item_id": item.id,
                "dspy_for.gold": item.gold,
                "dspy_for.score": item.score,
                "dspy_for.outcome": kind,
                "dspy_for.usage": item.usage,
                "dspy_for.stats": item.stats,
                "dspy_for.wall_time": item.wall_time,
                "dspy_for.span_times": "the item wall time is measured; its spans share it by tokens",
                **({"dspy_for.answers_by_round": item.answers_by_round} if item.answers_by_round else {}),
                **usage,
            }
        )
    )
    spans = [root]
    specs = item_spans(item)
    total = sum(max(s.weight, 0.0) for s in specs) or 1.0
    t = start_ns
    for s in specs:
        t_end = min(end_ns, t + int((end_ns - start_ns) * max(s.weight, 0.0) / total))
        child = compat.start_live_span(s.name, start_ns=t, span_type=SpanType.LLM, parent=root)
        if s.inputs is not None:
            child.set_inputs(jsonable(s.inputs))
        child.set_attributes(jsonable(s.attributes))
        if s.error:
            child.record_exception(str(s.error))
        status = "ERROR" if s.error else "OK"
        compat.end_live_span(child, outputs=jsonable(s.outputs), status=status, end_ns=max(t_end, t))
        spans.append(child)
        t = t_end
    if item.failed:
        root.record_exception(str(item.error))
    compat.end_live_span(root, outputs=outputs, status="ERROR" if item.failed else "OK", end_ns=end_ns)

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
            "dspy_for.label": _cut(ctx.label, _MAX_METADATA),
            "dspy_for.method": ctx.method,
            "dspy_for.dataset": _cut(ctx.dataset, _MAX_METADATA),
        }
    )
    tags = {compat.TRACE_NAME: ctx.label, "dspy_for.item": _cut(item.id, _MAX_TAG), "dspy_for.outcome": kind}
    if item.error_class:
        tags["dspy_for.error_class"] = _cut(item.error_class, _MAX_TAG)
    assessments = [masked(a) for assess in assessors for a in assess(ctx, item)]
    for a in assessments:
        a.trace_id = root.trace_id
    info = TraceInfo(
        trace_id=root.trace_id,
        trace_location=TraceLocation.from_experiment_id(str(ctx.experiment_id)),
        request_time=start_ns // 1_000_000,
        execution_duration=(end_ns - start_ns) // 1_000_000,
        state=TraceState.ERROR if item.failed else TraceState.OK,
        request_preview=_cut(request, _PREVIEW),
        response_preview=_cut(response, _PREVIEW) if outputs is not None else None,
        trace_metadata=metadata,
        tags=tags,
        assessments=assessments,
    )
    return _Built(info=info, spans=[compat.finished_span(s) for s in spans])


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
