"""What a run may spend: :class:`SpendLimit` (``max_cost``), one per run, shared by every method and dataset of a
comparison, every item of an ``advise`` and every trial and worker process of a sweep; and :func:`money`, how
every table and line writes dollars."""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING

from dspy_for.lm.usage import CallRecord

if TYPE_CHECKING:
    from dspy_for.experiments.core.compile_step import CompileCost

__all__ = ["SpendLimit", "money"]


class SpendLimit:
    """What a run may spend, in USD (``max_cost``; None: no limit). Every landed record's LM calls that were not
    cache hits add their cost to ``spent``; ``earlier`` is what others sharing the limit spent before (a sweep's
    other trials and worker processes, read from its study). Once :attr:`reached`, no item starts (those running
    finish) and each item left out counts in ``not_started`` (``left_out``: what the count is, said in the spend
    line; a sweep counts its unfinished trials). A call without a price adds nothing and is counted in
    ``unpriced_calls``. A compile this run made counts too (:meth:`add_compile`); a compile is never cut short, but
    none starts once the limit is reached."""

    def __init__(
        self, max_cost: float | None = None, *, earlier: float = 0.0, left_out: str = "item(s) not started"
    ) -> None:
        self.max_cost, self.earlier, self.left_out = max_cost, earlier, left_out
        self.spent = 0.0
        self.unpriced_calls = 0
        self.not_started = 0

    def add(self, calls: Iterable[CallRecord]) -> None:
        for call in calls:
            if call.ok and not call.cache_hit:
                if call.cost is None:
                    self.unpriced_calls += 1
                else:
                    self.spent += call.cost

    def add_compile(self, cost: CompileCost) -> None:
        """What a compile step spent: nothing when its program was reused from the cache (it was spent before)."""
        if cost.reused:
            return
        usd = cost.spent_usd
        if usd is None:
            self.unpriced_calls += cost.total.calls
        else:
            self.spent += usd

    @property
    def total(self) -> float:
        """USD spent under this limit: this process's and, for a shared limit, the others' before."""
        return self.earlier + self.spent

    @property
    def reached(self) -> bool:
        return self.max_cost is not None and self.total >= self.max_cost

    @property
    def stopped(self) -> bool:
        """``max_cost`` was reached with work left out (``stopped_by_cost`` of every outcome): a re-run with a
        higher one resumes it, finished work kept."""
        return self.reached and self.not_started > 0

    def line(self) -> str:
        """``spent $0.0123 of max_cost $5.00``, and when it stopped the run, what it left out ('' without a limit)."""
        if self.max_cost is None:
            return ""
        line = f"spent {money(self.total, decimals=4)} of max_cost {money(self.max_cost, as_given=True)}"
        if self.stopped:
            line += f": reached, {self.not_started} {self.left_out} (a re-run with a higher max_cost resumes)"
        elif self.reached:
            line += ": reached, with nothing left to start"
        return line


def money(usd: float | None, *, decimals: int = 2, significant: int = 2, as_given: bool = False) -> str:
    """Dollars as every table and line writes them, never with an exponent: at least ``decimals`` places, and as
    many more as show ``significant`` digits (``$1,234.50``, ``$0.094``, ``$0.000094``); ``as_given``: an amount the
    user gave (a budget, a ``max_cost``) with every digit it was given (``$0.0005005``, ``$5``); '-' when not priced
    (absent, never $0)."""
    if usd is None or math.isnan(usd):
        return "-"
    if usd == 0:
        return "$0"
    if as_given:
        return f"${Decimal(repr(float(usd))).normalize():f}"
    places = max(decimals, significant - 1 - math.floor(math.log10(abs(usd))))
    return f"${usd:,.{places}f}"
