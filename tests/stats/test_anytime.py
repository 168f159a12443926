"""The anytime-valid paired test and confidence sequence of ``dspy_for.stats.sequential``."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from dspy_for.errors import ConfigError
from dspy_for.stats import (
    BettingConfidenceSequence,
    PairedSequentialTest,
    SequentialResult,
    calibrated_threshold,
    discordant_log_e,
    replay,
    split_alpha,
)


def e_all_wins(m: int, a: float = 18.0, b: float = 6.0) -> float:
    """E after m straight wins, by hand from the formula: 2^m · ½ [B(a + m, b)/B(a, b) + B(b + m, a)/B(b, a)], and
    B(x + m, y)/B(x, y) = Π_{j<m} (x + j)/(x + y + j). Default prior: share 0.75 × strength 24 = (18, 6)."""
    first = math.prod((a + j) / (a + b + j) for j in range(m))
    second = math.prod((b + j) / (a + b + j) for j in range(m))
    return 2**m * (first + second) / 2


def test_straight_wins_resolve_at_the_n_the_formula_gives():
    c = calibrated_threshold(0.05)
    # E_7 = 10.9 < c = 16.6 <= E_8 = 17.5: the calibrated test resolves at the 8th straight win; Ville's 1/alpha = 20
    # would wait for the 9th (E_9 = 28.5)
    assert e_all_wins(7) < c <= e_all_wins(8) < 20 <= e_all_wins(9)
    r = PairedSequentialTest("binary").extend([(1, 0)] * 30)
    assert (r.resolved, r.direction, r.stopped_at, r.n, r.wins, r.losses) == (True, 1, 8, 30, 30, 0)
    assert r.e_value == pytest.approx(e_all_wins(30), rel=1e-9)
    b_better = replay([0] * 30, [1] * 30)
    assert (b_better.direction, b_better.stopped_at) == (-1, 8)
    # concordant items carry no evidence: the same 8 wins spread over 24 items resolve at the 24th
    assert replay([1, 1, 0] * 10, [0, 1, 0] * 10).stopped_at == 22


def test_alternating_and_identical_outcomes_never_resolve():
    r = replay([1, 0] * 500, [0, 1] * 500)
    assert not r.resolved and r.direction == 0 and r.stopped_at is None and r.e_value < 1
    assert r.low < 0 < r.high and r.diff == 0
    rng = np.random.default_rng(0)
    same = (rng.random(1000) < 0.6).astype(float).tolist()
    r = replay(same, same)
    assert not r.resolved and r.e_value == 1.0 and r.low <= 0 <= r.high and r.high - r.low < 0.02
    scores = rng.random(1000).tolist()
    r = replay(scores, scores)
    assert r.kind == "bounded" and not r.resolved and r.low <= 0 <= r.high


def test_resolution_is_sticky():
    test = PairedSequentialTest("binary")
    first = test.extend([(1, 0)] * 8)
    assert first.resolved and first.stopped_at == 8 and first.direction == 1
    later = test.extend([(0, 1)] * 200)  # the evidence now points the other way
    assert later.diff < 0 and later.wins == 8 and later.losses == 200
    assert (later.resolved, later.stopped_at, later.direction) == (True, 8, 1)
    assert test.extend([]) == later


def test_bounded_scores_resolve_and_report_direction():
    r = replay([0.9] * 60, [0.2] * 60)
    assert r.kind == "bounded" and r.resolved and r.direction == 1 and r.stopped_at is not None
    assert r.stopped_at < 20 and r.threshold == 20.0 and r.e_value >= 20
    assert r.low <= 0.7 <= r.high
    assert replay([0.2] * 60, [0.9] * 60).direction == -1


@pytest.mark.parametrize("kind", ["binary", "bounded"])
def test_confidence_sequence_holds_the_running_mean_difference(kind):
    """On seeded i.i.d. streams (items in a shuffled order) at every n. Not a theorem: the interval is centred on a
    bet-weighted mean in which early items weigh more, so a strongly non-stationary order can leave it outside."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        if kind == "binary":
            pa, pb = rng.uniform(0.2, 0.8, 2)
            a, b = (rng.random(300) < pa).astype(float), (rng.random(300) < pb).astype(float)
        else:
            a, b = rng.beta(*rng.uniform(0.3, 3, 2), 300), rng.beta(*rng.uniform(0.3, 3, 2), 300)
        test = PairedSequentialTest(kind)
        for x, y in zip(a, b, strict=True):
            r = test.update(x, y)
            assert r.low <= r.diff <= r.high
            assert -1 <= r.low <= r.high <= 1


