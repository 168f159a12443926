"""Anytime-valid paired comparisons: look after every item, stop at the first resolution, keep the error rate.

Methods A and B are scored on the same items in the same order; after each item :class:`PairedSequentialTest`
says whether their difference is resolved yet. Unlike a fixed-n test re-read after every item (whose
false-positive rate grows with each look), the probability that it *ever* resolves when the methods are equal is
at most ``alpha``, so stopping at the first resolution is the point, and "resolved" stays resolved.

``kind="binary"`` (0/1 outcomes, e.g. accuracy). The test of "equal accuracy" bets on the discordant items
(A right and B wrong: a *win*; the reverse: a *loss*). Under the null each discordant item is a fair coin, so the
likelihood ratio of any alternative share ``q`` of wins, mixed over a prior on ``q``, is a test martingale
(Robbins 1970, "Statistical methods related to the law of the iterated logarithm"; the beta-binomial mixture of
Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann.
Statist.). The prior is symmetric, so the test is two-sided: ½ Beta(κs, κ(1−s)) + ½ Beta(κ(1−s), κs) with
``prior_share`` s = 0.75 and ``prior_strength`` κ = 24 by default (the better method wins ~75 ± 9% of the
discordant items, as in this project's measured comparisons; a flat prior is s = 0.5, κ = 2). With w wins and
l losses (m = w + l):

    E = 2^m · ½ [B(κs + w, κ(1−s) + l) + B(κ(1−s) + w, κs + l)] / B(κs, κ(1−s))

It resolves at the first item where E ≥ c. Ville's inequality gives c = 1/α; because the null is a single known
coin, :func:`calibrated_threshold` lowers c to the smallest value whose probability of ever being crossed is at
most α, computed exactly (dynamic programming over the first 500 discordant items, the rest bounded by Ville's
inequality from there on; the exact numerical critical values of Kulldorff, Davis, Kolczak, Lewis, Lieu & Platt
2011, "A maximized sequential probability ratio test for drug and vaccine safety surveillance", Seq. Anal.,
made valid for any horizon). The interval reported beside it is the betting confidence sequence below on
``a − b``: valid at every n, for the size of the difference; the direction is the test's.

``kind="bounded"`` (scores in [0, 1], e.g. judge scores). Confidence sequence for the mean of ``a − b`` by betting
(Waudby-Smith & Ramdas 2024, "Estimating means of bounded random variables by betting", JRSS-B: the hedged
capital process with predictable plug-in empirical-Bernstein bets, θ = ½, bets truncated at ½/m and ½/(1−m)) on
``y = (a − b + 1) / 2`` over a grid of candidate means; it resolves when 0 leaves the interval, and its e-value is
the hedged capital at 0 (dominated by a test martingale, so Ville's 1/α applies).

Both treat the items as drawn independently from the task (run them in a seeded shuffled order, not sorted by
difficulty or source). Libraries checked and not used: ``confseq`` (last release 2023-01, alpha, a C++/Boost
build, and pandas, pytest and multiprocess as run-time dependencies) and ``expectation`` (needs Python ≥ 3.12).
Several pairs at once: give each ``split_alpha(alpha, pairs)``. numpy and scipy are imported by the code that
computes with them, not with this module: a command that only names these classes does not wait for them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dspy_for.errors import ConfigError

__all__ = [
    "BettingConfidenceSequence",
    "PairedSequentialTest",
    "SequentialResult",
    "calibrated_threshold",
    "discordant_log_e",
    "replay",
    "split_alpha",
]

Kind = Literal["binary", "bounded"]
_KINDS = ("binary", "bounded")
_CALIBRATION_PAIRS = 500  # discordant items the threshold's dynamic programme walks exactly; Ville bounds the rest
_GRID = 1001  # candidate means of y = (a - b + 1) / 2: the interval on a - b is exact to 0.002, rounded outward
_TRUNCATION = 0.5  # WSR's c: bets at most c/m and c/(1 - m)


@dataclass(frozen=True)
class SequentialResult:
    """Where a paired sequential comparison of A with B stands after ``n`` paired items.

    ``diff`` is mean(a) − mean(b); ``[low, high]`` its confidence sequence (valid at every n at once, level
    1 − alpha). ``e_value`` is the evidence against "no difference"; the test resolves once it reaches
    ``threshold``. ``resolved``, ``direction`` (+1: A better, −1: B better, 0: unresolved) and ``stopped_at`` (the
    n at which it resolved) never change once set. ``wins`` / ``losses``: items where a > b / a < b."""

    n: int
    diff: float
    low: float
    high: float
    e_value: float
    threshold: float
    resolved: bool
    direction: int
    stopped_at: int | None
    wins: int
    losses: int
    kind: str
    alpha: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_alpha(alpha: float, pairs: int) -> float:
    """The level each of ``pairs`` tests gets so that the chance that *any* of them resolves a difference that
    is not there stays at most ``alpha`` (Bonferroni: alpha / pairs; valid however the tests depend on each
    other, e.g. several methods against one shared baseline)."""
    _check_alpha(alpha)
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
        raise ConfigError(f"`pairs` must be a whole number of compared pairs >= 1, got {pairs!r}.")
    return alpha / pairs


def _check_alpha(alpha: float) -> None:
    if not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise ConfigError(f"`alpha` must be a number in (0, 1) such as 0.05, got {alpha!r}.")


def _prior(share: float, strength: float) -> tuple[float, float]:
    if not isinstance(share, int | float) or not 0.5 <= share < 1:
        raise ConfigError(f"`prior_share` must be in [0.5, 1) (0.5: a flat prior), got {share!r}.")
    if not isinstance(strength, int | float) or not 0 < strength < math.inf:
        raise ConfigError(f"`prior_strength` must be a positive number (e.g. 2 for a flat prior), got {strength!r}.")
    return share * strength, (1 - share) * strength


def discordant_log_e(wins: Any, losses: Any, prior_share: float = 0.75, prior_strength: float = 24.0) -> Any:
    """log E of the binary test (module docstring) after ``wins`` and ``losses`` discordant items; numpy arrays
    broadcast, so one call scores many streams (the simulation benchmark does)."""
    import numpy as np
    from scipy.special import betaln

    a, b = _prior(prior_share, prior_strength)
    w, lo = np.asarray(wins, dtype=float), np.asarray(losses, dtype=float)
    mixed = np.logaddexp(betaln(a + w, b + lo), betaln(b + w, a + lo))
    return (w + lo) * math.log(2) + mixed - math.log(2) - betaln(a, b)


@functools.lru_cache(maxsize=128)
def calibrated_threshold(alpha: float = 0.05, prior_share: float = 0.75, prior_strength: float = 24.0) -> float:
    """The smallest threshold c (≤ 1/alpha) for the binary test's E whose chance of ever being reached under the
    null is at most ``alpha``. Exact over the first 500 discordant items (the null walk's distribution, absorbed
    where E ≥ c); after that Ville's inequality from the surviving walks: P(cross later) ≤ E[E_500; alive] / c."""
    import numpy as np

    _check_alpha(alpha)
    table = [discordant_log_e(np.arange(m + 1), m - np.arange(m + 1), prior_share, prior_strength) for m in range(
        _CALIBRATION_PAIRS + 1)]  # fmt: skip

    def crossing_bound(log_c: float) -> float:
        alive, absorbed = np.array([1.0]), 0.0
        for m in range(1, _CALIBRATION_PAIRS + 1):
            step = np.zeros(m + 1)
            step[1:] += 0.5 * alive
            step[:-1] += 0.5 * alive
            hit = table[m] >= log_c
            absorbed += float(step[hit].sum())
            step[hit] = 0.0
            alive = step
        live = alive > 0
        return absorbed + float((alive[live] * np.exp(table[-1][live] - log_c)).sum())

    low, high = 0.0, math.log(1 / alpha)  # Ville: 1/alpha is always valid
    for _ in range(24):
        mid = (low + high) / 2
        low, high = (low, mid) if crossing_bound(mid) <= alpha else (mid, high)
    return math.exp(high + 1e-9)  # the last level checked valid, nudged up past rounding


