"""Many MLflow traces in one store transaction (MLflow internals, behind :mod:`dspy_for.compat`).

:func:`write_traces` stores a batch of finished traces: on a database store (``SqlAlchemyStore``) MLflow's own
``start_trace`` for each and one ``log_spans`` for all their spans run on a shallow copy of the store whose
``ManagedSessionMaker`` hands out one session for the whole batch (one transaction, committed once) and whose
``get_experiment`` reads the experiment once — so what each trace holds is exactly what MLflow writes for it, without a
transaction and an experiment query per trace. The rows ``start_trace`` makes (the trace, its tags, metadata and
assessments) are held in the session instead of flushed trace by trace, and inserted together, table by table
(:func:`_rows_held`: a unit of work per trace was a third of the writer's time). Any other store (an ``mlflow
server``, Databricks), or a batch that fails as a whole, is written trace by trace with
:func:`dspy_for.compat.mlflow.start_trace` and :func:`~dspy_for.compat.mlflow.log_spans`.
:func:`dspy_for.compat.mlflow.check_supported` checks the internals.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dspy_for.compat import mlflow as compat

if TYPE_CHECKING:
    from mlflow.entities import Span, TraceInfo

__all__ = ["write_traces"]


def write_traces(
    client: Any, experiment_id: str, traces: Sequence[tuple[TraceInfo, list[Span]]]
) -> dict[int, Exception]:
    """Store ``traces`` (each its info with its assessments, and its finished spans) of experiment ``experiment_id``:
    on a database store in one transaction; else — or when that transaction fails — trace by trace, so one trace the
    store refuses never loses the others. A trace without spans gets an empty span list (MLflow reads a trace's spans
    from there when it has none stored). Returns the traces not stored, by index, with why."""
    if len(traces) > 1:
        try:
            stored = _in_one_transaction(client.store, experiment_id, traces)
        except Exception:  # e.g. one trace refused: none of the batch was kept; each is tried on its own below
            stored = None
        if stored is not None:
            failed: dict[int, Exception] = {}
            for i, (info, (_, spans)) in enumerate(zip(stored, traces, strict=True)):
                if not spans:
                    try:
                        compat.upload_spans(client, info, [])
                    except Exception as exc:
                        failed[i] = exc
            return failed
    failed = {}
    for i, (info, spans) in enumerate(traces):
        try:
            _log_trace_spans(client, experiment_id, compat.start_trace(client, info), spans)
        except Exception as exc:
            failed[i] = exc
    return failed


def _log_trace_spans(client: Any, experiment_id: str, info: TraceInfo, spans: list[Span]) -> None:
    if not spans:
        compat.upload_spans(client, info, [])
        return
    try:
        compat.log_spans(client, experiment_id, spans)
    except Exception as exc:
        if not (isinstance(exc, NotImplementedError) or "not supported" in str(exc)):
            raise
        compat.upload_spans(client, info, spans)  # a store that keeps spans as artifacts (a file store, an old server)


def _in_one_transaction(
    store: Any, experiment_id: str, traces: Sequence[tuple[TraceInfo, list[Span]]]
) -> list[TraceInfo] | None:
    """``traces`` stored by MLflow's own ``start_trace`` and ``log_spans`` in one session of ``store``: their infos as
    stored (None, nothing written: not a database store). Raises, having written nothing, if any of it fails."""
    import copy

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from sqlalchemy import event

    if not isinstance(store, SqlAlchemyStore) or not callable(getattr(store, "ManagedSessionMaker", None)):
        return None
    with store.ManagedSessionMaker(read_only=False) as session:  # commits at the end; rolls back on any error
        rolled_back: list[bool] = []
        event.listen(session, "after_rollback", lambda *_: rolled_back.append(True))

        @contextmanager
        def same_session(*args: Any, **kwargs: Any) -> Any:
            yield session

        batch: Any = copy.copy(store)  # the store's own code, on this batch's session; the shared store is untouched
        batch.ManagedSessionMaker = same_session
        experiment = SqlAlchemyStore.get_experiment(batch, experiment_id)
        batch.get_experiment = lambda _id: experiment if str(_id) == str(experiment_id) else store.get_experiment(_id)
        with _rows_held(session):
            stored = [batch.start_trace(info) for info, _ in traces]
        spans = [s for _, trace_spans in traces for s in trace_spans]
        if spans:
            batch.log_spans(experiment_id, spans)
        if rolled_back:  # MLflow rolled part of the session back (a trace it found already stored): keep nothing
            raise RuntimeError("a trace of the batch was already stored")
    return stored


@contextmanager
def _rows_held(session: Any) -> Iterator[None]:
    """Inside: ``session`` flushes nothing (MLflow's ``start_trace`` flushes each trace's rows as it makes them); after,
    every row made inside is inserted at once, table by table in the order their foreign keys need, with SQLAlchemy's
    bulk insert (the same rows a flush writes, without a unit of work per trace). A store that refuses a row raises
    then, for the whole batch. With MLflow's opt-in trace rollups on, rows are flushed as MLflow does."""
    if _rollups_on():  # start_trace then also queues rollup rebuilds, and reads that queue back: rows not held
        yield
        return
    session.flush = _held  # an attribute of this session only; the method is back after
    try:
        with session.no_autoflush:
            yield
    finally:
        del session.flush
    made = list(session.new)
    tables = {t: i for i, t in enumerate(made[0].__table__.metadata.sorted_tables)} if made else {}
    made.sort(key=lambda row: tables.get(row.__table__, len(tables)))
    for row in made:
        if row in session:  # a trace's rows leave with it (its relationships cascade)
            session.expunge(row)
    session.bulk_save_objects(made)


def _rollups_on() -> bool:
    """Whether MLflow's opt-in trace rollups are on (an MLflow without them: no)."""
    from mlflow import environment_variables

    setting = getattr(environment_variables, "MLFLOW_SQL_TRACE_ROLLUPS_ENABLED", None)
    return bool(setting is not None and setting.get())


def _held(*args: Any, **kwargs: Any) -> None:
    """A flush while rows are held: nothing (they are inserted together after)."""