def wsr_reference_interval(ys: list[float], grid: list[float], alpha: float) -> tuple[float, float]:
    """Waudby-Smith & Ramdas (2024) hedged capital with predictable plug-in empirical-Bernstein bets, written out
    from the paper in plain Python: mu_t = (1/2 + sum y)/(t + 1), var_t = (1/4 + sum (y_i - mu_i)^2)/(t + 1),
    lambda_t = sqrt(2 log(2/alpha) / (var_{t-1} t log(1 + t))), capped at (1/2)/m for K+ and (1/2)/(1 - m) for K-;
    m is kept while max(K+/2, K-/2) < 1/alpha. Returns the kept hull, widened by one grid step."""
    kept = []
    for j, m in enumerate(grid):
        k_plus = k_minus = 1.0
        total, squares, var = 0.0, 0.0, 0.25
        for t, y in enumerate(ys, start=1):
            bet = math.sqrt(2 * math.log(2 / alpha) / (var * t * math.log(1 + t)))
            k_plus *= 1 + min(bet, 0.5 / m if m > 0 else math.inf) * (y - m)
            k_minus *= 1 - min(bet, 0.5 / (1 - m) if m < 1 else math.inf) * (y - m)
            total += y
            squares += (y - (0.5 + total) / (t + 1)) ** 2
            var = (0.25 + squares) / (t + 1)
        if max(k_plus, k_minus) / 2 < 1 / alpha:
            kept.append(j)
    return grid[max(kept[0] - 1, 0)], grid[min(kept[-1] + 1, len(grid) - 1)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_confidence_sequence_follows_the_paper(seed):
    rng = np.random.default_rng(seed)
    ys = np.round(rng.beta(2, 1.5, 40) * 4) / 4
    grid = np.linspace(0, 1, 101)
    cs = BettingConfidenceSequence(0.05, grid=grid)
    for t, y in enumerate(ys, start=1):
        cs.update(y)
        if t in (5, 20, 40):
            expected = wsr_reference_interval(ys[:t].tolist(), grid.tolist(), 0.05)
            assert tuple(map(float, cs.interval())) == pytest.approx(expected, abs=1e-12)


def test_null_false_positive_rate_by_simulation():
    """500 streams of 300 items each, equal accuracies, 26% discordant, checked after every item: the binary test
    resolves in at most alpha of them (here well under), while the exact McNemar test re-read after every item
    does in far more; and the bounded test's confidence sequence keeps 0 in at least 1 - alpha of them."""
    rng = np.random.default_rng(20)
    streams, n, alpha = 500, 300, 0.05
    disc, win = rng.random((streams, n)) < 0.26, rng.random((streams, n)) < 0.5
    wins, losses = np.cumsum(disc & win, axis=1), np.cumsum(disc & ~win, axis=1)
    log_e = discordant_log_e(wins, losses)
    resolved = (log_e >= math.log(calibrated_threshold(alpha))).any(axis=1)
    assert resolved.mean() <= 0.04
    from scipy.stats import binom

    mcnemar_p = np.minimum(1.0, 2 * binom.cdf(np.minimum(wins, losses), wins + losses, 0.5))
    assert (mcnemar_p < alpha).any(axis=1).mean() > 0.15  # peeking at a fixed-n test is not valid
    for row in range(10):  # the class agrees with the vectorised e-process
        x = np.where(disc[row], np.where(win[row], 1, -1), 0)
        r = replay((x == 1).astype(float).tolist(), (x == -1).astype(float).tolist())
        assert r.resolved == bool(resolved[row])
        assert math.log(r.e_value) == pytest.approx(log_e[row, -1], abs=1e-9)

    cs = BettingConfidenceSequence(alpha, grid=[0.5], shape=(streams,))
    u = rng.random((n, streams))
    excluded = np.zeros(streams, bool)
    for i in range(n):  # judge-like scores on a 5-point scale with item difficulty u: E[a - b] = 0
        a, b = rng.binomial(4, u[i]) / 4, rng.binomial(4, u[i]) / 4
        cs.update((a - b + 1) / 2)
        excluded |= cs.log_capital()[:, 0] >= math.log(1 / alpha)
    assert excluded.mean() <= 0.04


def test_calibrated_threshold():
    c = calibrated_threshold(0.05)
    assert 15 < c < 20  # below Ville's 1/alpha: the walk jumps over the threshold
    assert calibrated_threshold(0.01) > c and calibrated_threshold(0.01) <= 100
    flat = calibrated_threshold(0.05, 0.5, 2.0)
    assert 15 < flat <= 20 and flat != c
    # the scalar path of the class and the vectorised function agree on the lattice
    test = PairedSequentialTest("binary")
    w, lo = np.meshgrid(np.arange(40), np.arange(40), indexing="ij")
    expected = discordant_log_e(w, lo)
    assert all(test._log_e_at(i, j) == pytest.approx(expected[i, j], abs=1e-10) for i in range(40) for j in range(40))


def test_split_alpha_is_bonferroni():
    assert split_alpha(0.05, 1) == 0.05
    assert split_alpha(0.05, 4) == 0.0125
    assert calibrated_threshold(split_alpha(0.05, 4)) < 80


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: PairedSequentialTest("ordinal"), "`kind`"),  # type: ignore[arg-type]
        (lambda: PairedSequentialTest("binary", alpha=0), "`alpha`"),
        (lambda: PairedSequentialTest("binary", alpha=1.5), "`alpha`"),
        (lambda: PairedSequentialTest("binary", prior_share=1.0), "`prior_share`"),
        (lambda: PairedSequentialTest("binary", prior_share=0.3), "`prior_share`"),
        (lambda: PairedSequentialTest("binary", prior_strength=0), "`prior_strength`"),
        (lambda: PairedSequentialTest("binary").update(2, 0), "`a` must be 0 or 1"),
        (lambda: PairedSequentialTest("binary").update(1, 0.5), "kind='bounded'"),
        (lambda: PairedSequentialTest("bounded").update(0.5, 7), "`b` must be a score in \\[0, 1\\]"),
        (lambda: PairedSequentialTest("bounded").update(float("nan"), 0.5), "`a`"),
        (lambda: PairedSequentialTest("bounded").update("high", 0.5), "`a`"),  # type: ignore[arg-type]
        (lambda: replay([1, 0], [1]), "same items"),
        (lambda: split_alpha(0.05, 0), "`pairs`"),
        (lambda: split_alpha(0.05, 1.5), "`pairs`"),  # type: ignore[arg-type]
        (lambda: split_alpha(2.0, 3), "`alpha`"),
    ],
)
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


