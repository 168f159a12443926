"""What the run core hands each finished record to, as it lands: the :class:`Sink` protocol, the :class:`Landed`
record, the progress bar, and SIGTERM turned into an interrupt so every sink closes as on Ctrl-C."""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal, Protocol

from tqdm.auto import tqdm

from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.lm.transport import throttle_text
from dspy_for.lm.usage import CallRecord

__all__ = [
    "Landed",
    "ProgressBar",
    "RunInterrupted",
    "RunStatus",
    "Sink",
    "StopRule",
    "critical",
    "interruptible",
    "progress_text",
]

#: how a run ended, in MLflow's words: every item ran, the run raised or every item failed, or it was stopped
RunStatus = Literal["FINISHED", "FAILED", "KILLED"]


@dataclass(frozen=True)
class Landed:
    """One finished record as a sink sees it."""

    item: ItemResult
    calls: tuple[CallRecord, ...]  # this run's LM calls for the item (method, then judge), in order; () if reused
    reused: bool  # taken from the results store, not run now
    changed: bool  # a new record or a new verdict: the results store keeps it

    @functools.cached_property
    def line(self) -> str:
        """The record as one JSON text, every secret masked (:meth:`~.records.ItemResult.to_json`): made once, for
        every sink that writes it (the results store, the trace writer)."""
        return self.item.to_json()


class Sink(Protocol):
    """Receives every record of one method's run as it lands, then the whole result once, however the run ends."""

    def add(self, landed: Landed) -> None: ...

    def close(self, result: MethodResult, status: RunStatus) -> None: ...


#: ``stop(result_so_far) -> True`` ends a run early (checked after each landed record): a sweep's pruner, a
#: sequential test
StopRule = Callable[[MethodResult], bool]


def progress_text(records: Iterable[ItemResult]) -> str:
    """``acc 42.0% of 50 scored, 2 failed``: accuracy over scored items only, failures counted apart."""
    tally = _Tally()
    for r in records:
        tally.add(r)
    return tally.text()


class _Tally:
    """Running counts behind :func:`progress_text` (a bar updates them per record, never re-reading them all)."""

    def __init__(self) -> None:
        self.total, self.scored, self.failed = 0.0, 0, 0

    def add(self, record: ItemResult) -> None:
        if record.failed:
            self.failed += 1
        else:
            self.total += record.score
            self.scored += 1

    def text(self) -> str:
        text = f"acc {self.total / self.scored:.1%} of {self.scored} scored" if self.scored else "none scored yet"
        return text + (f", {self.failed} failed" if self.failed else "")


class ProgressBar:
    """A tqdm bar per method run with the running accuracy of scored items (failures counted apart) and, while an
    endpoint rate-limits, its current concurrency: shown only while items actually run, so a run answered from
    stored results stays quiet."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label, self.enabled = label, enabled
        self._bar: Any = None
        self._tally = _Tally()

    def expect(self, n: int) -> None:
        if not self.enabled or n <= 0:
            return
        if self._bar is None:
            self._bar = tqdm(total=n, desc=self.label, dynamic_ncols=True)
        else:
            self._bar.total += n
            self._bar.refresh()

    def add(self, landed: Landed) -> None:
        self._tally.add(landed.item)
        if self._bar is not None and not landed.reused:
            throttled = throttle_text()  # an endpoint answering with rate limits: at what concurrency it runs now
            text = self._tally.text() + (f"; {throttled}" if throttled else "")
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(1)

    def close(self, result: MethodResult, status: RunStatus) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM (a scheduler's or ``timeout``'s stop), raised in the main thread as Ctrl-C raises
    ``KeyboardInterrupt``, so a run stopped either way closes its sinks the same way (MLflow: KILLED)."""


#: the main thread's critical sections (writes to the results store and the tracking store) and the signal that
#: arrived inside one, raised when the outermost section ends
_critical: dict[str, Any] = {"depth": 0, "pending": None}


def _interrupt(signum: int) -> KeyboardInterrupt:
    if signum == signal.SIGTERM:
        return RunInterrupted(f"stopped by signal {signal.Signals(signum).name}")
    return KeyboardInterrupt()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _critical["depth"] > 0:  # never mid-write: a write torn by an exception can leave SQLite locked
        _critical["pending"] = signum
        return
    raise _interrupt(signum)


@contextmanager
def interruptible() -> Iterator[None]:
    """Inside the block, in the main thread, Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` and SIGTERM
    :class:`RunInterrupted` — at once during an LM call, but only after the write in progress when one arrives
    inside a :func:`critical` section (a record being stored, a trace or an MLflow status being written)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) is _on_signal:
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def critical() -> Iterator[None]:
    """A write that an interrupt must not cut in two (see :func:`interruptible`); the interrupt follows it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _critical["depth"] += 1
    try:
        yield
    finally:
        _critical["depth"] -= 1
        pending = _critical["pending"]
        if _critical["depth"] == 0 and pending is not None:
            _critical["pending"] = None
            raise _interrupt(pending)
