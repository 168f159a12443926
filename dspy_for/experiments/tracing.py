"""Per-item MLflow traces and MLflow datasets for ``compare`` runs (and the sweep's final test).

* :func:`log_dataset` logs the run's examples as an MLflow dataset input (``context="evaluation"``), named
  ``<dataset>/<split>`` with the content hash of :func:`~dspy_for.datasets.data_hash` as its digest, so the
  Dataset column of the runs table and "compare runs on the same data" work in the MLflow UI.
* :func:`log_item_traces` logs one trace per evaluated item, linked to the run (``mlflow.sourceRun``): the
  question as its request, the prediction as its response, the item's served tokens as the trace's token
  usage, and one span per LM call turn holding the turn's *parsed* fields — FOR: ``defender A0``,
  ``debater r1``, ``defender r1``, …, ``host``; ProRefine: ``verifier``, ``task step i``, ``feedback i``,
  ``optimizer i``; any other method: one ``task`` span. Each trace carries assessments: the gold answer as
  the ``expected_response`` expectation and, for a scored item, the ``correct`` feedback (bool) from the
  dataset's metric. A failed item's trace has state ERROR and the error, and no ``correct`` feedback (an error
  is not a score). More assessments (e.g. an LLM judge's) plug in as :data:`Assessor` functions.

The items ran before their traces are written, so each trace's root span lasts the item's measured wall time;
the times of the spans inside it are spread over it in proportion to their tokens (per-call times are not
recorded). The traces are built in memory and written with one store call per trace (its info and
assessments) and one per 100 traces' spans, not through MLflow's span exporter (a write per span and per
assessment, ~5x slower): 100 FOR items take about a second on SQLite. Every text is masked by
:func:`~dspy_for.secrets.redact`. Tracing never fails a comparison: an error is logged as a warning and the
run goes on.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dspy_for.datasets import data_hash
from dspy_for.secrets import redact, redact_obj

if TYPE_CHECKING:
    from mlflow.entities import Assessment

    from dspy_for.experiments.records import ItemResult, MethodResult
    from dspy_for.experiments.run import PreparedRun

__all__ = [
    "CORRECT",
    "DEFAULT_ASSESSORS",
    "EXPECTED",
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

CORRECT = "correct"  # the metric's verdict on a scored item (bool)
EXPECTED = "expected_response"  # the gold answer (MLflow's name for a reference answer)
SCORE = "score"  # the metric's score, when it is not simply 0 or 1
TOKENS = "total_tokens"  # the item's served tokens, as a feedback: the UI sorts and filters on feedback, not on Tokens

_SOURCE_RUN = "mlflow.sourceRun"  # trace metadata: the run a trace belongs to
_ASSESSMENT_RUN = "mlflow.assessment.sourceRunId"  # assessment metadata: the run that produced it
_USAGE = "mlflow.chat.tokenUsage"  # span attribute MLflow sums into the trace's token usage
_MAX_METADATA = 250  # what every MLflow store keeps of a trace metadata value
_MAX_TAG = 4096


@dataclass(frozen=True)
class TraceContext:
    """What every trace of one run shares: the method, the dataset, the metric and the MLflow run."""

    label: str
    method: str
    dataset: str  # "<dataset>/<split>"
    metric: str  # the metric's name: the source of the ``correct`` assessment
    run_id: str | None
    experiment_id: str | None


@dataclass
class SpanSpec:
    """One span inside an item's trace (one LM call turn): its name and what it holds."""

    name: str
    inputs: Any = None
    outputs: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0  # its share of the item's wall time (tokens, when known)
    error: str | None = None


Assessor = Callable[[TraceContext, "ItemResult"], Iterable["Assessment"]]
"""Assessments for one item's trace: ``(context, item) -> [Feedback | Expectation, ...]``. A judge adds its
scores by returning ``mlflow.entities.Feedback(name=..., value=..., source=AssessmentSource("LLM_JUDGE", ...))``;
pass it in ``log_item_traces(..., assessors=(*DEFAULT_ASSESSORS, judge))``."""


# ------------------------------------------------------------------------------------------- datasets


def log_dataset(run: PreparedRun, *, context: str = "evaluation", run_id: str | None = None) -> None:
    """Log ``run.examples`` as an MLflow dataset input of run ``run_id`` (default: the active run); a failure
    is only a warning."""
    try:
        _log_dataset(run, context, run_id)
    except Exception as exc:
        logger.warning(
            "could not log the dataset of %s on %s to MLflow: %s",
            run.method.label,
            run.dataset.name,
            redact(f"{type(exc).__name__}: {exc}"),
        )


