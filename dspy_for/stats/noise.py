"""The serving stack's own noise: how often the same request, asked again, gets an answer that scores differently,
and how far that alone could move a paired difference.

* :func:`flip_rate`: of ``n`` re-run answers, ``flips`` scored differently from the stored answer (right to wrong
  or wrong to right): the rate with its Wilson interval.
* :func:`noise_band`: the half-width of the band a paired difference on ``n`` items moves in from re-running both
  methods' requests alone.

The band's model: an item's value changes by ±1 (its right/wrong flips) with each method's flip rate, the direction
not systematic, independently across items and methods. One item's paired difference then gains noise of variance
at most the sum of the two rates, so the difference over ``n`` items moves within ±z·√(Σ rate / n). Each rate is
taken at its upper confidence bound (a few re-run items leave a wide one: 0 flips in 10 answers still allows 28%),
so the band is what the re-runs cannot rule out, never less.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dspy_for.errors import ConfigError
from dspy_for.stats.fixed import _z, wilson_interval

__all__ = ["FlipRate", "flip_rate", "noise_band"]


@dataclass(frozen=True)
class FlipRate:
    """``flips`` of ``n`` re-run answers scored differently from before; ``rate`` with its Wilson interval."""

    flips: int
    n: int
    rate: float
    low: float
    high: float


def flip_rate(flips: int, n: int, confidence: float = 0.95) -> FlipRate:
    """The share of ``n`` re-run answers whose score changed, with its Wilson interval (``n`` must be positive)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"`n` (the answers re-run) must be a positive integer, got {n!r}.")
    low, high = wilson_interval(flips, n, confidence)
    return FlipRate(flips=flips, n=n, rate=flips / n, low=low, high=high)


def noise_band(rates: Sequence[FlipRate], n: int, confidence: float = 0.95) -> float:
    """Half-width (a fraction of the items) of the band a paired difference over ``n`` items moves in from the
    noise of ``rates`` (one per method of the pair) alone: ``z·√(Σ high / n)`` (see the module docstring), at most
    2 (a difference of two accuracies spans [−1, 1])."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"`n` (the items the difference is over) must be a positive integer, got {n!r}.")
    if not rates:
        raise ConfigError("`rates`: give the flip rate of each method of the pair.")
    return min(2.0, _z(confidence) * math.sqrt(sum(r.high for r in rates) / n))
