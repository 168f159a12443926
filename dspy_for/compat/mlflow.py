"""MLflow internals dspy-for relies on, behind one small surface (MLflow >=3.5,<4).

Traces (written by :mod:`dspy_for.experiments.tracking.traces` as items land, many per store transaction, not
through MLflow's span exporter):

- :func:`tracing_client`, :func:`start_trace`, :func:`log_spans` — ``mlflow.tracing.client.TracingClient`` and
  its ``start_trace`` / ``log_spans`` (a trace's info with its assessments in one call, its spans in one);
- many traces in one store transaction: :mod:`dspy_for.compat.mlflow_batch`;
- :func:`upload_spans` — ``TracingClient._upload_trace_data``: spans as an artifact, for stores without ``log_spans``;
- :func:`warm_trace_store` — imports ``mlflow.store.tracking.sqlalchemy_store`` (what a database store's client loads);
- :func:`start_live_span` — ``mlflow.entities.LiveSpan(otel_span, trace_id, span_type)`` over an OpenTelemetry
  tracer of our own (not the global one), ``mlflow.tracing.utils.generate_trace_id_v3`` for a root's trace id and
  ``LiveSpan._span`` (the OpenTelemetry span) as a child's parent context;
- :func:`new_trace_id` — ``generate_trace_id_v3`` for a trace without spans;
- :func:`end_live_span`, :func:`finished_span` — ``LiveSpan.end`` / ``LiveSpan.to_immutable_span`` (``:meta private:``);
- :func:`trace_metadata` — ``mlflow.tracing.constant.TraceMetadataKey`` / ``TRACE_SCHEMA_VERSION(_KEY)``;
- :data:`CHAT_USAGE`, :data:`LLM_MODEL`, :data:`LLM_COST`, :data:`ASSESSMENT_RUN`, :data:`TRACE_NAME`,
  :data:`DATASET_CONTEXT` —
  MLflow's key names, checked against its constants by :func:`check_supported`.

Datasets, runs, autolog masking:

- :func:`dataset_entity` — ``mlflow.data.dataset.Dataset._to_mlflow_entity`` (to log an input on a given run);
- :func:`examples_source` — a ``mlflow.data.dataset_source.DatasetSource`` (its abstract ``_get_source_type``,
  ``_can_resolve``, ``_resolve``) for where dspy-for read a dataset;
- :func:`active_experiment_id` — ``mlflow.tracking.fluent._get_experiment_id``;
- :func:`span_processors`, :func:`add_span_processor`, :func:`remove_span_processor` —
  ``mlflow.tracing.config.get_config().span_processors`` (set with the public ``mlflow.tracing.configure``);
- :func:`replace_span_events` — ``LiveSpan._span._events`` (OpenTelemetry SDK): events have no public setter.

MLflow is imported lazily, inside the functions: ``import dspy_for`` never imports it. :func:`check_supported`
fails loudly (:class:`~dspy_for.errors.MissingDependencyError`, naming the supported range and the install
command) when the installed MLflow lacks any of them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dspy_for.errors import MissingDependencyError

if TYPE_CHECKING:
    from mlflow.data.dataset_source import DatasetSource
    from mlflow.entities import LiveSpan, Span, SpanEvent, TraceInfo

__all__ = [
    "ASSESSMENT_RUN",
    "CHAT_USAGE",
    "DATASET_CONTEXT",
    "LLM_COST",
    "LLM_MODEL",
    "SUPPORTED",
    "TRACE_NAME",
    "active_experiment_id",
    "add_span_processor",
    "check_supported",
    "dataset_entity",
    "end_live_span",
    "examples_source",
    "finished_span",
    "log_spans",
    "new_trace_id",
    "remove_span_processor",
    "replace_span_events",
    "span_processors",
    "start_live_span",
    "start_trace",
    "trace_metadata",
    "tracing_client",
    "upload_spans",
    "warm_trace_store",
]

SUPPORTED = "mlflow>=3.5,<4"

CHAT_USAGE = "mlflow.chat.tokenUsage"  # span attribute MLflow sums into a trace's token usage
LLM_MODEL = "mlflow.llm.model"  # span attribute: the model an LM span called (the store indexes it)
LLM_COST = "mlflow.llm.cost"  # span attribute: {"total_cost": USD}; MLflow prices a span without one itself
ASSESSMENT_RUN = "mlflow.assessment.sourceRunId"  # assessment metadata: the run that produced it
TRACE_NAME = "mlflow.traceName"  # trace tag: the name the UI lists a trace under
DATASET_CONTEXT = "mlflow.data.context"  # dataset input tag: "training", "evaluation", "test", ...

# (module, attribute path) of every internal used here; a missing one is named by check_supported
_INTERNALS: tuple[tuple[str, str], ...] = (
    ("mlflow.tracing.client", "TracingClient.start_trace"),
    ("mlflow.tracing.client", "TracingClient.log_spans"),
    ("mlflow.tracing.client", "TracingClient._upload_trace_data"),
    ("mlflow.tracing.client", "TracingClient.store"),  # and the SqlAlchemyStore methods mlflow_batch uses:
    ("mlflow.store.tracking.sqlalchemy_store", "SqlAlchemyStore.start_trace"),
    ("mlflow.store.tracking.sqlalchemy_store", "SqlAlchemyStore.log_spans"),
    ("mlflow.store.tracking.sqlalchemy_store", "SqlAlchemyStore.get_experiment"),
    ("mlflow.tracing.utils", "generate_trace_id_v3"),
    ("mlflow.tracing.constant", "TraceMetadataKey.INPUTS"),
    ("mlflow.tracing.constant", "TraceMetadataKey.OUTPUTS"),
    ("mlflow.tracing.constant", "TraceMetadataKey.TOKEN_USAGE"),
    ("mlflow.tracing.constant", "TraceMetadataKey.SOURCE_RUN"),
    ("mlflow.tracing.constant", "TRACE_SCHEMA_VERSION"),
    ("mlflow.tracing.constant", "TRACE_SCHEMA_VERSION_KEY"),
    ("mlflow.entities", "LiveSpan.end"),
    ("mlflow.entities", "LiveSpan.to_immutable_span"),
    ("mlflow.data.pandas_dataset", "PandasDataset._to_mlflow_entity"),
    ("mlflow.data.dataset_source", "DatasetSource._get_source_type"),
    ("mlflow.data.dataset_source", "DatasetSource._can_resolve"),
    ("mlflow.data.dataset_source", "DatasetSource._resolve"),
    ("mlflow.tracking.fluent", "_get_experiment_id"),
    ("mlflow.tracing.config", "get_config"),
    ("mlflow.tracing", "configure"),
)
# our key names == MLflow's constants
_KEYS: tuple[tuple[str, str, str], ...] = (
    ("mlflow.tracing.constant", "SpanAttributeKey.CHAT_USAGE", CHAT_USAGE),
    ("mlflow.tracing.constant", "SpanAttributeKey.MODEL", LLM_MODEL),
    ("mlflow.tracing.constant", "SpanAttributeKey.LLM_COST", LLM_COST),
    ("mlflow.tracing.constant", "CostKey.TOTAL_COST", "total_cost"),
    ("mlflow.tracing.constant", "AssessmentMetadataKey.SOURCE_RUN_ID", ASSESSMENT_RUN),
    ("mlflow.tracing.constant", "TraceTagKey.TRACE_NAME", TRACE_NAME),
    ("mlflow.utils.mlflow_tags", "MLFLOW_DATASET_CONTEXT", DATASET_CONTEXT),
)
_MISSING = object()


def _lookup(module: str, path: str) -> Any:
    try:
        value: Any = importlib.import_module(module)
    except ImportError:
        return _MISSING
    for name in path.split("."):
        value = getattr(value, name, _MISSING)
        if value is _MISSING:
            break
    return value


def check_supported() -> None:
    """Raise :class:`MissingDependencyError` naming the supported range if an internal is missing."""
    import mlflow

    missing = [f"{m}.{p}" for m, p in _INTERNALS if _lookup(m, p) is _MISSING]
    missing += [f"{m}.{p} == {key!r}" for m, p, key in _KEYS if _lookup(m, p) != key]
    if not missing:
        try:
            span = start_live_span("dspy_for.check", start_ns=0, span_type="UNKNOWN")
            if not hasattr(span._span, "_events"):
                missing.append("LiveSpan._span._events")
        except Exception as exc:
            missing.append(f"LiveSpan over a tracer of dspy-for's own ({type(exc).__name__}: {exc})")
    if missing:
        raise MissingDependencyError(
            f"MLflow {mlflow.__version__} lacks {', '.join(missing)}, which dspy-for's traces and datasets use. "
            f"Install a supported version: `pip install '{SUPPORTED}'`."
        )


# -------------------------------------------------------------------------------------------- traces


def tracing_client(tracking_uri: str | None = None) -> Any:
    """MLflow's client of the trace API of the tracking store at ``tracking_uri`` (default: the current one)
    (``mlflow.tracing.client.TracingClient``)."""
    from mlflow.tracing.client import TracingClient

    return TracingClient(tracking_uri)


#: what a tracing client of a database store imports on its first use
_TRACE_STORE_MODULES = ("mlflow", "mlflow.tracing.client", "mlflow.store.tracking.sqlalchemy_store")


def warm_trace_store() -> None:
    """Import what :func:`tracing_client` of a database store loads on its first use (MLflow, its tracing client,
    its SQL store): for a process that writes traces, before its first one arrives. A module another MLflow lays
    out elsewhere is skipped (its first use imports what it needs)."""
    for module in _TRACE_STORE_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def start_trace(client: Any, info: TraceInfo) -> TraceInfo:
    """Store a trace's info (with its assessments) in one call."""
    return client.start_trace(info)