def _log_dataset(run: PreparedRun, context: str, run_id: str | None) -> None:
    import mlflow
    import pandas as pd
    from mlflow.data.pandas_dataset import from_pandas

    d, examples = run.dataset, run.examples
    sources = sorted({str(ex.get("source")) for ex in examples if ex.get("source") is not None})
    frame = pd.DataFrame(
        {
            "id": [str(ex.get("id")) for ex in examples],
            "question": [str(ex.get("question", "")) for ex in examples],
            "answer": [str(ex.get("answer")) for ex in examples],
        },
        columns=["id", "question", "answer"],
    )
    source = _examples_source_class()(redact(", ".join(sources) or "unknown"), d.name, d.split)
    dataset = from_pandas(
        frame, source=source, targets="answer", name=redact(f"{d.name}/{d.split}"), digest=data_hash(examples)
    )
    tags = {"dspy_for.n": str(len(examples))}
    if run_id is None:
        mlflow.log_input(dataset, context=context, tags=tags)
        return
    from mlflow.entities import DatasetInput, InputTag

    tags["mlflow.data.context"] = context
    mlflow.tracking.MlflowClient().log_inputs(
        run_id, [DatasetInput(dataset._to_mlflow_entity(), [InputTag(k, v) for k, v in tags.items()])]
    )


@functools.cache
def _examples_source_class() -> type:
    """:class:`mlflow.data.dataset_source.DatasetSource` for dspy-for's sources (defined lazily: no import of
    MLflow with ``dspy_for``)."""
    from mlflow.data.dataset_source import DatasetSource

    class ExamplesSource(DatasetSource):
        """Where dspy-for read a dataset's examples (``bundled sample``, ``local:<dir>``, ``hub:<repo>``)."""

        def __init__(self, source: str, dataset: str, split: str) -> None:
            self.source, self.dataset, self.split = source, dataset, split

        @staticmethod
        def _get_source_type() -> str:
            return "dspy_for"

        def load(self, **kwargs: Any) -> Any:
            raise NotImplementedError("load it with dspy_for.datasets.load_dataset(dataset, split)")

        @staticmethod
        def _can_resolve(raw_source: Any) -> bool:
            return False

        @classmethod
        def _resolve(cls, raw_source: Any) -> Any:
            raise NotImplementedError

        def to_dict(self) -> dict[str, Any]:
            return {"source": self.source, "dataset": self.dataset, "split": self.split}

        @classmethod
        def from_dict(cls, source_dict: dict[Any, Any]) -> Any:
            return cls(str(source_dict.get("source")), str(source_dict.get("dataset")), str(source_dict.get("split")))

    return ExamplesSource


# ----------------------------------------------------------------------------------------- assessments


def outcome(item: ItemResult) -> str:
    """``failed`` (an error), ``unparsed`` (scored 0), ``correct`` or ``incorrect``."""
    if item.failed:
        return "failed"
    if item.unparsed:
        return "unparsed"
    return "correct" if item.score >= 1.0 else "incorrect"


def outcome_assessments(ctx: TraceContext, item: ItemResult) -> list[Assessment]:
    """The gold answer (expectation) and, for a scored item, the metric's verdict ``correct`` (feedback)."""
    from mlflow.entities import AssessmentSource, Expectation, Feedback

    meta = {_ASSESSMENT_RUN: ctx.run_id} if ctx.run_id else None
    out: list[Assessment] = [
        Expectation(
            name=EXPECTED,
            value=_jsonable(item.gold),
            metadata=meta,
            source=AssessmentSource(source_type="HUMAN", source_id=ctx.dataset),
        )
    ]
    if item.failed:  # an error is not a score
        return out
    source = AssessmentSource(source_type="CODE", source_id=ctx.metric)
    answer = item.prediction.get("answer")
    why = "the output could not be parsed (scored 0)" if item.unparsed else f"gold {item.gold!r}, answered {answer!r}"
    out.append(Feedback(name=CORRECT, value=item.score >= 1.0, source=source, rationale=why, metadata=meta))
    if item.score not in (0.0, 1.0):
        out.append(Feedback(name=SCORE, value=float(item.score), source=source, metadata=meta))
    return out


