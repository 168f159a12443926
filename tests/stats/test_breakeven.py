"""Break-even volumes, each case computed by hand (the cost per correct answer is (F + c·N) / (p·N))."""

from __future__ import annotations

import math
import random

import pytest

from dspy_for.errors import ConfigError
from dspy_for.stats import BreakEven, CostModel, break_even


def cheaper(a: CostModel, b: CostModel, n: float) -> bool:
    return a.cost_per_correct(n) < b.cost_per_correct(n)


def test_a_compile_pays_off_after_the_hand_computed_volume():
    # compiled CoT: 100k tokens once, 300 per item, 40%; an inference-time method: 1,500 per item, 45%
    # K = 1500·0.40 − 300·0.45 = 465, D = 100000·0.45 − 0 = 45000, V = 45000 / 465
    compiled = CostModel(fixed=100_000, per_item=300, accuracy=0.40)
    debate = CostModel(fixed=0, per_item=1_500, accuracy=0.45)
    got = break_even(compiled, debate)
    assert got.volume == pytest.approx(45_000 / 465) == pytest.approx(96.774, abs=1e-3)
    assert got.low == got.high == got.volume  # no interval given: the accuracies alone
    assert not cheaper(compiled, debate, 90) and cheaper(compiled, debate, 100)
    assert compiled.cost_per_correct(100) == pytest.approx(130_000 / 40)
    assert debate.cost_per_correct(100) == pytest.approx(150_000 / 45)


def test_the_interval_comes_from_the_accuracy_intervals_far_ends():
    compiled = CostModel(fixed=100_000, per_item=300, accuracy=0.40, ci_low=0.30, ci_high=0.50)
    debate = CostModel(fixed=0, per_item=1_500, accuracy=0.45, ci_low=0.35, ci_high=0.55)
    got = break_even(compiled, debate)
    # low: a at 0.50, b at 0.35 -> K = 750 − 105 = 645, D = 35000; high: a at 0.30, b at 0.55 -> K = 450 − 165, D = 55000
    assert got.low == pytest.approx(35_000 / 645) == pytest.approx(54.264, abs=1e-3)
    assert got.high == pytest.approx(55_000 / 285) == pytest.approx(192.982, abs=1e-3)
    assert got.low < got.volume < got.high and got.resolved


def test_no_break_even_and_an_end_that_never_breaks_even():
    a = CostModel(fixed=1_000, per_item=500, accuracy=0.5, ci_low=0.4, ci_high=0.7)
    b = CostModel(fixed=0, per_item=400, accuracy=0.6, ci_low=0.5, ci_high=0.7)
    # K = 400·0.5 − 500·0.6 < 0: never; optimistic end (0.7, 0.5): K = 280 − 250 = 30, D = 500 -> 16.67; pessimistic never
    got = break_even(a, b)
    assert got == BreakEven(volume=None, low=pytest.approx(500 / 30), high=None)
    assert not got.resolved
    assert break_even(CostModel(1_000, 500, 0.5), CostModel(0, 400, 0.6)) == BreakEven(None, None, None)


def test_equal_fixed_costs():
    # same costs, a more accurate: cheaper from the first item (K = 10 > 0, D = −50 < 0)
    assert break_even(CostModel(500, 100, 0.6), CostModel(500, 100, 0.5)).volume == 0.0
    # the less accurate one never is; two identical methods: never strictly cheaper (K = 0, D = 0)
    assert break_even(CostModel(500, 100, 0.5), CostModel(500, 100, 0.6)).volume is None
    assert break_even(CostModel(500, 100, 0.5), CostModel(500, 100, 0.5)).volume is None
    # cheaper per item, less accurate: K = 100·0.4 − 50·0.6 = 10, D = 500·0.6 − 500·0.4 = 100 -> 10 items, equal there
    a, b = CostModel(500, 50, 0.4), CostModel(500, 100, 0.6)
    assert break_even(a, b).volume == pytest.approx(10.0)
    assert a.cost_per_correct(10) == pytest.approx(b.cost_per_correct(10)) == pytest.approx(250.0)
    # no fixed cost on either side: the cheaper per correct answer is so at every volume
    assert break_even(CostModel(0, 100, 0.5), CostModel(0, 150, 0.6)).volume == 0.0
    assert break_even(CostModel(0, 150, 0.6), CostModel(0, 100, 0.5)).volume is None


