"""Validation by simulation of the anytime-valid paired statistics in ``dspy_for.stats.sequential``.

Two methods are scored on the same items; every item is discordant with probability ``r`` (A right and B wrong,
or the reverse) and, if so, a win for A with probability ``q = (r + d) / (2 r)``, so A's accuracy exceeds B's by
``d``. Each stream is checked after every item up to ``--max-n``.

1. Binary outcomes, under the null (equal accuracies, 26% discordant): the share of streams ever resolved (the
   false-positive rate; must be ≤ alpha) for the test of ``dspy_for.stats`` and the strategies tried beside it,
   and for contrast the fixed-n exact McNemar test re-read after every item.
2. Under 10-, 16- and 26-point effects (22%, 30%, 32% discordant): the median stopping n (a stream never resolved
   counts as max-n + 1) against the fixed n at which the exact McNemar test has 80% power (computed exactly) and
   against Wald's SPRT told the true effect, plus the share resolved by max-n.
3. The betting confidence sequence on the paired difference: coverage over all n at once, for judge-like scores
   (5-point scale, in [0, 1]) and binary outcomes, and its median width at a few n.

    python experiments/benchmarks/sequential_sim.py                   # 10,000 streams, n ≤ 1,000, seed 0
    python experiments/benchmarks/sequential_sim.py --streams 2000 --max-n 500 --seed 1

The test's e-process is scored through the same functions the library uses (``discordant_log_e``,
``calibrated_threshold``, ``BettingConfidenceSequence``), vectorised over streams; a few streams are replayed
through ``dspy_for.stats.replay`` item by item and must stop at the same n.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.stats import binom

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)
from dspy_for.stats import BettingConfidenceSequence, calibrated_threshold, discordant_log_e, replay

NULL = (0.0, 0.26)  # (accuracy difference, discordant rate)
EFFECTS = [(0.10, 0.22), (0.16, 0.30), (0.26, 0.32)]
GOAL = 0.75  # median stopping n at 16 points ≤ 75% of the fixed n
CHUNK = 2000  # streams simulated at once (memory)
WIDTH_AT = (50, 100, 200, 500, 1000)

Table = Any  # (n + 1, n + 1) array of log e-values, indexed [wins, losses]


def discordance(d: float, r: float, streams: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """+1 (A right, B wrong), −1 (the reverse) or 0 (both right or both wrong) per item, shape (streams, n)."""
    q = (r + d) / (2 * r)
    disc, win = rng.random((streams, n)) < r, rng.random((streams, n)) < q
    return np.where(disc, np.where(win, 1, -1), 0).astype(np.int8)


def lattice(log_e: Callable[[Any, Any], Any], n: int) -> Table:
    w, lo = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    return log_e(w, lo)


def first_crossing(table: Table, wins: Any, losses: Any, log_c: float) -> Any:
    """The first n (1-based) at which table[wins, losses] ≥ log_c, per stream; n + 1 if never."""
    hit = table[wins, losses] >= log_c
    return np.where(hit.any(1), hit.argmax(1) + 1, hit.shape[1] + 1)


def agrapa(x: np.ndarray, alpha: float) -> Any:
    """Stopping n of a plug-in bettor on the discordant signs: bet λ = running mean of the ±1 outcomes (one fake
    observation at 0), capped at ±½ (aGRAPA of Waudby-Smith & Ramdas 2024 for a ±1 variable), Ville's 1/alpha."""
    streams, n = x.shape
    log_k, total, count = np.zeros(streams), np.zeros(streams), np.zeros(streams)
    stop = np.full(streams, n + 1)
    for i in range(n):
        z = x[:, i].astype(float)
        lam = np.clip(total / (count + 1), -0.5, 0.5)
        log_k += np.log1p(lam * z)
        total += z
        count += z != 0
        stop = np.where((stop > n) & (log_k >= math.log(1 / alpha)), i + 1, stop)
    return stop


def mcnemar_rejects(n: int, alpha: float) -> Table:
    """Whether the exact two-sided McNemar test rejects at (wins, losses): 1 for yes, as a log-e-like table."""
    w, lo = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(w, lo), w + lo, 0.5))
    return np.where(p < alpha, 1.0, 0.0)


def fixed_n_80(d: float, r: float, alpha: float, limit: int) -> int | None:
    """The smallest n at which the exact McNemar test has ≥ 80% power (exact: discordant count ~ Bin(n, r), wins
    among them ~ Bin(m, q)); None if not within ``limit``."""
    q = (r + d) / (2 * r)
    given_m = np.zeros(limit + 1)  # P(reject | m discordant)
    for m in range(1, limit + 1):
        k = np.arange(m + 1)
        reject = np.minimum(1.0, 2 * np.minimum(binom.cdf(k, m, 0.5), binom.sf(k - 1, m, 0.5))) < alpha
        given_m[m] = binom.pmf(k, m, q)[reject].sum()
    for n in range(1, limit + 1):
        if float((binom.pmf(np.arange(n + 1), n, r) * given_m[: n + 1]).sum()) >= 0.8:
            return n
    return None


