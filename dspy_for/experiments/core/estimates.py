"""What a run's calls will take, estimated before it runs: :class:`Estimate` (a value, a low–high range and where it
comes from) and the measurements it is made from — stored records (:class:`ItemCost`, one per record) and per-call
averages of an LM (:class:`PerCall`).

Records give a cell's cost per item; ``n`` new items cost about ``n`` times their mean, within a 90% prediction
interval for a sum of ``n`` draws (``mean ± 1.645·sd·√(n + n²/m)`` over ``m`` stored items). A count of calls per item
from a method's options (its registry entry's ``calls``) times an LM's measured tokens per call, or a default token
count, gives the range of those counts. Every estimate is of a cold run: calls a cache will answer are not known in
advance, so none is assumed. A stored call the cache answered took next to no time: a record's seconds are those of
its other calls, scaled to all of them (none when the cache answered every call). Tokens are prompt + completion;
dollars are each role's tokens at the price the run gives that role's LM (None, never $0, when one is not priced);
LM time is the seconds the calls take one after another.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dspy_for.experiments.core.records import ItemResult
from dspy_for.lm.pricing import Price

__all__ = [
    "DEFAULT_CALL",
    "Estimate",
    "ItemCost",
    "PerCall",
    "RoleCost",
    "item_costs",
    "per_call",
    "sample_estimates",
    "sum_estimates",
]

#: the z of a two-sided 90% interval
Z90 = 1.645


@dataclass(frozen=True)
class Estimate:
    """One estimated quantity: ``value``, its range ``low``–``high`` and ``source``, where it comes from."""

    value: float
    low: float
    high: float
    source: str

    @classmethod
    def exact(cls, value: float, source: str) -> Estimate:
        return cls(value, value, value, source)

    def times(self, k: float) -> Estimate:
        return Estimate(self.value * k, self.low * k, self.high * k, self.source)

    def plus(self, other: Estimate, source: str | None = None) -> Estimate:
        """The sum of two estimates (ranges added: both at their low end, both at their high end)."""
        same = self.source if self.source == other.source else "; ".join(dict.fromkeys([self.source, other.source]))
        return Estimate(self.value + other.value, self.low + other.low, self.high + other.high, source or same)


def sum_estimates(parts: Iterable[Estimate | None], source: str) -> Estimate | None:
    """The sum of ``parts``; None if any is None (a total is never given without one of its parts)."""
    total = Estimate.exact(0.0, source)
    for part in parts:
        if part is None:
            return None
        total = total.plus(part, source)
    return total


@dataclass(frozen=True)
class RoleCost:
    """One role's calls on one item: how many, their prompt and completion tokens (cache hits at their original
    size: what a cold call costs) and seconds (as if none were a cache hit; None: the cache answered every one)."""

    calls: float
    prompt: float
    completion: float
    seconds: float | None

    @property
    def tokens(self) -> float:
        return self.prompt + self.completion


#: one item's calls, by role (as its record's ``usage`` has them)
ItemCost = Mapping[str, RoleCost]


def _role_cost(counters: Mapping[str, Any]) -> RoleCost:
    """One role's counters; its seconds those of its calls the cache did not answer, scaled to every call (a cache hit
    takes next to no time), None when the cache answered them all."""
    calls = float(counters.get("calls", 0) or 0)
    cold = calls - float(counters.get("cached_calls", 0) or 0)
    wall = float(counters.get("wall_time", 0.0) or 0.0)
    return RoleCost(
        calls=calls,
        prompt=float(counters.get("prompt_tokens", 0) or 0) + float(counters.get("cached_prompt_tokens", 0) or 0),
        completion=float(counters.get("completion_tokens", 0) or 0)
        + float(counters.get("cached_completion_tokens", 0) or 0),
        seconds=wall * calls / cold if cold > 0 else None if calls else 0.0,
    )


def item_costs(records: Iterable[ItemResult]) -> list[ItemCost]:
    """Each scored record's calls by role (a failed record is run again: it says nothing of a finished item)."""
    return [
        {r: _role_cost(c) for r, c in item.usage.items() if r != "total"}
        for item in records
        if not item.failed and item.usage
    ]


def usage_cost(usage: Mapping[str, Mapping[str, Any]]) -> ItemCost:
    """A compile's ``usage`` (``compile_usage.json``: per role and ``total``) as one :data:`ItemCost`."""
    return {r: _role_cost(c) for r, c in usage.items() if r != "total"}


def _interval(xs: Sequence[float], n: float, source: str) -> Estimate:
    """``n`` new items from ``m`` stored ones' values ``xs``: ``n`` × their mean, within a 90% prediction interval."""
    m = len(xs)
    mean = sum(xs) / m
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (m - 1)) if m > 1 else 0.0
    half = Z90 * sd * math.sqrt(n + n * n / m)
    return Estimate(n * mean, max(0.0, n * mean - half), n * mean + half, source)