class BettingConfidenceSequence:
    """Waudby-Smith & Ramdas (2024) hedged betting confidence sequence for the mean of y ∈ [0, 1], over ``grid``
    (candidate means; default 1001 points), for one stream or, with ``shape``, for many streams at once (the
    simulation benchmark). Bets: their predictable plug-in empirical-Bernstein bets (PrPl-EB), with log(2/alpha)
    since each side of the hedge spends alpha/2; capped at ½/m (K+) and ½/(1 − m) (K−)."""

    def __init__(self, alpha: float, grid: Any = None, shape: tuple[int, ...] = ()) -> None:
        import numpy as np

        _check_alpha(alpha)
        self.alpha = float(alpha)
        self.grid = np.linspace(0.0, 1.0, _GRID) if grid is None else np.asarray(grid, dtype=float)
        with np.errstate(divide="ignore"):
            self._caps = np.stack([_TRUNCATION / self.grid, _TRUNCATION / (1 - self.grid)])  # (2, G): K+, K-
        self._signed_grid = np.stack([self.grid, -self.grid])
        self._sign = np.array([[1.0], [-1.0]])
        self.log_k = np.zeros((*shape, 2, self.grid.size))  # log K+(m), log K-(m)
        self.t = 0
        self._sum, self._sq = np.zeros(shape), np.zeros(shape)
        self._var = np.full(shape, 0.25)  # regularised running variance (one fake observation at mean ½)

    def update(self, y: Any) -> None:
        """Bet on the next observation(s) ``y`` (a number, or an array of ``shape``)."""
        import numpy as np

        t = self.t + 1
        scale = 2 * math.log(2 / self.alpha) / (t * math.log(1 + t))
        if self.log_k.ndim == 2:  # one stream: plain floats are faster than 0-d arrays
            y = float(y)
            step = np.minimum(math.sqrt(scale / float(self._var)), self._caps)
            step *= y * self._sign - self._signed_grid  # (y - m) for K+, -(y - m) for K-
        else:
            y = np.asarray(y, dtype=float)
            step = np.minimum(np.sqrt(scale / self._var)[..., None, None], self._caps)
            step *= y[..., None, None] * self._sign - self._signed_grid
        self.log_k += np.log1p(step)
        self.t, self._sum = t, self._sum + y
        mean = (0.5 + self._sum) / (t + 1)
        self._sq = self._sq + (y - mean) ** 2
        self._var = (0.25 + self._sq) / (t + 1)

    def log_capital(self) -> Any:
        """log of the hedged capital max(½ K+, ½ K−) at every grid point: ≥ log(1/alpha) rejects that mean."""
        import numpy as np

        return np.maximum(self.log_k[..., 0, :], self.log_k[..., 1, :]) - math.log(2)

    def interval(self) -> tuple[Any, Any]:
        """(low, high): the grid points not rejected, widened outward by one grid step (the boundary lies in
        between). If every point is rejected (probability ≤ alpha), the least rejected one, widened likewise."""
        import numpy as np

        log_cap = self.log_capital()
        kept = log_cap < math.log(1 / self.alpha)
        size = self.grid.size
        if kept.ndim == 1:  # one stream: the fast path
            idx = np.flatnonzero(kept)
            lo, hi = (int(idx[0]), int(idx[-1])) if idx.size else (int(np.argmin(log_cap)),) * 2
            return self.grid[max(lo - 1, 0)], self.grid[min(hi + 1, size - 1)]
        fallback = np.argmin(log_cap, axis=-1)
        first = np.where(kept.any(-1), np.argmax(kept, axis=-1), fallback)
        last = np.where(kept.any(-1), size - 1 - np.argmax(kept[..., ::-1], axis=-1), fallback)
        return self.grid[np.maximum(first - 1, 0)], self.grid[np.minimum(last + 1, size - 1)]