def test_a_bad_item_changes_nothing():
    test = PairedSequentialTest("binary")
    before = test.extend([(1, 0), (0, 0)])
    with pytest.raises(ConfigError, match="item 3"):
        test.update(0.5, 1)
    assert test.result == before


def test_result_before_any_item_and_as_dict():
    r = PairedSequentialTest("bounded", alpha=0.1).result
    assert (r.n, r.diff, r.low, r.high, r.resolved, r.direction, r.stopped_at) == (0, 0.0, -1.0, 1.0, False, 0, None)
    d = replay([1, 0, 1], [0, 0, 1]).to_dict()
    assert set(d) == {f.name for f in SequentialResult.__dataclass_fields__.values()}
    assert d["n"] == 3 and d["kind"] == "binary" and d["alpha"] == 0.05


def test_ten_thousand_updates_are_fast():
    rng = np.random.default_rng(1)
    pairs = list(zip((rng.random(10_000) < 0.6).astype(float), (rng.random(10_000) < 0.5).astype(float), strict=True))
    calibrated_threshold(0.05)  # cached, as after the first test of a run
    began = time.perf_counter()
    PairedSequentialTest("binary").extend(pairs)
    assert time.perf_counter() - began < 3.0  # ~0.3 s idle; the margin is for a loaded machine