def usage_assessments(ctx: TraceContext, item: ItemResult) -> list[Assessment]:
    """A scored item's served tokens (spent plus served from cache) as the numeric feedback ``total_tokens`` (its
    mean over a run is the run's ``tokens_per_item``): MLflow's trace table sorts and filters on assessments, while
    its Tokens column (the trace's token usage) is display only."""
    from mlflow.entities import AssessmentSource, Feedback

    total = item.usage.get("total") or {}
    if item.failed or not total.get("calls"):  # like tokens/item: what the scored items cost
        return []
    spent, cached = int(total.get("tokens", 0) or 0), int(total.get("cached_tokens", 0) or 0)
    return [
        Feedback(
            name=TOKENS,
            value=spent + cached,
            source=AssessmentSource(source_type="CODE", source_id="usage"),
            rationale=f"{spent} spent + {cached} served from cache, {int(total['calls'])} LM call(s)",
            metadata={_ASSESSMENT_RUN: ctx.run_id} if ctx.run_id else None,
        )
    ]


DEFAULT_ASSESSORS: tuple[Assessor, ...] = (outcome_assessments, usage_assessments)


# --------------------------------------------------------------------------------------------- spans


def item_spans(item: ItemResult) -> list[SpanSpec]:
    """The spans of one item's trace, from its trajectory (FOR turns, ProRefine steps) or one ``task`` span."""
    traj = item.trajectory or []
    if traj and all(isinstance(t, Mapping) and "role" in t and "fields" in t for t in traj):
        return _for_spans(traj)
    if traj and all(isinstance(t, Mapping) and "step" in t for t in traj):
        return _prorefine_spans(traj, item)
    usage = item.usage.get("total", {})
    return [
        SpanSpec(
            "task",
            inputs={"question": item.question},
            outputs=item.prediction or None,
            attributes={"dspy_for.role": "task", "dspy_for.calls": int(usage.get("calls", 0)), **_usage_attr(usage)},
            weight=1.0,
            error=item.error,
        )
    ]


def _for_spans(traj: list[Any]) -> list[SpanSpec]:
    spans: list[SpanSpec] = []
    last_questions: list[str] = []
    last_answer: Any = None
    for t in traj:
        role, kind, rnd, fields = str(t["role"]), str(t.get("type", "")), int(t.get("round", 0)), t["fields"]
        inputs: Any = None
        if kind == "answer":
            name = f"{role} A{rnd}"
        elif kind == "synthesis":
            name, inputs = role, {"rounds": rnd}
        else:
            name = f"{role} r{rnd}"
        if kind == "questions":
            if fields.get("attempt"):
                name += " (re-ask)"
            inputs = {"answer": last_answer}
            last_questions = list(fields.get("questions") or [])
        elif kind == "revision":
            inputs = {"questions": last_questions}
        if kind in ("answer", "revision") and not fields.get("parse_error") and not fields.get("kept_previous"):
            last_answer = fields.get("answer", last_answer)
        attrs: dict[str, Any] = {"dspy_for.role": role, "dspy_for.turn": kind, "dspy_for.round": rnd}
        usage = t.get("usage")
        weight = 1.0
        if isinstance(usage, Mapping):
            prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
            attrs[_USAGE] = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}
            attrs["dspy_for.cache_hit"] = bool(usage.get("cache_hit", False))
            weight = completion + 1.0
        spans.append(
            SpanSpec(
                name, inputs=inputs, outputs=fields, attributes=attrs, weight=weight, error=fields.get("parse_error")
            )
        )
    return spans


def _prorefine_spans(traj: list[Any], item: ItemResult) -> list[SpanSpec]:
    per_call = {r: _completion_per_call(u) for r, u in item.usage.items() if r != "total"}
    spans: list[SpanSpec] = []
    verifier_calls = int(item.usage.get("verifier", {}).get("calls", 0))
    if verifier_calls:
        refined = item.stats.get("refined")
        spans.append(
            SpanSpec(
                "verifier",
                outputs={"initial_answer_judged_correct": None if refined is None else not bool(refined)},
                attributes={"dspy_for.role": "verifier", **_usage_attr(item.usage["verifier"])},
                weight=per_call.get("verifier", 1.0),
            )
        )
    for s in traj:
        i = int(s.get("step", 0))
        completion = int(s.get("completion_tokens", 0))
        spans.append(
            SpanSpec(
                f"task step {i}",
                inputs={"prompt": s.get("prompt"), "max_tokens": s.get("max_tokens")},
                outputs={"output": s.get("output"), "finish_reason": s.get("finish_reason"), "eos": s.get("eos")},
                attributes={"dspy_for.role": "task", "dspy_for.step": i, "dspy_for.completion_tokens": completion},
                weight=completion + 1.0,
            )
        )
        spans.append(
            SpanSpec(
                f"feedback {i}",
                inputs={"partial_output": s.get("output")},
                outputs={"feedback": s.get("feedback"), "is_correct": s.get("is_correct")},
                attributes={"dspy_for.role": "feedback", "dspy_for.step": i},
                weight=per_call.get("feedback", 1.0),
            )
        )
        rejected = s.get("rejected_reason")
        spans.append(
            SpanSpec(
                f"optimizer {i}",
                inputs={"prompt": s.get("prompt"), "feedback": s.get("feedback")},
                outputs={
                    "improved_prompt": s.get("rejected_prompt") if rejected else s.get("new_prompt"),
                    "accepted": rejected is None,
                    "rejected_reason": rejected,
                },
                attributes={"dspy_for.role": "optimizer", "dspy_for.step": i},
                weight=per_call.get("optimizer", 1.0),
            )
        )
    return spans