def _betaln(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _logaddexp(x: float, y: float) -> float:
    big = max(x, y)
    return big + math.log1p(math.exp(min(x, y) - big))


def _check_kind(kind: str) -> None:
    if kind not in _KINDS:
        raise ConfigError(f"`kind` must be 'binary' (0/1 outcomes) or 'bounded' (scores in [0, 1]), got {kind!r}.")


class PairedSequentialTest:
    """An anytime-valid test and confidence sequence for A − B on paired items, fed one pair at a time in order
    (module docstring for the constructions). ``update(a, b)`` after each item, or ``extend(pairs)`` after a
    batch; both return the :class:`SequentialResult` so far.

    >>> test = PairedSequentialTest("binary", alpha=0.05)
    >>> test.extend([(1, 0)] * 8).stopped_at
    8
    """

    def __init__(
        self,
        kind: Kind = "binary",
        alpha: float = 0.05,
        *,
        prior_share: float = 0.75,
        prior_strength: float = 24.0,
    ) -> None:
        _check_kind(kind)
        _check_alpha(alpha)
        self._prior_ab = _prior(prior_share, prior_strength)
        self.kind, self.alpha = kind, float(alpha)
        self.prior_share, self.prior_strength = float(prior_share), float(prior_strength)
        self._threshold = (
            calibrated_threshold(self.alpha, self.prior_share, self.prior_strength) if kind == "binary" else 1 / alpha
        )
        self._cs = BettingConfidenceSequence(self.alpha)
        self._n, self._sum_diff, self._wins, self._losses = 0, 0.0, 0, 0
        self._log_e = 0.0
        self._stopped_at: int | None = None
        self._direction = 0

    def _log_e_at(self, wins: int, losses: int) -> float:
        """:func:`discordant_log_e` for one stream, in plain floats."""
        a, b = self._prior_ab
        mixed = _logaddexp(_betaln(a + wins, b + losses), _betaln(b + wins, a + losses))
        return (wins + losses) * math.log(2) + mixed - math.log(2) - _betaln(a, b)

    def _check(self, name: str, value: float) -> float:
        if isinstance(value, bool):
            return float(value)
        try:
            x = float(value)
        except (TypeError, ValueError):
            x = math.nan
        if self.kind == "binary" and x not in (0.0, 1.0):
            raise ConfigError(
                f"`{name}` must be 0 or 1 for kind='binary' (item {self._n + 1}: got {value!r}); "
                "use kind='bounded' for scores in [0, 1]."
            )
        if not 0.0 <= x <= 1.0:  # also catches nan
            raise ConfigError(
                f"`{name}` must be a score in [0, 1] (item {self._n + 1}: got {value!r}); rescale the scores first."
            )
        return x

    def update(self, a: float, b: float) -> SequentialResult:
        """Add one paired outcome (A's score, B's score on the same item), in item order."""
        x, y = self._check("a", a), self._check("b", b)
        self._n += 1
        self._sum_diff += x - y
        self._wins += x > y
        self._losses += x < y
        self._cs.update((x - y + 1) / 2)
        if self.kind == "binary":
            if x != y:
                self._log_e = self._log_e_at(self._wins, self._losses)
            crossed = self._log_e >= math.log(self._threshold)
            direction = (self._wins > self._losses) - (self._wins < self._losses)
        else:
            self._log_e = float(self._cs.log_capital()[_GRID // 2])  # y = 1/2 is a - b = 0
            crossed = self._log_e >= math.log(self._threshold)
            direction = 1 if self._cs.log_k[0, _GRID // 2] > self._cs.log_k[1, _GRID // 2] else -1
        if crossed and self._stopped_at is None:
            self._stopped_at, self._direction = self._n, direction
        return self.result

    def extend(self, pairs: Iterable[tuple[float, float]]) -> SequentialResult:
        """Add paired outcomes in item order; the result after the last (the current one if ``pairs`` is empty)."""
        for a, b in pairs:
            self.update(a, b)
        return self.result

    @property
    def result(self) -> SequentialResult:
        low, high = self._cs.interval() if self._n else (0.0, 1.0)
        lo_diff, hi_diff = 2 * float(low) - 1, 2 * float(high) - 1
        return SequentialResult(
            n=self._n,
            diff=self._sum_diff / self._n if self._n else 0.0,
            low=lo_diff,
            high=hi_diff,
            e_value=math.exp(min(self._log_e, 700.0)),
            threshold=self._threshold,
            resolved=self._stopped_at is not None,
            direction=self._direction,
            stopped_at=self._stopped_at,
            wins=self._wins,
            losses=self._losses,
            kind=self.kind,
            alpha=self.alpha,
        )


def replay(
    a: Sequence[float],
    b: Sequence[float],
    kind: Kind | None = None,
    alpha: float = 0.05,
    **options: float,
) -> SequentialResult:
    """Feed stored paired results (same items, in the order they were run) through :class:`PairedSequentialTest`:
    ``stopped_at`` answers "at what n would this have been resolved?". ``kind`` None: 'binary' if every score is
    0 or 1, else 'bounded'. ``options``: ``prior_share`` / ``prior_strength`` of the binary test."""
    if len(a) != len(b):
        raise ConfigError(f"`a` and `b` must be scores on the same items: got {len(a)} and {len(b)} scores.")
    if kind is None:
        kind = "binary" if all(float(v) in (0.0, 1.0) for v in [*a, *b]) else "bounded"
    test = PairedSequentialTest(kind, alpha, **options)
    return test.extend(zip(a, b, strict=True))
