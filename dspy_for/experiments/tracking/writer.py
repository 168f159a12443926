"""Per-item traces written off the run's interpreter lock: one trace writer per process, shared by every sink::

    writer = trace_writer()                       # started on first use
    sink = writer.open(ctx)                       # one per MLflow run (a sink)
    writer.add(sink, item_payload(landed, ...))   # as each record lands: plain data, every text masked
    writer.wait(sink)                             # every trace added so far stored, or warned about by its item

The writer is a **process** of its own (``python -P -c`` :data:`BOOT`: the run's own ``dspy_for``, never one in the
working directory; in a session of its own, so Ctrl-C in the terminal stops the run, not the writer): the threads
waiting on the LM never share an interpreter lock with the tracking store's work — building each trace, and storing the
traces many per store transaction (:func:`~.traces.write_traces`) as they arrive. It is started with the run's tracking
(:func:`~.store.setup_tracking` with ``traces``) and imports MLflow and its store at once, beside the run's own
start-up. It reads everything sent as it is sent (a thread of its own, started before its imports), stores what it has
as soon as it can (each batch committed: at most :data:`BATCH` traces, one transaction) and says which are stored; after
the run's process is gone (killed), it stores what it received, then exits. So an interrupted or killed run keeps the
trace of every record it landed (the sink is given a record before the results store). A trace the store refuses is a
warning naming its item; after :data:`GIVE_UP` failed batches of one run the writer stops trying that run (each item
still gets its warning).

Where no process can start, or with ``DSPY_FOR_TRACE_WRITER=thread``, the writer is a thread of the run's process
instead (the same batches; what it had not stored yet is lost if the process is killed). A writer process that dies
hands every trace it had not stored to such a thread.

The command line starts the writer process first, before it imports the rest of itself, as the process that also
serves the run's tracking store (:func:`start_tracking_process`): MLflow's runs, params, metrics, tags, artifacts and
dataset inputs (:mod:`.runs`) are made there, in the order they are sent (:mod:`.served` says which are waited for),
so the run's process never imports MLflow, and the process imports MLflow and opens its store while the command
imports DSPy and starts its items. What it runs is :mod:`.tracker`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspy_for.experiments.tracking.assessments import TraceContext
from dspy_for.experiments.tracking.tracker import BATCH, BOOT, GIVE_UP, Batcher, text, waiting
from dspy_for.secrets import redact

__all__ = [
    "BATCH",
    "GIVE_UP",
    "MODE_ENV",
    "TraceWriter",
    "known_run",
    "start_tracking_process",
    "store_server",
    "trace_writer",
]

logger = logging.getLogger("dspy_for.tracing")

#: ``process`` (default) or ``thread``: where traces are written
MODE_ENV = "DSPY_FOR_TRACE_WRITER"
#: how long waiting for the writer may see no progress before its traces are reported as not confirmed
STALL_SECONDS = 120.0

# -------------------------------------------------------------------------------------------- the run's side


@dataclass
class _Sink:
    context: TraceContext
    trace_ids: dict[str, str]  # record key -> its stored trace's id
    sent: dict[int, dict[str, Any]] = field(default_factory=dict)  # seq -> payload, until stored (or refused)
    keys: dict[int, str] = field(default_factory=dict)  # seq -> record key, until stored (or refused)
    next_seq: int = 0


@dataclass(frozen=True)
class _Posted:
    """A call sent to the writer process and not answered yet."""

    name: str
    wait: bool
    token: str | None
    then: Callable[[Any], None] | None


class TraceWriter:
    """The run's side of the process's trace writer (see the module docstring): ``process`` or ``thread``."""

    def __init__(self, mode: str) -> None:
        self.pid = os.getpid()
        self._sinks: dict[int, _Sink] = {}
        self._lock = threading.Condition()  # the sinks' state; replies come in on another thread
        self._send_lock = threading.Lock()  # messages leave in order, one at a time
        self._progress = time.monotonic()
        self._closing = False
        self.serves_store = False  # the store's calls are made in its process (:func:`start_tracking_process`)
        self._posted: dict[int, _Posted] = {}  # a call's seq -> what it is, until it is answered
        self._answers: dict[int, tuple[bool, Any]] = {}  # a waited-for call's seq -> its answer, until taken
        self._ids: dict[str, str | None] = {}  # a token -> the id of the run its call started (None: not started)
        self._futures: dict[str, Future[str | None]] = {}  # a token -> its id's future (:meth:`run_future`)
        self._calls = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._send: Callable[[tuple[Any, ...]], None]
        if mode == "process":
            try:
                self._send = self._start_process()
                return
            except Exception as exc:  # no process can start here: a thread writes
                logger.info("no trace writer process (%s): traces are written in this process", text(exc))
        self._send = self._start_thread()

    @property
    def mode(self) -> str:
        return "process" if self._process is not None and self._process.poll() is None else "thread"

    def open(self, context: TraceContext, trace_ids: dict[str, str] | None = None) -> int:
        """A new sink of ``context``'s run; ``trace_ids`` gets each record key's trace id as its trace is stored."""
        with self._send_lock:
            with self._lock:
                sink = len(self._sinks)
                self._sinks[sink] = _Sink(context, trace_ids if trace_ids is not None else {})
            self._post(("open", sink, self._context_for(context)))
        return sink

    def add(self, sink: int, payload: dict[str, Any], key: str | None = None) -> None:
        """Hand over one record's trace (``key``: its record key, under which its trace id is kept once stored)."""
        with self._send_lock:
            with self._lock:
                s = self._sinks[sink]
                seq, s.next_seq = s.next_seq, s.next_seq + 1
                s.sent[seq] = payload
                if key is not None:
                    s.keys[seq] = key
            self._post(("trace", sink, seq, payload))

    def call(
        self,
        name: str,
        args: tuple[Any, ...],
        *,
        wait: bool = True,
        token: str | None = None,
        then: Callable[[Any], None] | None = None,
    ) -> Any:
        """``runs.<name>(*args)`` made in the writer process, in the order of everything sent to it. ``wait``: waited
        for — what it returns, or what it raised raised here; :class:`ConnectionError` when the process is gone before
        it answered. Else it is sent and left: ``then`` gets what it returns, what it raises is a warning, and a run it
        starts is named by ``token`` (:data:`~.tracker.TOKEN`) until :meth:`run_future` has its id."""
        with self._send_lock:
            with self._lock:
                seq, self._calls = self._calls, self._calls + 1
                self._posted[seq] = _Posted(name, wait, token, then)
            self._post(("call", seq, name, args, token))
        if not wait:
            return None
        with self._lock:
            while seq not in self._answers and self._process is not None:
                self._lock.wait(timeout=1.0)
            if seq not in self._answers:
                self._posted.pop(seq, None)
                raise ConnectionError(f"the tracking process stopped before it answered {name}")
            ok, value = self._answers.pop(seq)
        if not ok:
            raise value
        return value

    def run_future(self, token: str) -> Future[str | None]:
        """The id of the run started under ``token``, as a future: done once the process answered (None when it could
        not start the run, or is gone)."""
        with self._lock:
            future = self._futures.setdefault(token, Future())
            if token in self._ids or self._process is None:
                _settle_future(future, self._ids.get(token))
            return future

    def known(self, token: str) -> str | None:
        """The id of the run started under ``token``, if the process answered already (not waited for)."""
        with self._lock:
            return self._ids.get(token)

    def settle(self) -> None:
        """Until every call sent is answered (or the process is gone)."""
        with self._lock:
            while self._posted and self._process is not None:
                self._lock.wait(timeout=1.0)

    def wait(self, sink: int) -> None:
        """Until every trace added to ``sink`` is stored or warned about (or the writer made no progress for
        :data:`STALL_SECONDS`: each is then warned about as not confirmed)."""
        with self._lock:
            s = self._sinks[sink]
            while s.sent and time.monotonic() - self._progress < STALL_SECONDS:
                self._lock.wait(timeout=1.0)
            for payload in s.sent.values():
                _warn(s.context, str(payload["id"]), f"not confirmed stored after {STALL_SECONDS:.0f} s")
            s.sent.clear()
            s.keys.clear()

    # ----------------------------------------------------------------------------------------- writers

    def _post(self, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # the writer process is gone: the failover sends it again
            self._send(message)

    def _context_for(self, context: TraceContext) -> TraceContext | dict[str, Any]:
        """A sink's context as its writer takes it: itself (a thread), or its fields (a process, which makes its
        own client of the run's tracking store)."""
        if self._process is None:
            return context
        fields = {k: v for k, v in vars(context).items() if k != "client"}
        fields["tracking_uri"] = context.tracking_uri or getattr(context.client, "tracking_uri", None)
        return fields

    def _done(self, message: tuple[Any, ...]) -> None:
        """A batch stored (``done``, sink, its last seq, its failures): warned about, forgotten, waiters woken; or a
        call answered (``answer``, its seq, ok, its value)."""
        if message[0] == "answer":
            self._answered(*message[1:])
            return
        _, sink, seq, failures, stored = message
        with self._lock:
            s = self._sinks[sink]
            for done, trace_id in stored:
                if done in s.keys:
                    s.trace_ids[s.keys[done]] = trace_id
            for key in [k for k in s.sent if k <= seq]:
                del s.sent[key]
                s.keys.pop(key, None)
            for item, why in failures:
                _warn(s.context, item, why)
            self._progress = time.monotonic()
            self._lock.notify_all()

    def _answered(self, seq: int, ok: bool, value: Any) -> None:
        """A call answered: its caller woken (a call waited for), or what it returned handed on and what it raised
        warned about (a call left), before it counts as answered (:meth:`settle`)."""
        with self._lock:
            posted = self._posted[seq]
            if posted.token is not None:
                self._ids[posted.token] = value if ok else None
                if posted.token in self._futures:
                    _settle_future(self._futures[posted.token], self._ids[posted.token])
            if posted.wait:
                self._answers[seq] = (ok, value)
        try:
            if not posted.wait and not ok:
                logger.warning("could not write to MLflow (%s): %s", posted.name, text(value))
            elif not posted.wait and posted.then is not None:
                posted.then(value)
        finally:
            with self._lock:
                del self._posted[seq]
                self._lock.notify_all()

    def _start_thread(self) -> Callable[[tuple[Any, ...]], None]:
        inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        batcher = Batcher(self._done)

        def write() -> None:
            while True:
                batcher.handle(waiting(inbox))

        threading.Thread(target=write, name="dspy-for-traces", daemon=True).start()
        return inbox.put

    def _start_process(self) -> Callable[[tuple[Any, ...]], None]:
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[3])  # where this dspy_for is imported from
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-c", BOOT, str(theirs.fileno())],  # -P: not the working directory's modules
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip
        conn = Connection(os.dup(ours.fileno()))  # ``ours`` kept: shutting it down is the writer's end-of-input

        def send(message: tuple[Any, ...]) -> None:
            conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

        def read() -> None:
            with contextlib.suppress(EOFError, OSError):
                while True:
                    self._done(conn.recv())
            self._failover()

        threading.Thread(target=read, name="dspy-for-trace-replies", daemon=True).start()
        atexit.register(self._close, ours)
        return send

    def _failover(self) -> None:
        """The writer process is gone: a thread writes from now on, beginning with every trace not stored yet."""
        with self._send_lock:
            if self._closing or self.pid != os.getpid():
                return
            code = self._process.poll() if self._process is not None else None
            logger.warning("the tracking process stopped (exit %s): this process writes its traces and store", code)
            with self._lock:
                self._process = None
                self._lock.notify_all()  # a call waiting for its answer is made here instead
                for token, future in self._futures.items():  # a run it had not answered for: not started
                    _settle_future(future, self._ids.get(token))
            self._send = self._start_thread()
            with self._lock:
                again = [(sink, s.context, sorted(s.sent.items())) for sink, s in self._sinks.items()]
            for sink, context, sent in again:
                self._send(("open", sink, context))
                for seq, payload in sent:
                    self._send(("trace", sink, seq, payload))

    def _close(self, ours: socket.socket) -> None:
        """At exit: the writer process is told there is nothing more (its input ends) and ends; while it still holds
        traces not stored (a sink that never waited for them) or calls not made, it is waited for, at most
        :data:`STALL_SECONDS`."""
        if self.pid != os.getpid() or self._process is None:
            return
        self._closing = True
        with contextlib.suppress(OSError):
            ours.shutdown(socket.SHUT_WR)
        with self._lock:
            pending = bool(self._posted) or any(s.sent for s in self._sinks.values())
        if pending:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=STALL_SECONDS)