def _completion_per_call(usage: Mapping[str, Any]) -> float:
    calls = float(usage.get("calls", 0) or 0)
    completion = float(usage.get("completion_tokens", 0) or 0) + float(usage.get("cached_completion_tokens", 0) or 0)
    return completion / calls + 1.0 if calls else 1.0


def _usage_attr(usage: Mapping[str, Any]) -> dict[str, Any]:
    """MLflow's token usage of a role (or the total): served tokens, i.e. spent plus served from cache."""
    if not usage:
        return {}
    prompt = int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("cached_prompt_tokens", 0) or 0)
    completion = int(usage.get("completion_tokens", 0) or 0) + int(usage.get("cached_completion_tokens", 0) or 0)
    return {_USAGE: {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}}


# -------------------------------------------------------------------------------------------- traces


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
        return _log_item_traces(run, result, run_id, assessors)
    except Exception as exc:
        logger.warning(
            "could not log the item traces of %s on %s to MLflow: %s",
            run.method.label,
            run.dataset.name,
            redact(f"{type(exc).__name__}: {exc}"),
        )
        return 0


_CHUNK = 100  # traces built, then written, at a time


def _log_item_traces(run: PreparedRun, result: MethodResult, run_id: str | None, assessors: Sequence[Assessor]) -> int:
    import mlflow

    if not result.items:
        return 0
    start = time.perf_counter()
    active = mlflow.active_run()
    run_id = run_id or (active.info.run_id if active else None)
    if run_id is None:
        from mlflow.tracking.fluent import _get_experiment_id

        experiment_id = _get_experiment_id()
    elif active is not None and active.info.run_id == run_id:
        experiment_id = active.info.experiment_id
    else:
        experiment_id = mlflow.tracking.MlflowClient().get_run(run_id).info.experiment_id
    ctx = TraceContext(
        label=redact(run.method.label),
        method=run.method.name,
        dataset=redact(f"{run.dataset.name}/{run.dataset.split}"),
        metric=redact(_metric_name(run.metric)),
        run_id=run_id,
        experiment_id=experiment_id,
    )
    writer = _Writer(str(experiment_id))
    step = 1_000_000  # 1 ms apart: the traces list in the dataset's order
    base = time.time_ns() - step * len(result.items)
    errors: list[str] = []
    written = 0
    for lo in range(0, len(result.items), _CHUNK):
        built = []
        for i, item in enumerate(result.items[lo : lo + _CHUNK], lo):
            try:
                built.append(_build_trace(ctx, _redacted(item), assessors, base + i * step, writer.tracer))
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


def _metric_name(metric: Any) -> str:
    return str(getattr(metric, "__name__", None) or type(metric).__name__)


def _redacted(item: ItemResult) -> ItemResult:
    """``item`` with every text masked (one scan of the environment when nothing needs masking)."""
    from dataclasses import asdict

    from dspy_for.experiments.records import ItemResult

    data = asdict(item)
    texts = "\n".join(_strings(data))
    if redact(texts) == texts:
        return item
    return ItemResult(**redact_obj(data))


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


@dataclass
class _Built:
    """One item's trace, built in memory: its info (with assessments) and its finished spans."""

    info: Any  # mlflow.entities.TraceInfo
    spans: list[Any]  # mlflow.entities.Span


class _Writer:
    """Writes built traces to the tracking store: each trace's info (with its assessments) in one call, then
    the spans of up to :data:`_CHUNK` traces in one call — instead of a write per span and per assessment."""

    def __init__(self, experiment_id: str) -> None:
        from mlflow.tracing.client import TracingClient
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        self.experiment_id = experiment_id
        self.client = TracingClient()
        # a tracer of our own (not registered globally): these spans are written here, not by MLflow's exporter
        self.tracer = TracerProvider(resource=Resource.get_empty()).get_tracer("dspy_for.tracing")

    def write(self, built: list[_Built]) -> tuple[int, list[str]]:
        started: list[tuple[Any, _Built]] = []
        errors: list[str] = []
        for b in built:
            try:
                started.append((self.client.start_trace(b.info), b))
            except Exception as exc:
                errors.append(f"trace {b.info.trace_id}: {type(exc).__name__}: {exc}")
        spans = [s for _, b in started for s in b.spans]
        if not spans:
            return len(started), errors
        try:
            self.client.log_spans(self.experiment_id, spans)
        except Exception as exc:
            if not _spans_unsupported(exc):
                raise
            self._upload(started)  # a store that keeps spans as artifacts (a file store, an older server)
        return len(started), errors

    def _upload(self, started: list[tuple[Any, _Built]]) -> None:
        from mlflow.entities import TraceData

        for info, b in started:
            self.client._upload_trace_data(info, TraceData(spans=b.spans))


