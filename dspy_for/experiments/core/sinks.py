"""What the run core hands each finished record to, as it lands: the :class:`Sink` protocol, the :class:`Landed`
record, the progress bar, and SIGTERM turned into an interrupt so every sink closes as on Ctrl-C."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tqdm.auto import tqdm

from dspy_for.experiments.core.records import ItemResult, MethodResult
from dspy_for.lm.usage import CallRecord

__all__ = [
    "Landed",
    "ProgressBar",
    "RunInterrupted",
    "RunStatus",
    "Sink",
    "StopRule",
    "progress_text",
    "sigterm_as_interrupt",
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


class Sink(Protocol):
    """Receives every record of one method's run as it lands, then the whole result once, however the run ends."""

    def add(self, landed: Landed) -> None: ...

    def close(self, result: MethodResult, status: RunStatus) -> None: ...


#: ``stop(result_so_far) -> True`` ends a run early (checked after each landed record): a sweep's pruner, a
#: sequential test
StopRule = Callable[[MethodResult], bool]


def progress_text(records: Iterable[ItemResult]) -> str:
    """``acc 42.0% of 50 scored, 2 failed``: accuracy over scored items only, failures counted apart."""
    records = list(records)
    scores = [r.score for r in records if not r.failed]
    failed = sum(1 for r in records if r.failed)
    text = f"acc {sum(scores) / len(scores):.1%} of {len(scores)} scored" if scores else "none scored yet"
    return text + (f", {failed} failed" if failed else "")


class ProgressBar:
    """A tqdm bar per method run with the running accuracy of scored items (failures counted apart): shown only
    while items actually run, so a run answered from stored results stays quiet."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label, self.enabled = label, enabled
        self._bar: Any = None
        self._seen: list[ItemResult] = []

    def expect(self, n: int) -> None:
        if not self.enabled or n <= 0:
            return
        if self._bar is None:
            self._bar = tqdm(total=n, desc=self.label, dynamic_ncols=True)
        else:
            self._bar.total += n
            self._bar.refresh()

    def add(self, landed: Landed) -> None:
        self._seen.append(landed.item)
        if self._bar is not None and not landed.reused:
            self._bar.set_postfix_str(progress_text(self._seen), refresh=False)
            self._bar.update(1)

    def close(self, result: MethodResult, status: RunStatus) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM (a scheduler's or ``timeout``'s stop), raised in the main thread as Ctrl-C raises
    ``KeyboardInterrupt``, so a run stopped either way closes its sinks the same way (MLflow: KILLED)."""


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise RunInterrupted(f"stopped by signal {signal.Signals(signum).name}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM raises :class:`RunInterrupted` in the main thread (elsewhere: no change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is _raise_interrupted:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
