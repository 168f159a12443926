"""Intervals and paired tests for method comparisons.

* :func:`wilson_interval` for proportions; :func:`bootstrap_interval` for scores;
  :func:`mean_with_ci` picks the right one.
* :func:`mcnemar_exact` (binary outcomes) and :func:`paired_bootstrap` (scores) on the same items;
  :func:`paired_comparison` picks the right one and returns difference, interval and p-value.
* :func:`smallest_resolvable_difference`: the smallest paired accuracy difference n items can show.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as _st

from dspy_for.errors import ConfigError

__all__ = [
    "PairedResult",
    "bootstrap_interval",
    "cohens_kappa",
    "format_p_value",
    "mcnemar_exact",
    "mean_with_ci",
    "paired_bootstrap",
    "paired_comparison",
    "smallest_resolvable_difference",
    "wilson_interval",
]


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ConfigError(f"`confidence` must be in (0, 1), got {confidence}.")
    return float(_st.norm.ppf(0.5 + confidence / 2))


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion ``successes / n``."""
    if n <= 0:
        return (0.0, 0.0)
    if not 0 <= successes <= n:
        raise ConfigError(f"`successes` must be between 0 and n={n}, got {successes}.")
    z = _z(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half)))  # p inside, despite rounding


def bootstrap_interval(
    scores: Sequence[float], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``scores`` (seeded)."""
    xs = [float(s) for s in scores]
    if not xs:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    alpha = (1 - confidence) / 2
    return (means[int(alpha * (n_boot - 1))], means[int((1 - alpha) * (n_boot - 1))])


def _binary(xs: Sequence[float]) -> bool:
    return all(float(x) in (0.0, 1.0) for x in xs)


def mean_with_ci(scores: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Wilson for 0/1 outcomes, bootstrap otherwise."""
    xs = [float(s) for s in scores]
    if not xs:
        return (0.0, 0.0, 0.0)
    mean = sum(xs) / len(xs)
    lo, hi = wilson_interval(int(sum(xs)), len(xs), confidence) if _binary(xs) else bootstrap_interval(xs, confidence)
    return (mean, lo, hi)


@dataclass(frozen=True)
class PairedResult:
    """Difference ``mean(a) - mean(b)`` on the same items, its interval and a two-sided p-value."""

    diff: float
    low: float
    high: float
    p_value: float
    test: str
    n: int


def _check_paired(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise ConfigError(f"Paired comparison needs scores on the same items: got {len(a)} and {len(b)} scores.")


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided exact McNemar p-value (binomial test on the discordant pairs)."""
    _check_paired(a, b)
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    k = only_a + only_b
    if k == 0:
        return 1.0
    return float(_st.binomtest(only_a, k, 0.5).pvalue)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> PairedResult:
    """Paired bootstrap of the mean difference; p-value from the bootstrap distribution (two-sided)."""
    _check_paired(a, b)
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    n = len(d)
    if n == 0:
        return PairedResult(0.0, 0.0, 0.0, 1.0, "paired_bootstrap", 0)
    rng = random.Random(seed)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    alpha = (1 - confidence) / 2
    diff = sum(d) / n
    below = sum(1 for m in means if m <= 0) / n_boot
    above = sum(1 for m in means if m >= 0) / n_boot
    p = min(1.0, 2 * min(below, above)) if any(d) else 1.0
    return PairedResult(
        diff, means[int(alpha * (n_boot - 1))], means[int((1 - alpha) * (n_boot - 1))], p, "paired_bootstrap", n
    )


def paired_comparison(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> PairedResult:
    """Compare method A with method B on the same items.

    Binary outcomes: exact McNemar p-value with a Newcombe-style Wald interval on the paired difference
    (continuity-free); scores: paired bootstrap.
    """
    _check_paired(a, b)
    if not (_binary(a) and _binary(b)):
        return paired_bootstrap(a, b, confidence)
    n = len(a)
    if n == 0:
        return PairedResult(0.0, 0.0, 0.0, 1.0, "mcnemar_exact", 0)
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    diff = (only_a - only_b) / n
    z = _z(confidence)
    var = ((only_a + only_b) / n - diff * diff) / n
    half = z * math.sqrt(max(var, 0.0))
    return PairedResult(diff, max(-1.0, diff - half), min(1.0, diff + half), mcnemar_exact(a, b), "mcnemar_exact", n)


def cohens_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Cohen's κ of two raters' yes/no labels on the same items (1 = perfect agreement, 0 = chance)."""
    _check_paired([float(x) for x in a], [float(y) for y in b])
    n = len(a)
    if n == 0:
        return 0.0
    observed = sum(1 for x, y in zip(a, b, strict=True) if bool(x) == bool(y)) / n
    pa, pb = sum(map(bool, a)) / n, sum(map(bool, b)) / n
    expected = pa * pb + (1 - pa) * (1 - pb)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def smallest_resolvable_difference(n: int, alpha: float = 0.05) -> float | None:
    """The smallest paired accuracy difference that ``n`` items can show at two-sided level ``alpha`` with
    the exact McNemar test: d/n for the fewest discordant items d that reach p < alpha when all d favour
    one method (any split between the methods needs more). ``None`` if even n such items cannot (n < 6
    at 0.05). A lower bound, with no assumption about the methods: a smaller difference is never
    significant on these items, whatever the data."""
    for d in range(1, n + 1):
        if min(1.0, 2 * 0.5**d) < alpha:
            return d / n
    return None


def format_p_value(p: float) -> str:
    """A p-value as tables print it: ``p<0.001``, three decimals under 0.1 (0.0025 reads ``p=0.002``, not
    ``p=0.00``; 0.052 reads ``p=0.052``, not ``p=0.05``), two decimals above; never ``p=0``."""
    if p < 0.001:
        return "p<0.001"
    return f"p={p:.3f}" if p < 0.1 else f"p={p:.2f}"
