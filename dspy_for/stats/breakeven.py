"""Break-even volume: after how many items a method with a larger fixed cost (a compile) has the lower total cost
per correct answer.

A method that costs ``F`` once and ``c`` per item, and answers a share ``p`` of the items correctly, pays
``(F + c·N) / (p·N)`` per correct answer over ``N`` items. Method a is cheaper per correct answer than b at ``N`` iff::

    (F_a + c_a·N) · p_b  <  (F_b + c_b·N) · p_a
    ⟺  N · K > D,   K = c_b·p_a − c_a·p_b,   D = F_a·p_b − F_b·p_a

so, for every ``N > 0``, a is cheaper after ``V = max(0, D / K)`` items when ``K > 0``; at every volume when
``K = 0`` and ``D < 0``; otherwise never after some volume (with ``K < 0`` and ``D < 0`` it is cheaper only *before*
``D / K`` items, then b is). ``V = 0`` means from the first item. A method with no correct answer (``p = 0``) has no
finite cost per correct answer: it is never the cheaper one, and any method with one is cheaper from the first item.

**The interval.** ``V`` depends on the accuracies only through ``r = p_a / p_b``: a is cheaper at ``N`` iff
``h(N) = (F_a + c_a·N) / (F_b + c_b·N) < r``, so a higher ``r`` makes a cheaper at every volume it was and maybe
more, and ``V`` does not increase with ``r``. Over every pair of accuracies inside the two intervals, ``V`` therefore
ranges exactly from its value at a's upper and b's lower bound (``low``) to its value at a's lower and b's upper
bound (``high``). Both accuracies at their far ends at once make it wider than a joint 95% interval: read it as the
volumes the measured accuracies cannot rule out. An end that never breaks even is ``None``: ``high = None`` means
that within the intervals a may never become the cheaper one.

Costs are in one unit, whatever it is (USD, or tokens of one LM): the caller makes the unit
(:mod:`dspy_for.experiments.reports.breakeven`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dspy_for.errors import ConfigError

__all__ = ["BreakEven", "CostModel", "break_even"]


@dataclass(frozen=True)
class CostModel:
    """One method's costs and accuracy: ``fixed`` once (its compile; 0 without), ``per_item`` on every item, in one
    unit; ``accuracy`` with its interval ``[ci_low, ci_high]`` (None: the accuracy alone)."""

    fixed: float
    per_item: float
    accuracy: float
    ci_low: float | None = None
    ci_high: float | None = None

    def __post_init__(self) -> None:
        for name in ("fixed", "per_item"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"`{name}` cost must be a finite number >= 0, got {value!r}.")
        low = self.accuracy if self.ci_low is None else self.ci_low
        high = self.accuracy if self.ci_high is None else self.ci_high
        if not 0 <= low <= self.accuracy <= high <= 1:
            raise ConfigError(
                f"accuracy {self.accuracy!r} with interval [{self.ci_low!r}, {self.ci_high!r}] must satisfy "
                "0 <= ci_low <= accuracy <= ci_high <= 1."
            )

    def cost_per_correct(self, items: float) -> float:
        """Total cost per correct answer over ``items`` items (``inf`` without a correct answer)."""
        if self.accuracy == 0 or items <= 0:
            return math.inf
        return (self.fixed + self.per_item * items) / (self.accuracy * items)


@dataclass(frozen=True)
class BreakEven:
    """After how many items a is cheaper per correct answer than b, at every larger volume.

    ``volume``: at the measured accuracies (0: from the first item; None: never); ``low`` / ``high``: over the
    accuracy intervals (see the module docstring; ``high`` None: at that end a never breaks even)."""

    volume: float | None
    low: float | None
    high: float | None

    @property
    def resolved(self) -> bool:
        """Whether the intervals settle it: a breaks even within them at a bounded volume, or never does at all."""
        return (self.high is not None) or (self.low is None)


def break_even(a: CostModel, b: CostModel) -> BreakEven:
    """The volume after which ``a`` has the lower total cost per correct answer than ``b`` (the module docstring)."""
    return BreakEven(
        volume=_volume(a, b, a.accuracy, b.accuracy),
        low=_volume(a, b, _high(a), _low(b)),
        high=_volume(a, b, _low(a), _high(b)),
    )


def _volume(a: CostModel, b: CostModel, p_a: float, p_b: float) -> float | None:
    if p_a == 0:
        return None  # a never answers correctly: never the cheaper one
    if p_b == 0:
        return 0.0  # b never does: a is cheaper from the first item
    k = b.per_item * p_a - a.per_item * p_b
    d = a.fixed * p_b - b.fixed * p_a
    if k > 0:
        return max(0.0, d / k)
    return 0.0 if k == 0 and d < 0 else None


def _low(m: CostModel) -> float:
    return m.accuracy if m.ci_low is None else m.ci_low


def _high(m: CostModel) -> float:
    return m.accuracy if m.ci_high is None else m.ci_high
