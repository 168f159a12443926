"""Repeats per item (epochs) by simulation: are the intervals and tests over items as clusters right, and do 4 epochs
beat 1 at the same number of answers?

Items differ: item i is answered right with probability pᵢ ~ Beta(0.6, 0.4) (mean 0.6, most items nearly always
right or nearly always wrong, as on GSM8K); each epoch is an independent draw. Two methods answer the same items.

1. Coverage of a 95% interval for the accuracy E[p] of one method, n = 50 items × k = 4 epochs: the clustered
   interval ``dspy_for.stats.clustered_interval`` on the per-item means against Wilson on the 200 answers taken as
   independent draws (what a table would print if it ignored the items).
2. False positives under the null (both methods have the same pᵢ), n = 50, k = 4, α = 0.05: the paired test on
   per-item means (``paired_comparison``: a paired bootstrap) and the anytime-valid bounded sequential test checked
   after every item (``PairedSequentialTest(kind="bounded")``, the one ``compare --sequential --epochs`` uses).
3. Power at a fixed number of answers (200): k = 1 on 200 items against k = 4 on 50 items, when B is right on every
   item with probability pᵢ + δ (clipped to [0, 1]), δ = 0.10 and 0.15, fixed-n paired test at α = 0.05.

    python experiments/benchmarks/epochs_sim.py                 # 1,000 streams each, seed 0 (a few minutes)
    python experiments/benchmarks/epochs_sim.py --streams 200   # quick
"""

from __future__ import annotations

import argparse
import random

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)
from dspy_for.stats import PairedSequentialTest, clustered_interval, paired_comparison, wilson_interval

ALPHA = 0.05


def _items(rng: random.Random, n: int) -> list[float]:
    return [rng.betavariate(0.6, 0.4) for _ in range(n)]


def _epochs(rng: random.Random, ps: list[float], k: int, shift: float = 0.0) -> list[list[float]]:
    return [[float(rng.random() < min(1.0, p + shift)) for _ in range(k)] for p in ps]


def coverage(streams: int, rng: random.Random, n: int = 50, k: int = 4) -> tuple[float, float]:
    truth = 0.6  # E[p] of Beta(0.6, 0.4)
    clustered = naive = 0
    for _ in range(streams):
        draws = _epochs(rng, _items(rng, n), k)
        means = [sum(d) / k for d in draws]
        _, lo, hi = clustered_interval(means)
        clustered += lo <= truth <= hi
        right = int(sum(sum(d) for d in draws))
        wlo, whi = wilson_interval(right, n * k)
        naive += wlo <= truth <= whi
    return clustered / streams, naive / streams


def false_positives(streams: int, rng: random.Random, n: int = 50, k: int = 4) -> tuple[float, float]:
    fixed = sequential = 0
    for _ in range(streams):
        ps = _items(rng, n)
        a = [sum(d) / k for d in _epochs(rng, ps, k)]
        b = [sum(d) / k for d in _epochs(rng, ps, k)]
        fixed += paired_comparison(a, b).p_value < ALPHA
        test = PairedSequentialTest(kind="bounded", alpha=ALPHA)
        sequential += test.extend(zip(a, b, strict=True)).resolved
    return fixed / streams, sequential / streams


def power(streams: int, rng: random.Random, delta: float, answers: int = 200) -> dict[int, float]:
    out = {}
    for k in (1, 4):
        n, hits = answers // k, 0
        for _ in range(streams):
            ps = _items(rng, n)
            a = [sum(d) / k for d in _epochs(rng, ps, k)]
            b = [sum(d) / k for d in _epochs(rng, ps, k, delta)]
            hits += paired_comparison(b, a).p_value < ALPHA
        out[k] = hits / streams
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cov_clustered, cov_naive = coverage(args.streams, rng)
    fp_fixed, fp_seq = false_positives(args.streams, rng)
    print(f"{args.streams} streams each, seed {args.seed}; items p ~ Beta(0.6, 0.4)")
    print(f"1. 95% CI coverage, 50 items x 4 epochs: clustered {cov_clustered:.3f}, Wilson on 200 {cov_naive:.3f}")
    print(f"2. false positives at alpha 0.05, 50 x 4: fixed paired {fp_fixed:.3f}, sequential {fp_seq:.3f}")
    for delta in (0.10, 0.15):
        p = power(args.streams, rng, delta)
        print(f"3. power at 200 answers, delta {delta:.2f}: 200 items x 1 epoch {p[1]:.3f}, 50 x 4 epochs {p[4]:.3f}")


if __name__ == "__main__":
    main()