def _settle_future(future: Future[str | None], value: str | None) -> None:
    if not future.done():
        future.set_result(value)


def _warn(context: TraceContext, item: str, why: str) -> None:
    logger.warning(
        "could not log the trace of item %s of %s on %s to MLflow: %s",
        item,
        context.label,
        context.dataset,
        redact(why),
    )


_WRITER: dict[str, TraceWriter] = {}
_WRITER_LOCK = threading.Lock()


def start_tracking_process() -> TraceWriter:
    """Start this process's trace writer now, as the process that also serves its tracking store: MLflow's runs,
    params, metrics, tags, artifacts and dataset inputs (:mod:`.runs`) are then written there, and this process never
    imports MLflow for them. The command line calls it first, so that process imports MLflow and opens its store
    while the command imports the rest. Where no process can start (or with ``DSPY_FOR_TRACE_WRITER=thread``), the
    store is served here as before."""
    writer = trace_writer()
    writer.serves_store = writer.mode == "process"
    return writer


def known_run(token: str) -> str | None:
    """The id of the run this process's tracking process started under ``token``, if it answered (even if it stopped
    since)."""
    writer = _WRITER.get("writer")
    return writer.known(token) if writer is not None else None


def store_server() -> TraceWriter | None:
    """The process serving this process's tracking store (:func:`start_tracking_process`), while it runs; else None."""
    writer = _WRITER.get("writer")
    if writer is None or not writer.serves_store or writer.pid != os.getpid() or writer.mode != "process":
        return None
    return writer


def trace_writer() -> TraceWriter:
    """This process's trace writer, started on first use (a new one in a forked child: its parent's is not its own)."""
    with _WRITER_LOCK:
        writer = _WRITER.get("writer")
        if writer is None or writer.pid != os.getpid():
            mode = os.environ.get(MODE_ENV, "process").strip().lower()
            writer = _WRITER["writer"] = TraceWriter("thread" if mode == "thread" else "process")
        return writer
