"""Fixed-n intervals and paired tests for method comparisons (n chosen before looking).

* :func:`wilson_interval` for proportions; :func:`bootstrap_interval` for scores;
  :func:`mean_with_ci` picks the right one.
* :func:`mcnemar_exact` (binary outcomes) and :func:`paired_bootstrap` (scores) on the same items;
  :func:`paired_comparison` picks the right one and returns difference, interval and p-value.
* :func:`cohens_kappa`: agreement of two raters' yes/no labels.
* :func:`smallest_resolvable_difference`: the smallest paired accuracy difference n items can show.

Where a well-kept library computes the same statistic, it does the arithmetic here: statsmodels for the exact
McNemar test and Cohen's κ. The Wilson interval, which every comparison's table prints, is statsmodels'
``proportion_confint(method="wilson")`` formula written out, step for step, on the standard library's normal quantile
(``statistics.NormalDist``, equal to scipy's to 1e-15), so a table waits for none of statsmodels, scipy or numpy;
the tests hold it to statsmodels' own values. The bootstraps stay ours (see their docstrings); every printed value
is pinned by ``tests/stats/test_fixed.py``. For comparisons checked after every item, see
:mod:`dspy_for.stats.sequential`.

statsmodels (with pandas and scipy.stats: about 1.5 s of imports) and numpy are imported when a paired test or κ
first needs them, not with this module: a command that prints no such statistic does not wait for them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

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


#: the standard normal distribution: its quantile is Wichura's AS241, as in scipy's ``ndtri`` to 1e-15 (the tests
#: compare them); the standard library's, so a table waits for neither numpy nor scipy
_NORMAL = NormalDist()


def _z(confidence: float) -> float:
    _check_confidence(confidence)
    return _NORMAL.inv_cdf(0.5 + confidence / 2)  # the standard normal quantile (scipy.stats.norm.ppf)


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ConfigError(f"`confidence` must be in (0, 1), got {confidence}.")


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion ``successes / n`` (Wilson 1927); ``(0.0, 0.0)`` when ``n`` is 0.

    The arithmetic of statsmodels' ``proportion_confint(method="wilson")``, in its order (its critical value is
    ``norm.isf(alpha / 2)``, the normal quantile of ``1 - alpha / 2``): the tests compare the two."""
    if n <= 0:
        return (0.0, 0.0)
    if not 0 <= successes <= n:
        raise ConfigError(f"`successes` must be between 0 and n={n}, got {successes}.")
    _check_confidence(confidence)
    p = successes / n
    crit = -_NORMAL.inv_cdf((1 - confidence) / 2.0)
    crit2 = crit**2
    denom = 1 + crit2 / n
    center = (p + crit2 / (2 * n)) / denom
    dist = crit * math.sqrt(p * (1.0 - p) / n + crit2 / (4.0 * n**2)) / denom
    low, high = center - dist, center + dist
    return (min(p, max(0.0, float(low))), max(p, min(1.0, float(high))))  # p inside, despite rounding


def bootstrap_interval(
    scores: Sequence[float], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``scores`` (seeded; Efron & Tibshirani 1993, ch. 13).

    Ours, not ``scipy.stats.bootstrap(method="percentile")``: scipy draws its resamples from numpy's generator and
    interpolates between order statistics, so it would move the intervals already printed in the committed
    tables; this one draws with :class:`random.Random` (``seed``) and reads the order statistic at
    ``int(q * (n_boot - 1))``."""
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


def _discordant(a: Sequence[float], b: Sequence[float]) -> tuple[int, int]:
    """(items only A got right, items only B got right)."""
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return only_a, only_b


def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided exact McNemar p-value (McNemar 1947): the binomial test on the discordant pairs, computed by
    statsmodels' ``mcnemar(table, exact=True)``; 1.0 without discordant pairs."""
    _check_paired(a, b)
    only_a, only_b = _discordant(a, b)
    if only_a + only_b == 0:
        return 1.0
    import numpy as np
    from statsmodels.stats.contingency_tables import mcnemar

    return float(mcnemar(np.array([[0, only_a], [only_b, 0]]), exact=True).pvalue)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> PairedResult:
    """Paired bootstrap of the mean difference; p-value from the bootstrap distribution (two-sided).

    Ours, for the reason given in :func:`bootstrap_interval` (scipy's resampling would move printed values)."""
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

    Binary outcomes: exact McNemar p-value with a Wald interval on the paired difference (continuity-free; the
    variance of a difference of dependent proportions, Agresti, "Categorical Data Analysis", 2013; no library
    computes exactly this interval, so it stays ours); scores: paired bootstrap.
    """
    _check_paired(a, b)
    if not (_binary(a) and _binary(b)):
        return paired_bootstrap(a, b, confidence)
    n = len(a)
    if n == 0:
        return PairedResult(0.0, 0.0, 0.0, 1.0, "mcnemar_exact", 0)
    only_a, only_b = _discordant(a, b)
    diff = (only_a - only_b) / n
    z = _z(confidence)
    var = ((only_a + only_b) / n - diff * diff) / n
    half = z * math.sqrt(max(var, 0.0))
    return PairedResult(diff, max(-1.0, diff - half), min(1.0, diff + half), mcnemar_exact(a, b), "mcnemar_exact", n)


def cohens_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Cohen's κ of two raters' yes/no labels on the same items (1 = perfect agreement, 0 = chance; Cohen 1960),
    computed by statsmodels' ``cohens_kappa`` on the 2x2 table. Where κ is 0/0 it is defined here: 0.0 without
    items, 1.0 when both raters give every item the same single label (chance agreement is already perfect)."""
    _check_paired([float(x) for x in a], [float(y) for y in b])
    n = len(a)
    if n == 0:
        return 0.0
    xs, ys = [bool(x) for x in a], [bool(y) for y in b]
    both = sum(x and y for x, y in zip(xs, ys, strict=True))
    only_a, only_b = _discordant(xs, ys)
    pa, pb = sum(xs) / n, sum(ys) / n
    if pa * pb + (1 - pa) * (1 - pb) == 1:  # chance agreement 1: statsmodels' κ is nan
        return 1.0
    import numpy as np
    from statsmodels.stats.inter_rater import cohens_kappa as sm_cohens_kappa

    table = np.array([[both, only_a], [only_b, n - both - only_a - only_b]])  # rows: rater A yes/no; columns: B
    with np.errstate(divide="ignore", invalid="ignore"):  # its z statistic divides by a zero variance at κ = 0
        return float(sm_cohens_kappa(table).kappa)


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