def log_spans(client: Any, experiment_id: str, spans: list[Span]) -> None:
    """Store finished spans (of one trace or many) in one call (raises on a store without span support)."""
    client.log_spans(experiment_id, spans)


def upload_spans(client: Any, info: TraceInfo, spans: list[Span]) -> None:
    """Store one trace's spans as its trace-data artifact (a file store, an older server)."""
    from mlflow.entities import TraceData

    client._upload_trace_data(info, TraceData(spans=spans))


@functools.cache
def _tracer() -> Any:
    """An OpenTelemetry tracer of our own, not registered globally: its spans reach no exporter."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider(resource=Resource.get_empty(), shutdown_on_exit=False).get_tracer("dspy_for.tracing")


def start_live_span(name: str, *, start_ns: int, span_type: str, parent: LiveSpan | None = None) -> LiveSpan:
    """A live MLflow span on dspy-for's own tracer: the root of a new trace, or a child of ``parent``."""
    from mlflow.entities import LiveSpan
    from opentelemetry import trace as otel
    from opentelemetry.context import Context

    if parent is None:
        from mlflow.tracing.utils import generate_trace_id_v3

        otel_span = _tracer().start_span(name, context=Context(), start_time=start_ns)
        return LiveSpan(otel_span, generate_trace_id_v3(otel_span), span_type)
    parent_otel: Any = parent._span
    context = otel.set_span_in_context(parent_otel)
    return LiveSpan(_tracer().start_span(name, context=context, start_time=start_ns), parent.trace_id, span_type)


