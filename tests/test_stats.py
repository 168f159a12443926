from __future__ import annotations

import pytest
from scipy import stats as st

from dspy_for.errors import ConfigError
from dspy_for.stats import (
    bootstrap_interval,
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
