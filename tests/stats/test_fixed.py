from __future__ import annotations

import pytest
from scipy import stats as st

from dspy_for.errors import ConfigError
from dspy_for.stats import (
    PairedResult,
    bootstrap_interval,
    cohens_kappa,
    format_p_value,
    mcnemar_exact,
    mean_with_ci,
    paired_bootstrap,
    paired_comparison,
    smallest_resolvable_difference,
    wilson_interval,
)


def test_wilson_known_values():
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 0.0)
    with pytest.raises(ConfigError):
        wilson_interval(11, 10)


def test_mean_with_ci_picks_wilson_for_binary():
    mean, lo, hi = mean_with_ci([1, 1, 1, 1, 1, 1, 1, 1, 0, 0])
    assert mean == 0.8 and (lo, hi) == wilson_interval(8, 10)
    mean, lo, hi = mean_with_ci([0.1, 0.5, 0.9, 0.3])
    assert mean == pytest.approx(0.45) and lo < mean < hi


def test_mcnemar_matches_binomial_test():
    a = [1] * 1 + [0] * 6 + [1] * 5 + [0] * 3
    b = [0] * 1 + [1] * 6 + [1] * 5 + [0] * 3
    assert mcnemar_exact(a, b) == pytest.approx(0.125)
    assert mcnemar_exact(a, b) == pytest.approx(st.binomtest(1, 7, 0.5).pvalue)
    assert mcnemar_exact([1, 0], [1, 0]) == 1.0


def test_paired_comparison_binary_and_scores():
    a = [1] * 10 + [0] * 10
    b = [0] * 10 + [0] * 10
    r = paired_comparison(a, b)
    assert r.test == "mcnemar_exact" and r.diff == 0.5 and r.p_value == pytest.approx(2 * 0.5**10)
    assert r.low < 0.5 < r.high
    s = paired_comparison([0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.15])
    assert s.test == "paired_bootstrap" and s.diff == pytest.approx(0.65) and s.low > 0
    with pytest.raises(ConfigError, match="same items"):
        paired_comparison([1, 0], [1])


def test_bootstrap_is_seeded():
    xs = [0.1, 0.4, 0.35, 0.8, 0.6]
    assert bootstrap_interval(xs, seed=3) == bootstrap_interval(xs, seed=3)
    assert paired_bootstrap(xs, xs).p_value == 1.0


@pytest.mark.parametrize(("n", "expected"), [(5, None), (6, 1.0), (50, 0.12), (100, 0.06), (300, 0.02)])
def test_smallest_resolvable_difference(n, expected):
    assert smallest_resolvable_difference(n) == expected
    if expected is not None:  # d one-sided discordant items reach p < 0.05; d - 1 do not
        d = round(expected * n)
        assert mcnemar_exact([1] * d + [0] * (n - d), [0] * n) < 0.05
        assert mcnemar_exact([1] * (d - 1) + [0] * (n - d + 1), [0] * n) >= 0.05


def test_format_p_value_never_rounds_to_zero_or_across_005():
    # 5 wins against 21 losses over 100 paired items: exact McNemar p = 0.0025, which "p=0.00" would hide
    p = paired_comparison([1.0] * 5 + [0.0] * 21 + [1.0] * 74, [0.0] * 5 + [1.0] * 21 + [1.0] * 74).p_value
    assert p == pytest.approx(0.0025, abs=1e-4)
    assert format_p_value(p) == "p=0.002"
    assert format_p_value(0.0004) == "p<0.001"
    assert format_p_value(0.052) == "p=0.052"  # not "p=0.05", which reads as significant
    assert format_p_value(0.13) == "p=0.13"
    assert format_p_value(1.0) == "p=1.00"


# Values printed by the code before statsmodels did the arithmetic (recorded at 276d6f9); they must not move.
APPROX = {"rel": 1e-12, "abs": 1e-12}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((8, 10), (0.49016247153664183, 0.9433178485456247)),
        ((0, 20), (0.0, 0.16112515805281938)),
        ((20, 20), (0.8388748419471806, 1.0)),
        ((0, 0), (0.0, 0.0)),
        ((1, 1), (0.20654931437723745, 1.0)),
        ((5, 10, 0.9), (0.2692718211382672, 0.7307281788617328)),
        ((3, 7, 0.99), (0.11637368051613817, 0.8102850959116124)),
        ((55, 100), (0.45244602997442135, 0.6438546202048803)),
        ((65, 100), (0.5525444329688796, 0.7363575175690247)),
        ((39, 100), (0.3001687400639441, 0.4879698295415926)),
    ],
)
def test_wilson_pinned(args, expected):
    assert wilson_interval(*args) == pytest.approx(expected, **APPROX)


@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99])
def test_wilson_is_statsmodels_wilson(confidence):
    """The interval every table prints is statsmodels' ``proportion_confint(method="wilson")``, written out."""
    from statsmodels.stats.proportion import proportion_confint

    for n in (1, 2, 3, 7, 10, 50, 99, 100, 1319, 5000):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            low, high = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
            p = k / n
            expected = (min(p, max(0.0, float(low))), max(p, min(1.0, float(high))))
            assert wilson_interval(k, n, confidence) == pytest.approx(expected, rel=1e-14, abs=1e-15), (k, n)


