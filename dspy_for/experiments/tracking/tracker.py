"""The tracking process: what a run's trace writer (:mod:`.writer`) runs, in a process of its own or in a thread of the
run's. It stores the traces it is sent, many per store transaction, and — for the command line, where it also serves
the run's tracking store (:func:`~.writer.start_tracking_process`) — makes the store's calls (:mod:`.runs`) in the
order they arrive, after the traces sent before them. As a process it imports MLflow and its store as it starts, then
matplotlib beside its work, for the plots it draws at the run's end; the trace builder, which loads DSPy, comes with
the first traces.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import pickle
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from dspy_for.experiments.reports import sketch
from dspy_for.experiments.tracking.assessments import TraceContext
from dspy_for.secrets import redact

__all__ = ["BATCH", "BOOT", "GIVE_UP", "TOKEN", "Batcher", "named", "serve", "text", "waiting"]

#: the most traces stored in one transaction
BATCH = 256
#: failed batches of one run after which the writer stops trying it (each item still gets its warning)
GIVE_UP = 3
#: how a placeholder for a run not started yet begins: the run's process names a run by it until the tracking process,
#: which starts the run, answers with its id
TOKEN = "dspy-for-run-pending:"
#: the process's start: read everything sent from the first moment (a thread), then import and serve
BOOT = """
import sys, threading, queue
from multiprocessing.connection import Connection
conn, inbox = Connection(int(sys.argv[1])), queue.SimpleQueue()
def read():
    while True:
        try:
            inbox.put(conn.recv_bytes())
        except (EOFError, OSError):
            inbox.put(None)
            return
threading.Thread(target=read, daemon=True).start()
from dspy_for.experiments.tracking.tracker import serve
serve(conn, inbox)
"""


class Batcher:
    """What either writer runs on what it receives, in order: ``("open", sink, context)``, ``("trace", sink, seq,
    payload)`` and ``("call", seq, name, args, token)``; every batch of one sink's traces is stored in one transaction
    and answered ``("done", sink, seq, failures, stored)`` through ``reply`` (``stored``: each stored trace's seq and
    trace id), every call ``("answer", seq, ok, value)``.

    A run started by a call with a ``token`` (:func:`~.runs.start_run`: a placeholder the run's process made, see
    :data:`TOKEN`) is known by it from then on: wherever a later call's arguments or a sink's context hold the token,
    the run's id stands in its place."""

    def __init__(
        self,
        reply: Callable[[tuple[Any, ...]], None],
        importing: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    ) -> None:
        self.reply = reply
        self.importing = importing  # around the trace builder's import (it loads DSPy)
        self.contexts: dict[int, TraceContext | Exception] = {}
        self.failed_batches: dict[int, int] = {}
        self.ids: dict[str, str] = {}  # token -> the id of the run its call started

    def handle(self, messages: list[tuple[Any, ...]]) -> None:
        traces: dict[int, list[tuple[int, dict[str, Any]]]] = {}
        for message in messages:
            if message[0] == "open":
                self.contexts[message[1]] = _context(named(message[2], self.ids.get))
            elif message[0] == "call":  # a call of the store's, answered in its turn: the traces sent before it first
                self._flush(traces)
                _, seq, name, args, token = message
                ok, value = _answer(name, named(args, self.ids.get))
                if ok and token is not None:
                    self.ids[token] = value
                self.reply(("answer", seq, ok, value))
            else:
                traces.setdefault(message[1], []).append((message[2], message[3]))
        self._flush(traces)

    def _flush(self, traces: dict[int, list[tuple[int, dict[str, Any]]]]) -> None:
        for sink, items in traces.items():
            for i in range(0, len(items), BATCH):
                self._write(sink, items[i : i + BATCH])
        traces.clear()

    def _write(self, sink: int, items: list[tuple[int, dict[str, Any]]]) -> None:
        with self.importing():
            from dspy_for.experiments.tracking.traces import build_trace, write_traces

        ctx = self.contexts.get(sink, RuntimeError("no run to write to"))
        why: dict[int, str] = {}
        ids: dict[int, str] = {}
        if isinstance(ctx, Exception):
            why = dict.fromkeys(range(len(items)), text(ctx))
        elif self.failed_batches.get(sink, 0) >= GIVE_UP:
            why = dict.fromkeys(range(len(items)), f"not tried after {GIVE_UP} failed writes")
        else:
            built, where = [], []
            for i, (_, payload) in enumerate(items):
                try:
                    built.append(build_trace(ctx, payload))
                    where.append(i)
                except Exception as exc:
                    why[i] = text(exc)
            try:
                refused = write_traces(ctx, built)
            except Exception as exc:
                refused = dict.fromkeys(range(len(built)), exc)
            why.update({where[j]: text(exc) for j, exc in refused.items()})
            ids = {items[where[j]][0]: info.trace_id for j, (info, _) in enumerate(built) if j not in refused}
            if len(why) == len(items):
                self.failed_batches[sink] = self.failed_batches.get(sink, 0) + 1
        failures = [(str(items[i][1]["id"]), text) for i, text in sorted(why.items())]
        self.reply(("done", sink, items[-1][0], failures, sorted(ids.items())))