def test_zero_accuracy():
    right, wrong = CostModel(1_000, 10, 0.5), CostModel(0, 1, 0.0)
    assert break_even(right, wrong) == BreakEven(0.0, 0.0, 0.0)  # the other never answers right
    assert break_even(wrong, right) == BreakEven(None, None, None)
    assert break_even(wrong, CostModel(0, 1, 0.0)).volume is None
    assert wrong.cost_per_correct(100) == math.inf
    # an interval reaching 0 for b: at that end a is cheaper from the first item
    b = CostModel(0, 100, 0.05, ci_low=0.0, ci_high=0.2)
    got = break_even(CostModel(10_000, 100, 0.1, ci_low=0.05, ci_high=0.2), b)
    assert got.low == 0.0 and got.volume == pytest.approx(10_000 * 0.05 / (100 * 0.1 - 100 * 0.05))


def test_the_larger_fixed_cost_cheaper_only_early_breaks_even_the_other_way():
    a, b = CostModel(100, 10, 0.9), CostModel(50, 1, 0.1)
    assert break_even(a, b).volume is None  # a wins early, never after a volume
    # b after: K = 10·0.1 − 1·0.9 = 0.1, D = 50·0.9 − 100·0.1 = 35 -> 350 items
    assert break_even(b, a).volume == pytest.approx(350.0)
    assert cheaper(a, b, 1) and cheaper(b, a, 351) and not cheaper(b, a, 349)


def test_random_cases_against_brute_force_and_the_interval_brackets_every_inner_accuracy():
    rng = random.Random(7)
    for _ in range(400):
        a_acc, b_acc = rng.uniform(0.05, 0.95), rng.uniform(0.05, 0.95)
        a = CostModel(rng.uniform(0, 5e4), rng.uniform(0, 2e3), a_acc, max(0.0, a_acc - 0.1), min(1.0, a_acc + 0.1))
        b = CostModel(rng.uniform(0, 5e4), rng.uniform(0, 2e3), b_acc, max(0.0, b_acc - 0.1), min(1.0, b_acc + 0.1))
        got = break_even(a, b)
        if got.volume is None:
            assert not cheaper(a, b, 1e9)
        else:
            assert all(cheaper(a, b, got.volume * f + 1e-6) for f in (1.0001, 2, 10, 1e6))
            if got.volume > 1e-9:
                assert not cheaper(a, b, got.volume * 0.999)
        # every pair of accuracies inside the intervals gives a volume between low and high (None: never, +inf)
        for _ in range(5):
            p_a = rng.uniform(a.ci_low or 0, a.ci_high or 1)
            p_b = rng.uniform(b.ci_low or 0, b.ci_high or 1)
            inner = break_even(CostModel(a.fixed, a.per_item, p_a), CostModel(b.fixed, b.per_item, p_b)).volume
            lo = math.inf if got.low is None else got.low
            hi = math.inf if got.high is None else got.high
            v = math.inf if inner is None else inner
            assert lo - 1e-6 <= v <= hi + 1e-6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fixed": -1, "per_item": 1, "accuracy": 0.5}, "`fixed` cost"),
        ({"fixed": 0, "per_item": math.nan, "accuracy": 0.5}, "`per_item` cost"),
        ({"fixed": 0, "per_item": 1, "accuracy": 1.2}, "accuracy"),
        ({"fixed": 0, "per_item": 1, "accuracy": 0.5, "ci_low": 0.6, "ci_high": 0.7}, "ci_low <= accuracy"),
    ],
)
def test_bad_inputs_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        CostModel(**kwargs)
