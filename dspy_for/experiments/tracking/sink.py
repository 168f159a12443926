"""One method's run streamed into MLflow: the run core's sink for compare, sweep trials and the final test.

Opened on an existing MLflow run (its id): every record, as it lands, becomes a trace linked to the run (real
per-call spans for items run now; a reused item says so and names the run that produced it). When the run
core closes it — however the run ended — the run gets the summary's metrics (:func:`~dspy_for.experiments.core.
summary.summarize`), ``items.jsonl`` and ``trajectories.jsonl`` (with a compile step also its cost's metrics,
``compile_usage.json`` and ``compile_cost.json``), and its end status: FINISHED, FAILED (every
item failed, or the run raised) or KILLED (Ctrl-C, SIGTERM). Everything is written by run id through
:mod:`~dspy_for.experiments.tracking.store` (safe from threads and worker processes; in the command line, by its
tracking process). A tracing failure is a warning, never an error.

Traces are written by the process's trace writer (:mod:`~dspy_for.experiments.tracking.writer`: a process of its own,
many traces per store transaction), so the threads waiting on the LM never wait on the tracking store nor share an
interpreter lock with it: the sink only masks each record into plain data and hands it over as it lands. Closing the
sink waits until every trace of its records is stored (or warned about), so the run ends with its traces in MLflow.
One writer serves every sink of a process, however many methods and datasets a comparison runs side by side.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.core.summarize import summarize
from dspy_for.experiments.tracking import served, store, traces
from dspy_for.experiments.tracking.writer import trace_writer
from dspy_for.secrets import redact

if TYPE_CHECKING:
    from dspy_for.experiments.core import Landed, MethodResult, PreparedRun, RunStatus
    from dspy_for.experiments.tracking.writer import TraceWriter

__all__ = ["MlflowSink", "item_rows", "serving_params"]

logger = logging.getLogger("dspy_for.tracing")


class MlflowSink:
    """See the module docstring. ``end_run``: whether closing ends the MLflow run (False: its owner ends it,
    e.g. a sweep's parent run that also holds the study's plots)."""

    def __init__(self, run: PreparedRun, run_id: str, *, end_run: bool = True, trace: bool | None = None) -> None:
        trace = run.spec.traces if trace is None else trace  # the spec's `traces` unless the caller says
        self.run, self.run_id, self.end_run, self.trace = run, run_id, end_run, trace
        self._writer: TraceWriter | None = None
        self._sink = 0
        self._method: str | None = None
        #: each stored trace's id, by record key, filled as the writer stores them (an open cell reads it)
        self.trace_ids: dict[str, str] = {}
        if trace:
            try:
                uri = store.current_uri() if served.elsewhere() else None
                context = traces.trace_context(run, run_id, served=uri)
                self._writer, self._method = trace_writer(), context.method
                self._sink = self._writer.open(context, self.trace_ids)
            except Exception as exc:
                self._writer = None
                self._warn(exc)

    def add(self, landed: Landed) -> None:
        if self._writer is None:
            return
        try:
            payload = traces.item_payload(landed, self._method)
        except Exception as exc:  # a record the trace cannot show: its warning; the run goes on
            self._warn(exc, landed.item.id)
            return
        self._writer.add(self._sink, payload, landed.item.key)

    def finish_traces(self) -> None:
        """Wait until every trace of the records added so far is stored (or warned about)."""
        if self._writer is not None:
            self._writer.wait(self._sink)

    def close(self, result: MethodResult, status: RunStatus) -> None:
        self.finish_traces()  # every trace of the run's records is written before the run ends
        summary = summarize(result)
        try:
            store.log_metrics(self.run_id, summary.metrics())
            store.log_table(self.run_id, item_rows(result), "items.jsonl")
            trajectories = [
                {"id": i.id, "trajectory": i.trajectory, "answers_by_round": i.answers_by_round}
                for i in result.items
                if i.trajectory
            ]
            store.log_table(self.run_id, trajectories, "trajectories.jsonl")
            if self.run.compile_usage:
                store.log_json(self.run_id, self.run.compile_usage, "compile_usage.json")
            if self.run.compile_cost is not None:  # beside it: the compile's tokens, USD, seconds, reused
                store.log_metrics(self.run_id, self.run.compile_cost.metrics())
                store.log_json(self.run_id, self.run.compile_cost.row(), "compile_cost.json")
            if result.n_failed:
                store.set_tags(self.run_id, {"dspy_for.failed_items": str(result.n_failed)})
            if params := serving_params(result):
                store.log_params(self.run_id, params)
        finally:
            if self.end_run:
                store.end_run(self.run_id, status)

    def _warn(self, exc: BaseException, item: str | None = None) -> None:
        where = f"item {item} of " if item else ""
        logger.warning(
            "could not log the trace of %s%s on %s to MLflow: %s",
            where,
            self.run.method.label,
            self.run.dataset.name,
            redact(f"{type(exc).__name__}: {exc}"),
        )


def serving_params(result: MethodResult) -> dict[str, str]:
    """What served the run's scored records, as MLflow params: ``served_by`` (each identity, :mod:`dspy_for.lm.serving`,
    with how many records it served, ``; ``-separated), ``served_by.now`` (the stack the run talks to now, when
    known) and ``served_by.reran`` (stored records run again because another stack served them, when any). Empty
    when no LM call reported an identity."""
    served = result.served_by()
    out = {"served_by": "; ".join(f"{identity} ({n})" for identity, n in served.items())} if served else {}
    if served and result.serving_now is not None:
        out["served_by.now"] = "; ".join(result.serving_now)
    if result.reran:
        out["served_by.reran"] = str(result.reran)
    return out


def item_rows(result: MethodResult) -> list[dict[str, Any]]:
    """One row per item for ``items.jsonl``: outcome, score or error, usage and the judge's verdict."""
    return [
        {
            "id": i.id,
            "question": i.question,
            "gold": i.gold,
            "prediction": i.prediction,
            "correct": i.score,
            "error": i.error,
            "error_class": i.error_class,
            "unparsed": i.unparsed,
            "usage": i.usage.get("total", {}),
            "stats": i.stats,
            "judge": i.judge,
            "origin": i.origin,
            "served_by": i.served_by,
        }
        for i in result.items
    ]