def strategies(n: int, alpha: float) -> dict[str, tuple[Table, float]]:
    """name -> (lattice of log e, log threshold)."""
    ours = lattice(discordant_log_e, n)
    flat = lattice(lambda w, lo: discordant_log_e(w, lo, 0.5, 2.0), n)
    return {
        "dspy_for.stats (prior 0.75/24, calibrated c)": (ours, math.log(calibrated_threshold(alpha))),
        "same prior, Ville c = 1/alpha": (ours, math.log(1 / alpha)),
        "flat-prior mixture, calibrated c": (flat, math.log(calibrated_threshold(alpha, 0.5, 2.0))),
        "flat-prior mixture, Ville c = 1/alpha": (flat, math.log(1 / alpha)),
    }


def stopping_times(d: float, r: float, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    """Stopping n per stream for every strategy, and the SPRT told the effect (if d > 0)."""
    n, alpha = args.max_n, args.alpha
    tables = strategies(n, alpha)
    tables["exact McNemar re-tested after every item (invalid)"] = (mcnemar_rejects(n, alpha), 0.5)
    if d > 0:
        q = (r + d) / (2 * r)
        told = lattice(lambda w, lo: w * math.log(2 * q) + lo * math.log(2 * (1 - q)), n)
        told_size = lattice(lambda w, lo: np.logaddexp(told[w, lo], told[lo, w]) - math.log(2), n)
        tables["SPRT told the effect and its sign"] = (told, math.log(1 / alpha))
        tables["SPRT told the effect, not its sign"] = (told_size, math.log(1 / alpha))
    stops: dict[str, list[Any]] = {name: [] for name in [*tables, "aGRAPA plug-in, Ville c = 1/alpha"]}
    for start in range(0, args.streams, CHUNK):
        x = discordance(d, r, min(CHUNK, args.streams - start), n, rng)
        wins, losses = np.cumsum(x == 1, axis=1), np.cumsum(x == -1, axis=1)
        for name, (table, log_c) in tables.items():
            stops[name].append(first_crossing(table, wins, losses, log_c))
        stops["aGRAPA plug-in, Ville c = 1/alpha"].append(agrapa(x, alpha))
        if start == 0:
            cross_check(x[:8], stops[next(iter(tables))][0][:8], alpha)
    return {name: np.concatenate(parts) for name, parts in stops.items()}


def cross_check(x: np.ndarray, expected: Any, alpha: float) -> None:
    """Replay a few streams item by item through the library: same stopping n as the vectorised lattice."""
    for row, want in zip(x, expected, strict=True):
        result = replay((row == 1).astype(float).tolist(), (row == -1).astype(float).tolist(), "binary", alpha)
        got = result.stopped_at or row.size + 1
        if got != int(want):
            sys.exit(f"replay stopped at {got}, the vectorised e-process at {want}: they must agree")


def coverage(
    y: Callable[[np.random.Generator, int], Any], true_mean: float, args: argparse.Namespace, rng: np.random.Generator
) -> tuple[float, float]:
    """(share of streams whose confidence sequence holds the true mean at every n, share resolved: 0 excluded)."""
    cs = BettingConfidenceSequence(args.alpha, grid=[true_mean, 0.5], shape=(args.streams,))
    missed, resolved = np.zeros(args.streams, bool), np.zeros(args.streams, bool)
    for _ in range(args.max_n):
        cs.update(y(rng, args.streams))
        rejected = cs.log_capital() >= math.log(1 / args.alpha)
        missed |= rejected[:, 0]
        resolved |= rejected[:, 1]
    return 1 - float(missed.mean()), float(resolved.mean())


def widths(y: Callable[[np.random.Generator, int], Any], args: argparse.Namespace, rng: np.random.Generator) -> dict:
    """Median width of the confidence sequence on the difference (2 × the width on y) at a few n."""
    cs = BettingConfidenceSequence(args.alpha, shape=(args.width_streams,))
    out = {}
    for i in range(1, args.max_n + 1):
        cs.update(y(rng, args.width_streams))
        if i in WIDTH_AT:
            low, high = cs.interval()
            out[i] = float(np.median(2 * (high - low)))
    return out


def judge(shift: float) -> Callable[[np.random.Generator, int], Any]:
    """y = (a − b + 1)/2 for judge-like scores on a 5-point scale: item difficulty u ~ U(0, 1), a ~ Bin(4, u)/4,
    b ~ Bin(4, (1 − shift) u)/4, so E[a − b] = shift / 2 exactly."""

    def draw(rng: np.random.Generator, size: int) -> Any:
        u = rng.random(size)
        return (rng.binomial(4, u) / 4 - rng.binomial(4, (1 - shift) * u) / 4 + 1) / 2

    return draw


def binary_y(d: float, r: float) -> Callable[[np.random.Generator, int], Any]:
    def draw(rng: np.random.Generator, size: int) -> Any:
        return (discordance(d, r, size, 1, rng)[:, 0] + 1) / 2

    return draw


def median(stops: Any) -> float:
    return float(np.median(stops))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--max-n", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--width-streams", type=int, default=200, help="streams for the interval widths")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    began = time.perf_counter()
    n, alpha = args.max_n, args.alpha
    print(f"# {args.streams} streams per setting, each checked after every item up to n = {n}")
    print(f"# alpha {alpha}, seed {args.seed}")
    print(f"# calibrated threshold c: {calibrated_threshold(alpha):.2f} (Ville: {1 / alpha:.0f})\n")

    null = stopping_times(*NULL, args, rng)
    print(f"## Null: equal accuracies, {NULL[1]:.0%} discordant — share of streams ever resolved by n = {n}")
    print(f"| {'strategy':52} | false-positive rate |")
    print(f"|{'-' * 54}|---------------------|")
    se = math.sqrt(alpha * (1 - alpha) / args.streams)
    for name, stops in null.items():
        print(f"| {name:52} | {np.mean(stops <= n):.4f} |")
    print(f"(standard error at {alpha}: {se:.4f})\n")

    held = float(np.mean(next(iter(null.values())) <= n)) <= alpha
    print(f"## Effects: median stopping n (never resolved = {n + 1}); [share resolved by n = {n}]")
    rows, goal_met = [], False
    for d, r in EFFECTS:
        fixed = fixed_n_80(d, r, alpha, n)
        stops = stopping_times(d, r, args, rng)
        stops.pop("exact McNemar re-tested after every item (invalid)")
        rows.append((d, r, fixed, stops))
        if d == 0.16 and fixed is not None:
            goal_met = median(next(iter(stops.values()))) <= GOAL * fixed
    names = list(rows[0][3])
    header = " | ".join(f"{100 * d:.0f} pts, {r:.0%} disc., q = {(r + d) / (2 * r):.2f}" for d, r, _, _ in rows)
    print(f"| {'':52} | {header} |")
    print(f"|{'-' * 54}|" + "|".join("-" * 32 for _ in rows) + "|")
    print(f"| {'fixed n, exact McNemar, 80% power':52} | " + " | ".join(f"{f}" for _, _, f, _ in rows) + " |")
    for name in names:
        cells = []
        for _, _, fixed, stops in rows:
            med = median(stops[name])
            ratio = f" ({med / fixed:.0%} of fixed)" if fixed else ""
            cells.append(f"{med:.0f}{ratio} [{np.mean(stops[name] <= n):.3f}]")
        print(f"| {name:52} | " + " | ".join(cells) + " |")
    print(
        f"\nGoal (median ≤ {GOAL:.0%} of the fixed n at 16 points, false-positive rate ≤ alpha): "
        f"{'met' if goal_met and held else 'NOT met'}\n"
    )

    print(f"## Confidence sequence on the paired difference: coverage over all n ≤ {n} at once (≥ {1 - alpha:.2f})")
    print("| scores | true difference | coverage | resolved (0 excluded) |")
    print("|---|---|---|---|")
    cases = [
        ("judge scores, 5-point scale", 0.0, judge(0.0)),
        ("judge scores, 5-point scale", 0.1, judge(0.2)),
        (f"binary, {NULL[1]:.0%} discordant", 0.0, binary_y(*NULL)),
        ("binary, 16 pts, 30% discordant", 0.16, binary_y(0.16, 0.30)),
    ]
    for label, diff, draw in cases:
        cover, resolved = coverage(draw, (diff + 1) / 2, args, rng)
        print(f"| {label} | {diff:+.2f} | {cover:.4f} | {resolved:.4f} |")
    print(f"\nMedian width of the interval on the difference ({args.width_streams} streams):")
    print("| scores | " + " | ".join(f"n = {i}" for i in WIDTH_AT if i <= n) + " |")
    print("|---|" + "---|" * len([i for i in WIDTH_AT if i <= n]))
    for label, _, draw in cases[1:2] + cases[3:4]:
        w = widths(draw, args, rng)
        print(f"| {label} | " + " | ".join(f"{w[i]:.3f}" for i in WIDTH_AT if i <= n) + " |")
    print(f"\n({time.perf_counter() - began:.0f} s)")
    return 0 if goal_met and held else 1


if __name__ == "__main__":
    raise SystemExit(main())
