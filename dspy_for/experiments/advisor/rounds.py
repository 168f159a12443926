"""``advise``'s sequential rounds: the candidates that fit the budget run the same items batch by batch, every pair
of them is tested by an anytime-valid paired test, and the rounds stop as soon as the data settles which to run.

After each batch (all candidates still in the running fed the same items, in the seeded order):

1. every pair still open gets its new paired items (items both scored, after the pilot; a failed item is an
   error, never an outcome of a test) — :class:`dspy_for.stats.PairedSequentialTest` at ``alpha / pairs``;
2. a candidate resolved worse than another is dropped (the budget is checked once, on the pilot: a cost that drifts
   a little over it later is reported with the answer, never a reason to throw away what was measured);
3. the rounds stop when one candidate is left (*resolved best*), or when every other one's difference from the
   leader has an anytime-valid interval inside ±``margin`` (*indistinguishable*: then the cheapest wins — with a
   ``volume``, the lowest cost per correct answer over it, compile included: :mod:`.volume`), or at
   the end of the items / ``max_items`` / the timeout / ``max_cost`` (*unresolved*: the leader, said so).

With epochs (several answers per item) each item's value is reduced over its epochs first; under the ``mean``
reducer that value lies in [0, 1] and the tests are the bounded ones (``kind="bounded"``), else binary. Once the
run's :class:`~dspy_for.experiments.core.SpendLimit` is reached no item starts and the rounds end unresolved
(``stopped_by_cost``; a pilot cut short by it settles nothing either, since some candidates were not measured).

The pilot's items measure cost only (they choose which candidates enter); the tests start after them, so which
pairs are tested never depends on the items they are tested on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Literal

import dspy

from dspy_for.experiments.advisor.result import (
    NOT_RUN,
    RUNNING,
    WORSE,
    CandidateOutcome,
    CandidatePair,
    flipped,
)
from dspy_for.experiments.advisor.volume import cheapest_at
from dspy_for.experiments.core import MethodResult
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.sequential import paired_sequence
from dspy_for.experiments.tracked_run import OpenCell, TrackedRun
from dspy_for.stats import PairedSequentialTest, SequentialResult, split_alpha

__all__ = ["Ending", "Rounds", "leader", "points"]

logger = logging.getLogger("dspy_for.advise")


def points(x: float) -> str:
    return f"{100 * x:+.1f}"


def interval(r: SequentialResult) -> str:
    return f"Δ {points(r.diff)} pts, anytime-valid CI [{points(r.low)}, {points(r.high)}]"


def leader(outcomes: Sequence[CandidateOutcome]) -> CandidateOutcome:
    """The most accurate (over the items it scored), then the cheaper."""
    return max(outcomes, key=lambda c: (c.result.accuracy, -c.result.tokens_per_item))  # type: ignore[union-attr]


def cheapest(outcomes: Sequence[CandidateOutcome]) -> CandidateOutcome:
    return min(outcomes, key=lambda c: (c.result.tokens_per_item, -c.result.accuracy))  # type: ignore[union-attr]


class Ending:
    """How the rounds ended: the recommended label (None: nothing left to recommend), resolved or not, and why."""

    def __init__(self, label: str | None, resolved: bool, how: str) -> None:
        self.label, self.resolved, self.how = label, resolved, how


class Rounds:
    """The rounds over ``order`` (the items after the pilot) for the candidates in ``outcomes`` with status
    :data:`RUNNING`, each an open cell of ``tracked`` (``cells``, by label), fed side by side through the run's
    one loop (module docstring)."""

    def __init__(
        self,
        outcomes: Sequence[CandidateOutcome],
        tracked: TrackedRun,
        cells: dict[str, OpenCell],
        order: Sequence[dspy.Example],
        *,
        alpha: float,
        margin: float,
        batch_size: int,
        expired: Callable[[], bool],
        kind: Literal["binary", "bounded"] = "binary",
        volume: int | None = None,
        dataset: str = "",
    ) -> None:
        self.outcomes = {c.label: c for c in outcomes}
        self.volume, self.dataset = volume, dataset
        self.tracked, self.cells, self.order = tracked, cells, list(order)
        self.limit = tracked.limit
        self.margin, self.batch_size, self.expired = margin, batch_size, expired
        labels = [c.label for c in outcomes if c.status == RUNNING]
        self.pairs = list(combinations(labels, 2))
        self.pair_alpha = split_alpha(alpha, len(self.pairs)) if self.pairs else None
        self.tests = {p: PairedSequentialTest(kind, self.pair_alpha or alpha) for p in self.pairs}
        self._fed = dict.fromkeys(self.pairs, 0)

    # ----------------------------------------------------------------------------------------- state

    @property
    def active(self) -> list[CandidateOutcome]:
        return [c for c in self.outcomes.values() if c.status == RUNNING]

    def result(self, label: str) -> MethodResult:
        return self.cells[label].result

    def test(self, a: str, b: str) -> SequentialResult:
        """The test of ``a`` against ``b`` (``diff`` = a − b), whichever way round it was run."""
        if (a, b) in self.tests:
            return self.tests[(a, b)].result
        return flipped(self.tests[(b, a)].result)

    @property
    def out_of_money(self) -> bool:
        return self.tracked.out_of_money

    def pair_outcomes(self) -> list[CandidatePair]:
        return [CandidatePair(a, b, self.tests[(a, b)].result) for a, b in self.pairs]

    # ------------------------------------------------------------------------------------------ run

    def run(self) -> Ending:
        """Run batches until the data settles which candidate to run, or nothing is left to run."""
        for c in self.active:
            c.result = self.result(c.label)
        cut = self.limit.not_started > 0  # max_cost left pilot items out
        ending = None if cut else self._settled()
        start = 0
        while ending is None and start < len(self.order) and not self.expired() and not self.out_of_money:
            batch = self.order[start : start + self.batch_size]
            active = self.active
            self.tracked.feed([self.cells[c.label] for c in active], batch, stop=lambda _r: self.expired())
            for c in active:
                c.result = self.result(c.label)
            start += len(batch)
            self._update(self.order[:start])
            ending = self._settled()
            left = ", ".join(c.label for c in self.active)
            logger.info("after %d item(s) past the pilot: in the running: %s", start, left or "none")
        if ending is None:
            self.tracked.leave_out((len(self.order) - start) * len(self.active))
        return ending or self._unresolved(start)

    def _update(self, seen: Sequence[dspy.Example]) -> None:
        """New paired items into every open pair's test; drop what is resolved worse."""
        active = {c.label for c in self.active}
        losers: dict[str, str] = {}
        for a, b in self.pairs:
            if a not in active or b not in active:
                continue  # a pair with a dropped candidate stays as it stood when it left
            paired = paired_sequence(self.result(a), self.result(b), seen)
            r = self.tests[(a, b)].extend(paired[self._fed[(a, b)] :])
            self._fed[(a, b)] = len(paired)
            if r.resolved:
                winner, loser = (a, b) if r.direction > 0 else (b, a)
                losers.setdefault(
                    loser, f"resolved worse than {winner} at n={r.stopped_at} ({interval(self.test(loser, winner))})"
                )
        if len(losers) == len(active):  # a cycle at the tests' error rate: keep the most accurate
            losers.pop(leader([c for c in self.active if c.measured] or self.active).label)
        for label, reason in losers.items():
            self._drop(label, WORSE, reason)

    def _drop(self, label: str, status: str, reason: str) -> None:
        c = self.outcomes[label]
        c.status, c.reason = status, reason
        logger.info("%s dropped: %s", label, reason)

    def _nothing_left(self) -> Ending:
        if any(c.status == NOT_RUN for c in self.outcomes.values()):
            first = "max_cost was reached" if self.out_of_money else "the timeout came"
            return Ending(None, False, f"{first} before any candidate was measured within the budget")
        return Ending(None, False, "no candidate is left within the budget")

    def _settled(self) -> Ending | None:
        active = [c for c in self.active if c.measured]
        if not active:
            return self._nothing_left()
        if len(active) == 1:
            only = active[0].label
            if not self.pairs:
                return Ending(only, True, "the only candidate measured within the budget")
            worse = ", ".join(c.label for c in self.outcomes.values() if c.status == WORSE)
            return Ending(only, True, f"resolved best: every other candidate was resolved worse ({worse})")
        top = leader(active)
        others = [c for c in active if c is not top]
        if all(self._within_margin(c.label, top.label) for c in others):
            pick = cheapest(active) if self.volume is None else cheapest_at(active, self.volume)
            how = (
                f"indistinguishable: every other candidate's difference from {top.label} has its anytime-valid CI "
                f"inside ±{100 * self.margin:g} points, so the cheapest wins"
            )
            if self.volume is not None:
                how += f" (the lowest cost per correct answer over {self.volume:,} items, compile included)"
            return Ending(pick.label, True, how)
        return None

    def _within_margin(self, a: str, b: str) -> bool:
        r = self.test(a, b)
        return r.n > 0 and -self.margin <= r.low and r.high <= self.margin

    def _unresolved(self, used: int) -> Ending:
        limit = self.limit
        active = [c for c in self.active if c.measured]
        if not active:
            return self._nothing_left()
        top = leader(active)
        if limit.stopped:
            why = (
                f"max_cost {money(limit.max_cost, as_given=True)} was reached ({money(limit.total, decimals=4)} spent) "
                + ("on the pilot" if not used else f"after {used} item(s) past the pilot")
            )
            return Ending(top.label, False, f"unresolved: {why}; {top.label} leads, not yet resolved best")
        why = "the timeout" if self.expired() else "the last item (`max_items` or the end of the data)"
        how = f"unresolved: {used} item(s) past the pilot ran before {why}; {top.label} leads, not yet resolved best"
        return Ending(top.label, False, how)
