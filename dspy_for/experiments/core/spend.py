"""What a run may spend: :class:`SpendLimit` (``max_cost``), shared by every method and dataset of a run."""

from __future__ import annotations

from collections.abc import Iterable

from dspy_for.lm.usage import CallRecord

__all__ = ["SpendLimit"]


class SpendLimit:
    """What a run may spend, in USD (``max_cost``; None: no limit). Every landed record's LM calls that were not
    cache hits add their cost; once :attr:`reached`, :func:`~dspy_for.experiments.core.run.feed_together` starts
    no item (those running finish). A call without a price adds nothing and is counted in ``unpriced_calls``."""

    def __init__(self, max_cost: float | None = None) -> None:
        self.max_cost = max_cost
        self.spent = 0.0
        self.unpriced_calls = 0
        self.not_started = 0  # items left out because the limit was reached

    def add(self, calls: Iterable[CallRecord]) -> None:
        for call in calls:
            if call.ok and not call.cache_hit:
                if call.cost is None:
                    self.unpriced_calls += 1
                else:
                    self.spent += call.cost

    @property
    def reached(self) -> bool:
        return self.max_cost is not None and self.spent >= self.max_cost