@dataclass(frozen=True)
class CellEstimates:
    """A cell's calls, tokens, dollars and LM seconds (None: not priced, or no measured time)."""

    calls: Estimate
    tokens: Estimate
    usd: Estimate | None
    seconds: Estimate | None

    @classmethod
    def zero(cls, source: str) -> CellEstimates:
        e = Estimate.exact(0.0, source)
        return cls(e, e, e, e)

    def times(self, k: float) -> CellEstimates:
        return CellEstimates(
            self.calls.times(k),
            self.tokens.times(k),
            self.usd.times(k) if self.usd else None,
            self.seconds.times(k) if self.seconds else None,
        )


def item_usd(cost: ItemCost, prices: Mapping[str, Price | None]) -> float | None:
    """One item's dollars at ``prices`` (each role's; a role without one: the item is not priced)."""
    total = 0.0
    for r, c in cost.items():
        price = prices.get(r)
        if price is None:
            return None
        total += price.cost(int(c.prompt), int(c.completion))
    return total


def sample_estimates(
    costs: Sequence[ItemCost], n: int, prices: Mapping[str, Price | None], source: str
) -> CellEstimates:
    """``n`` items estimated from stored items' ``costs`` (at least one), each role priced at ``prices``."""
    calls = _interval([sum(c.calls for c in cost.values()) for cost in costs], n, source)
    tokens = _interval([sum(c.tokens for c in cost.values()) for cost in costs], n, source)
    usds = [item_usd(cost, prices) for cost in costs]
    usd = _interval([u for u in usds if u is not None], n, source) if all(u is not None for u in usds) else None
    timed = [cost for cost in costs if all(c.seconds is not None for c in cost.values())]
    seconds = _interval([sum(c.seconds or 0.0 for c in cost.values()) for cost in timed], n, source) if timed else None
    return CellEstimates(calls, tokens, usd, seconds)


@dataclass(frozen=True)
class PerCall:
    """An LM's measured (or default) prompt and completion tokens and seconds per call (None: no timed call)."""

    prompt: float
    completion: float
    seconds: float | None
    source: str
    cells: tuple[str, ...] = ()  # the cells whose records measured it (none: a default)

    @property
    def tokens(self) -> float:
        return self.prompt + self.completion


#: tokens per call when nothing measured them: a short prompt and answer (a dry run says it assumed them)
DEFAULT_CALL = PerCall(prompt=400.0, completion=200.0, seconds=None, source="default tokens")


def per_call(costs: Iterable[RoleCost], source: str, cells: Sequence[str] = ()) -> PerCall | None:
    """The average call of ``costs`` (one LM's roles across items, measured in ``cells``); None without a call."""
    costs = list(costs)
    calls = sum(c.calls for c in costs)
    if not calls:
        return None
    timed = [c for c in costs if c.seconds is not None and c.calls]
    timed_calls = sum(c.calls for c in timed)
    seconds = sum(c.seconds or 0.0 for c in timed) / timed_calls if timed_calls else None
    prompt = sum(c.prompt for c in costs) / calls
    return PerCall(prompt, sum(c.completion for c in costs) / calls, seconds, source, tuple(cells))


def counted_estimates(
    calls: Mapping[str, tuple[float, float, float]],
    per: Mapping[str, PerCall],
    prices: Mapping[str, Price | None],
    n: float,
    source: str,
) -> CellEstimates:
    """``n`` items (or runs) of ``calls`` per role (fewest, typical, most) at ``per`` role's tokens and seconds per
    call, priced at ``prices``."""
    low = {r: c[0] for r, c in calls.items()}
    mid = {r: c[1] for r, c in calls.items()}
    high = {r: c[2] for r, c in calls.items()}

    def estimate(value: Callable[[Mapping[str, float]], float | None]) -> Estimate | None:
        least, typical, most = value(low), value(mid), value(high)
        if least is None or typical is None or most is None:
            return None
        return Estimate(n * typical, n * least, n * most, source)

    def usd(counts: Mapping[str, float]) -> float | None:
        total = 0.0
        for r, k in counts.items():
            price = prices.get(r)
            if k and price is None:
                return None
            total += price.cost(int(k * per[r].prompt), int(k * per[r].completion)) if price and k else 0.0
        return total

    def seconds(counts: Mapping[str, float]) -> float | None:
        if any(k and per[r].seconds is None for r, k in counts.items()):
            return None
        return sum(k * (per[r].seconds or 0.0) for r, k in counts.items())

    calls_e = estimate(lambda counts: sum(counts.values()))
    tokens_e = estimate(lambda counts: sum(k * per[r].tokens for r, k in counts.items()))
    assert calls_e is not None and tokens_e is not None
    return CellEstimates(calls_e, tokens_e, estimate(usd), estimate(seconds))