def test_wilson_rejects_bad_confidence():
    with pytest.raises(ConfigError, match="`confidence`"):
        wilson_interval(3, 10, confidence=1.5)


PAIRS = {
    "1 win, 6 losses": ([1] * 1 + [0] * 6 + [1] * 5 + [0] * 3, [0] * 1 + [1] * 6 + [1] * 5 + [0] * 3),
    "no items": ([], []),
    "no discordant pairs": ([1, 0, 1], [1, 0, 1]),
    "all A": ([1] * 10, [0] * 10),
    "6 wins, 16 losses": ([1] * 6 + [0] * 16 + [1] * 50 + [0] * 28, [0] * 6 + [1] * 16 + [1] * 50 + [0] * 28),
    "5 wins, 21 losses": ([1.0] * 5 + [0.0] * 21 + [1.0] * 74, [0.0] * 5 + [1.0] * 21 + [1.0] * 74),
}


@pytest.mark.parametrize(
    ("case", "p", "comparison"),
    [
        ("1 win, 6 losses", 0.125, (-0.3333333333333333, -0.6350895290869791, -0.03157713757968755, 15)),
        ("no items", 1.0, (0.0, 0.0, 0.0, 0)),
        ("no discordant pairs", 1.0, (0.0, 0.0, 0.0, 3)),
        ("all A", 0.001953125, (1.0, 1.0, 1.0, 10)),
        ("6 wins, 16 losses", 0.052478790283203125, (-0.1, -0.18981683318542056, -0.010183166814579453, 100)),
        ("5 wins, 21 losses", 0.002493917942047119, (-0.16, -0.25489140886142975, -0.06510859113857025, 100)),
    ],
)
def test_mcnemar_and_paired_comparison_pinned(case, p, comparison):
    a, b = PAIRS[case]
    assert mcnemar_exact(a, b) == pytest.approx(p, **APPROX)
    r = paired_comparison(a, b)
    assert (r.diff, r.low, r.high, r.n) == pytest.approx(comparison, **APPROX)
    assert r.p_value == pytest.approx(p, **APPROX) and r.test == "mcnemar_exact"


@pytest.mark.parametrize(
    ("a", "b", "kappa"),
    [
        ([True, False, True], [True, False, True], 1.0),
        ([True] * 4, [True] * 4, 1.0),  # chance agreement already perfect
        ([], [], 0.0),
        ([1, 1, 0, 0, 1, 0, 1, 1], [1, 0, 0, 1, 1, 0, 1, 0], 0.25),
        ([1, 0, 1, 0], [0, 1, 0, 1], -1.0),
        ([1, 1, 1, 1], [1, 0, 1, 1], 0.0),  # one rater constant
    ],
)
def test_cohens_kappa_pinned(a, b, kappa):
    assert cohens_kappa(a, b) == pytest.approx(kappa, **APPROX)


def test_bootstraps_pinned():
    xs = [0.1, 0.4, 0.35, 0.8, 0.6]
    assert bootstrap_interval(xs) == (0.25, 0.64)
    assert bootstrap_interval(xs, seed=3) == (0.25, 0.64)
    assert bootstrap_interval([]) == (0.0, 0.0)
    assert bootstrap_interval([0.5] * 4) == (0.5, 0.5)
    assert bootstrap_interval(xs, confidence=0.9, n_boot=500, seed=7) == pytest.approx((0.26, 0.6), **APPROX)
    r = paired_bootstrap([0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.15])
    assert (r.diff, r.low, r.high, r.p_value, r.n) == pytest.approx((0.65, 0.5, 0.8, 0.0, 4), **APPROX)
    r = paired_bootstrap([0.2, 0.6, 0.5, 0.9, 0.1], [0.3, 0.5, 0.5, 0.7, 0.2], seed=1)
    assert (r.diff, r.low, r.high, r.p_value) == pytest.approx((0.02, -0.08, 0.12, 0.671), **APPROX)
    assert paired_bootstrap([], []) == PairedResult(0.0, 0.0, 0.0, 1.0, "paired_bootstrap", 0)
    assert paired_comparison([0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.15]) == paired_bootstrap(
        [0.9, 0.8, 0.7, 0.95], [0.1, 0.2, 0.3, 0.15]
    )


def test_mean_with_ci_and_resolvable_difference_pinned():
    assert mean_with_ci([1, 1, 1, 1, 1, 1, 1, 1, 0, 0]) == pytest.approx(
        (0.8, 0.49016247153664183, 0.9433178485456247), **APPROX
    )
    assert mean_with_ci([0.1, 0.5, 0.9, 0.3]) == pytest.approx((0.45, 0.2, 0.75), **APPROX)
    assert mean_with_ci([]) == (0.0, 0.0, 0.0)
    assert [smallest_resolvable_difference(n) for n in (0, 5, 6, 50, 100, 300)] == [None, None, 1.0, 0.12, 0.06, 0.02]
    assert smallest_resolvable_difference(100, alpha=0.01) == 0.08


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.95, 0.975, 0.99, 0.999, 0.9999])
def test_normal_quantile_is_scipys(confidence):
    """The critical value every Wilson interval and noise band uses is scipy's normal quantile, to 1e-15."""
    from scipy.special import ndtri

    from dspy_for.stats.fixed import _z

    assert _z(confidence) == pytest.approx(float(ndtri(0.5 + confidence / 2)), rel=1e-15, abs=0)