def new_trace_id() -> str:
    """A new MLflow trace id (``tr-…``), for a trace written without spans."""
    from mlflow.tracing.utils import generate_trace_id_v3
    from opentelemetry.context import Context

    return generate_trace_id_v3(_tracer().start_span("dspy_for.trace_id", context=Context()))


def end_live_span(span: LiveSpan, *, outputs: Any, status: str | None, end_ns: int) -> None:
    """End a live span: MLflow's span processors run on it, then it is finished (our tracer exports nothing)."""
    span.end(outputs=outputs, status=status, end_time_ns=end_ns)


def finished_span(span: LiveSpan) -> Span:
    return span.to_immutable_span()


def trace_metadata(*, inputs: str, outputs: str, token_usage: str | None, source_run: str | None) -> dict[str, str]:
    """A trace's metadata as MLflow's own tracing writes it: schema version, request/response, usage, run."""
    from mlflow.tracing.constant import TRACE_SCHEMA_VERSION, TRACE_SCHEMA_VERSION_KEY, TraceMetadataKey

    meta = {
        TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
        TraceMetadataKey.INPUTS: inputs,
        TraceMetadataKey.OUTPUTS: outputs,
    }
    if token_usage is not None:
        meta[TraceMetadataKey.TOKEN_USAGE] = token_usage
    if source_run:
        meta[TraceMetadataKey.SOURCE_RUN] = source_run
    return meta


# ---------------------------------------------------------------------------------- datasets, runs


def dataset_entity(dataset: Any) -> Any:
    """The ``mlflow.entities.Dataset`` of an ``mlflow.data`` dataset (for ``MlflowClient.log_inputs``)."""
    return dataset._to_mlflow_entity()


@functools.cache
def _examples_source_class() -> type[DatasetSource]:
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


def examples_source(source: str, dataset: str, split: str) -> DatasetSource:
    """An MLflow dataset source (type ``dspy_for``) saying where dspy-for read a dataset's examples."""
    cls: Any = _examples_source_class()
    return cls(source, dataset, split)  # type: ignore[no-any-return]


def active_experiment_id() -> str | None:
    """The experiment fluent MLflow logs to (``set_experiment``, ``$MLFLOW_EXPERIMENT_*``, or the default)."""
    from mlflow.tracking.fluent import _get_experiment_id

    return _get_experiment_id()


# ----------------------------------------------------------------------------------- span processors


def span_processors() -> list[Callable[[LiveSpan], None]]:
    """The functions MLflow applies to every span before it is exported (``mlflow.tracing.configure``)."""
    from mlflow.tracing.config import get_config

    return list(get_config().span_processors)


def add_span_processor(processor: Callable[[LiveSpan], None]) -> None:
    """Apply ``processor`` to every span MLflow exports from now on, after those configured (once: idempotent)."""
    import mlflow

    current = span_processors()
    if processor not in current:
        mlflow.tracing.configure(span_processors=[*current, processor])


def remove_span_processor(processor: Callable[[LiveSpan], None]) -> None:
    import mlflow

    current = span_processors()
    if processor in current:
        mlflow.tracing.configure(span_processors=[p for p in current if p is not processor])


def replace_span_events(span: LiveSpan, events: Sequence[SpanEvent]) -> None:
    """Replace the events of a live span (before it ends), e.g. with their texts masked."""
    from opentelemetry.sdk.trace import Event
    from opentelemetry.sdk.util import BoundedList

    otel_span = span._span
    old = otel_span._events
    fresh = BoundedList.from_seq(None, [Event(e.name, _otel_attributes(e.attributes), e.timestamp) for e in events])
    fresh.dropped = getattr(old, "dropped", 0)
    otel_span._events = fresh


def _otel_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in (attributes or {}).items()}
