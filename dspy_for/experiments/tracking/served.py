"""Where the tracking store is served: :mod:`.store`'s calls (:mod:`.runs`) made in this process, or sent to the
command line's tracking process (:func:`~.writer.start_tracking_process`) when one serves this process.

There, a call that returns nothing is sent and left (in the order of everything sent; what it raises is a warning),
except inside :func:`waited` (a report, which says itself when it could not be written); a run is started under a
token (:data:`~.tracker.TOKEN`) that every later call may name it by, so this process never waits on MLflow to start its
work; :func:`run_id` gives the run's id once the tracking process answered, and :func:`settle` waits until it answered
everything sent.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.core.heap import importing
from dspy_for.experiments.tracking import runs
from dspy_for.experiments.tracking.tracker import TOKEN, named

if TYPE_CHECKING:
    from dspy_for.experiments.tracking.writer import TraceWriter

__all__ = ["STORE", "call", "elsewhere", "future_id", "here", "run_id", "settle", "start_run", "waited", "write"]

logger = logging.getLogger("dspy_for.tracking")

#: the store :func:`~.store.setup_tracking` opened last: its ``uri`` and ``experiment``, and whether MLflow ``here``, in
#: this process, points at them (the command line's tracking process may have opened it)
STORE: dict[str, Any] = {}
_WAITED: contextvars.ContextVar[bool] = contextvars.ContextVar("dspy_for_tracking_waited", default=False)


def _server() -> TraceWriter | None:
    from dspy_for.experiments.tracking.writer import store_server

    return store_server()


def elsewhere() -> bool:
    """Whether the command line's tracking process serves this process's store (MLflow is not loaded here for it)."""
    return _server() is not None


def call(name: str, *args: Any, then: Callable[[Any], None] | None = None, left: bool = False) -> Any:
    """``runs.<name>(*args)`` where the store is served, waited for (``left`` and served elsewhere: sent and left,
    ``then`` getting what it returns); its value."""
    server = _server()
    if server is not None:
        try:
            return server.call(name, args, wait=not left, then=then)
        except ConnectionError:  # the tracking process is gone: this process serves the store from now on
            logger.warning("the tracking process stopped: MLflow is written from this process")
    args = _known(args)
    if _pending(args):  # a run the tracking process did not start before it stopped: nothing to write to
        logger.warning("could not write to MLflow (%s): its run was not started", name)
        return None
    here(opening=name == "open_store")
    value = getattr(runs, name)(*args)
    if then is not None:
        then(value)
    return value


def _known(value: Any) -> Any:
    """``value`` with each token of a run the tracking process started (before it stopped) replaced by its id."""
    from dspy_for.experiments.tracking.writer import known_run

    return named(value, known_run)


def _pending(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith(TOKEN)
    if isinstance(value, dict):
        return any(_pending(v) for v in value.values())
    return isinstance(value, list | tuple) and any(_pending(v) for v in value)


def write(name: str, *args: Any) -> None:
    """A call that returns nothing: left when served elsewhere (outside :func:`waited`), else waited for."""
    call(name, *args, left=not _WAITED.get())


def start_run(name: str, experiment: str, tags: dict[str, str]) -> str:
    """A new run's id; served elsewhere, a token that stands for it (:func:`run_id` gives the id)."""
    server = _server()
    if server is not None:
        token = f"{TOKEN}{uuid.uuid4().hex}"
        server.call("start_run", (name, experiment, tags), wait=False, token=token)
        return token
    return str(call("start_run", name, experiment, tags))


def run_id(ref: str | None) -> str | None:
    """The id of the run ``ref`` names (a token: once started, waited for; None when it could not be)."""
    found = future_id(ref)
    return found.result() if isinstance(found, Future) else found


def future_id(ref: str | None) -> str | Future[str | None] | None:
    """The id of the run ``ref`` names, or (a token) its future: done once the tracking process answered, with None
    when it could not start the run."""
    if ref is None or not ref.startswith(TOKEN):
        return ref
    server = _server()
    return server.run_future(ref) if server is not None else _answered(ref)


def _answered(token: str) -> str | None:
    """The id of the run started under ``token`` by a tracking process that stopped since, if it answered."""
    from dspy_for.experiments.tracking.writer import known_run

    return known_run(token)


def settle() -> None:
    """Until everything sent to the tracking process is answered (no-op when the store is served here)."""
    server = _server()
    if server is not None:
        server.settle()


@contextmanager
def waited() -> Iterator[None]:
    """Inside the block every call is waited for, so what it raises is raised in it."""
    reset = _WAITED.set(True)
    try:
        yield
    finally:
        _WAITED.reset(reset)


def here(*, opening: bool = False) -> None:
    """MLflow in this process points at the store :func:`~.store.setup_tracking` opened (``opening``: it is being
    opened here, which points it)."""
    if STORE and not STORE["here"] and not opening:
        with importing():
            runs.use_store(STORE["uri"], STORE["experiment"])
    if STORE:
        STORE["here"] = True