def named(value: Any, lookup: Callable[[str], str | None]) -> Any:
    """``value`` with every token (:data:`TOKEN`) that ``lookup`` knows replaced by its run's id, in dicts, lists and
    tuples too."""
    if isinstance(value, str):
        return (lookup(value) or value) if value.startswith(TOKEN) else value
    if isinstance(value, dict):
        return {k: named(v, lookup) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(named(v, lookup) for v in value)
    return value


def _context(fields: dict[str, Any] | TraceContext) -> TraceContext | Exception:
    """A sink's context as the writer uses it: its own (a thread), or rebuilt with a client of the run's tracking store
    (a process; the run's experiment found there when the run's process did not say it)."""
    if isinstance(fields, TraceContext):
        return fields
    try:
        from dspy_for.compat import mlflow as compat

        compat.check_supported()
        client = compat.tracing_client(fields["tracking_uri"])
        if fields["experiment_id"] is None:
            from mlflow.tracking import MlflowClient

            run = MlflowClient(fields["tracking_uri"]).get_run(fields["run_id"])
            fields = {**fields, "experiment_id": str(run.info.experiment_id)}
        return TraceContext(**fields, client=client)
    except Exception as exc:
        return exc


def _answer(name: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
    """A call of the store's (:mod:`.runs`) made here: (True, what it returned) or (False, what it raised, or its text
    when that cannot be sent back)."""
    from dspy_for.experiments.tracking import runs

    try:
        return True, getattr(runs, name)(*args)
    except Exception as exc:
        try:
            pickle.dumps(exc)
        except Exception:
            return False, RuntimeError(text(exc))
        return False, exc


def text(exc: BaseException) -> str:
    return redact(f"{type(exc).__name__}: {exc}")


def serve(conn: Any, inbox: queue.SimpleQueue[bytes | None]) -> None:
    """The writer process: handle what arrives (``inbox``: raw messages, None once the run's process closed its end)
    in batches of all that is there, until closed."""
    logging.basicConfig(level=logging.WARNING, format="dspy-for trace writer: %(levelname)s %(name)s: %(message)s")
    lock = threading.Lock()

    def reply(message: tuple[Any, ...]) -> None:
        with lock, contextlib.suppress(OSError):  # the run's process is gone: what is stored stays stored
            conn.send(message)

    batcher = Batcher(reply, importing=_collector_off)
    with _collector_off():
        _warm()  # what the first batch needs, imported while the run starts (what arrives meanwhile is read)
    threading.Thread(target=_warm_plots, name="dspy-for-plots", daemon=True).start()  # the plots, while items run
    while True:
        raw = waiting(inbox)
        batcher.handle([pickle.loads(r) for r in raw if r is not None])
        if None in raw:
            return


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    """Around a large import of this process's (MLflow and its SQL store: a million objects, several full passes of
    the collector, about a second of this process's CPU): the collector off meanwhile, and what it made left out of
    its passes afterwards (it lives as long as the process). Only this process's own: a run's process keeps its
    collector as it is."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def _warm_plots() -> None:
    with _collector_off():
        sketch.warm()


def _warm() -> None:
    """Import what the store's first calls need: MLflow and its store (:func:`~dspy_for.compat.mlflow.
    warm_trace_store`); the trace builder (which loads DSPy) is imported with the first traces."""
    from dspy_for.compat import mlflow as compat

    compat.warm_trace_store()


def waiting(inbox: queue.SimpleQueue[Any]) -> list[Any]:
    """What waits in ``inbox``: at least one message (waited for), at most :data:`BATCH`."""
    got = [inbox.get()]
    while len(got) < BATCH:
        try:
            got.append(inbox.get_nowait())
        except queue.Empty:
            break
    return got