def _spans_unsupported(exc: Exception) -> bool:
    return isinstance(exc, NotImplementedError) or "not supported" in str(exc)


def _build_trace(
    ctx: TraceContext, item: ItemResult, assessors: Sequence[Assessor], start_ns: int, tracer: Any
) -> _Built:
    from mlflow.entities import LiveSpan, SpanType, TraceInfo, TraceLocation, TraceState
    from mlflow.tracing.constant import TRACE_SCHEMA_VERSION, TRACE_SCHEMA_VERSION_KEY, TraceMetadataKey
    from mlflow.tracing.utils import generate_trace_id_v3
    from opentelemetry import trace as otel
    from opentelemetry.context import Context

    kind = outcome(item)
    end_ns = start_ns + max(int(item.wall_time * 1e9), 1_000)
    root_otel = tracer.start_span(ctx.label, context=Context(), start_time=start_ns)
    trace_id = generate_trace_id_v3(root_otel)
    root = LiveSpan(root_otel, trace_id, SpanType.CHAIN)
    inputs = {"question": item.question}
    outputs = None if item.failed else _jsonable(item.prediction)
    usage = _usage_attr(item.usage.get("total", {}))
    root.set_inputs(inputs)
    root.set_attributes(
        _jsonable(
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
    parent = otel.set_span_in_context(root_otel)
    for s in specs:
        t_end = min(end_ns, t + int((end_ns - start_ns) * max(s.weight, 0.0) / total))
        child = LiveSpan(tracer.start_span(s.name, context=parent, start_time=t), trace_id, SpanType.LLM)
        if s.inputs is not None:
            child.set_inputs(_jsonable(s.inputs))
        child.set_attributes(_jsonable(s.attributes))
        if s.error:
            child.record_exception(str(s.error))
        child.end(outputs=_jsonable(s.outputs), status="ERROR" if s.error else "OK", end_time_ns=max(t_end, t))
        spans.append(child)
        t = t_end
    if item.failed:
        root.record_exception(str(item.error))
    root.end(outputs=outputs, status="ERROR" if item.failed else "OK", end_time_ns=end_ns)

    request, response = json.dumps(inputs, ensure_ascii=False), json.dumps(outputs, ensure_ascii=False, default=str)
    metadata = {
        TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
        TraceMetadataKey.INPUTS: _cut(request, _MAX_METADATA),
        TraceMetadataKey.OUTPUTS: _cut(response, _MAX_METADATA) if outputs is not None else "",
        "dspy_for.item_id": _cut(item.id, _MAX_METADATA),
        "dspy_for.label": _cut(ctx.label, _MAX_METADATA),
        "dspy_for.method": ctx.method,
        "dspy_for.dataset": _cut(ctx.dataset, _MAX_METADATA),
    }
    if usage:
        metadata[TraceMetadataKey.TOKEN_USAGE] = json.dumps(usage[_USAGE])
    if ctx.run_id:
        metadata[_SOURCE_RUN] = ctx.run_id
    tags = {"mlflow.traceName": ctx.label, "dspy_for.item": _cut(item.id, _MAX_TAG), "dspy_for.outcome": kind}
    if item.error_class:
        tags["dspy_for.error_class"] = _cut(item.error_class, _MAX_TAG)
    assessments = [_masked(a) for assess in assessors for a in assess(ctx, item)]
    for a in assessments:
        a.trace_id = trace_id
    info = TraceInfo(
        trace_id=trace_id,
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
    return _Built(info=info, spans=[s.to_immutable_span() for s in spans])


_PREVIEW = 1000  # what MLflow keeps of a request or response preview


def _masked(a: Assessment) -> Assessment:
    """An assessment with its texts masked (an assessor may quote an LM's output, which may echo a key)."""
    if a.rationale:
        a.rationale = redact(a.rationale)
    for value in (a.feedback, a.expectation):
        if value is not None:
            value.value = redact_obj(value.value)
    return a


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, Mapping):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [_jsonable(v) for v in value]
        return str(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
