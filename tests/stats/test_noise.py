"""The serving stack's noise: flip rates with their Wilson interval, and the band they move a paired Δ in."""

from __future__ import annotations

import math

import pytest

from dspy_for.errors import ConfigError
from dspy_for.stats import flip_rate, noise_band, wilson_interval


def test_flip_rate_is_the_share_with_its_wilson_interval():
    r = flip_rate(0, 10)
    assert (r.flips, r.n, r.rate, r.low) == (0, 10, 0.0, 0.0)
    assert r.high == pytest.approx(0.2775, abs=1e-4)  # 0 of 10 still allows 28%
    assert (r.low, r.high) == wilson_interval(0, 10)
    assert flip_rate(10, 50).rate == 0.2


def test_noise_band_is_z_root_of_the_summed_upper_rates_over_n():
    a, b = flip_rate(0, 10), flip_rate(10, 50)
    assert noise_band([a, b], 50) == pytest.approx(1.959964 * math.sqrt((a.high + b.high) / 50), rel=1e-6)
    assert noise_band([a, a], 50) == pytest.approx(0.2065, abs=1e-4)
    assert noise_band([a, a], 200) == pytest.approx(noise_band([a, a], 50) / 2)  # √n
    assert noise_band([flip_rate(3, 3), flip_rate(3, 3)], 1) == 2.0  # never past the range of a difference


@pytest.mark.parametrize("n", [0, -1, True])
def test_bad_counts_are_refused(n):
    with pytest.raises(ConfigError, match="positive integer"):
        flip_rate(0, n)
    with pytest.raises(ConfigError, match="positive integer"):
        noise_band([flip_rate(0, 5)], n)
    with pytest.raises(ConfigError, match="rates"):
        noise_band([], 5)
