"""Which item starts next when several methods share one pool of threads: the one with the most work left.

A comparison's methods cost very different amounts per item (FOR-Prompting's debate several times a CoT answer).
Started one of each in turn, the costly method's last items start as late as the cheap ones' and the run waits
for them alone at its end. :class:`WorkQueue` starts, on each free thread, an item of the feed with the most work
left — its items left times its cost per item — so costly items start early, cheap ones fill the threads around
them, and every feed ends at about the same time. A feed's cost per item is the LM tokens its finished items took
(their mean); before any has finished it is its method's calls per item (the registry's count for its options) at
the tokens per call measured so far in the run. Feeds of equal work left take turns, in the order given. Which
item starts when changes no record: each item is run and stored on its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dspy_for.errors import ConfigError
from dspy_for.experiments.methods import get_method
from dspy_for.lm.usage import CallRecord

__all__ = ["WorkQueue", "calls_per_item"]

P = TypeVar("P")
U = TypeVar("U")


def calls_per_item(method: str, options: dict[str, object]) -> float:
    """A method's typical LM calls per item with ``options`` (the middle of the registry's fewest–most, summed
    over its roles; 1 when the registry cannot say)."""
    try:
        counts = get_method(method).calls_per_item(options)
    except ConfigError:  # only an ordering hint: a method the registry cannot count runs all the same
        return 1.0
    return max(1.0, sum((lo + hi) / 2 for lo, hi in counts.values()))


@dataclass
class _Work:
    units: deque[Any]
    prior_calls: float
    items: int = 0  # finished items
    tokens: int = 0  # their LM tokens


class WorkQueue(Generic[P, U]):
    """The items of several feeds (``feeds``: each a feed and its units, in order; ``prior_calls``: a feed's calls
    per item before any of its items has finished), handed out most-work-left first (see the module docstring)."""

    def __init__(self, feeds: Sequence[tuple[P, Sequence[U]]], prior_calls: Callable[[P], float]) -> None:
        self._feeds = [feed for feed, _ in feeds]
        self._work = {id(feed): _Work(deque(units), prior_calls(feed)) for feed, units in feeds}

    def next(self, may_start: Callable[[P], bool]) -> tuple[P, U] | None:
        """The next item to start, of a feed ``may_start`` allows (None when there is none)."""
        open_feeds = [f for f in self._feeds if self._work[id(f)].units and may_start(f)]
        if not open_feeds:
            return None
        feed = max(open_feeds, key=self._work_left)  # the first of equals: they take turns as their work drops
        unit = self._work[id(feed)].units.popleft()
        self._feeds.remove(feed)  # an equal feed goes before it next time
        self._feeds.append(feed)
        return feed, unit

    def finished(self, feed: P, calls: Sequence[CallRecord]) -> None:
        """An item of ``feed`` finished with ``calls``: its cost per item is measured from now on (an item that
        spent no tokens, one whose LM failed at once, says nothing about what its feed's items cost)."""
        tokens = sum(c.prompt_tokens + c.completion_tokens for c in calls)
        if tokens:
            work = self._work[id(feed)]
            work.items += 1
            work.tokens += tokens

    def _work_left(self, feed: P) -> float:
        return len(self._work[id(feed)].units) * self._per_item(self._work[id(feed)])

    def _per_item(self, work: _Work) -> float:
        if work.items:
            return work.tokens / work.items
        measured = [w for w in self._work.values() if w.items]
        calls = sum(w.prior_calls * w.items for w in measured)
        per_call = sum(w.tokens for w in measured) / calls if calls else 1.0  # tokens per call so far, else calls
        return work.prior_calls * per_call
