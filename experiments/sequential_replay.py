"""Replay stored per-item results sequentially: at what n would each comparison have been resolved?

Reads the results files of the committed GSM8K val tables (no LM, no server) and feeds each pair, item by item
in the seeded order ``compare --sequential`` uses, to the same anytime-valid paired test
(:class:`dspy_for.stats.PairedSequentialTest`; binary for accuracy, bounded for the judge's scores), at level
``alpha`` split over the pairs of each table. Printed per pair: the fixed-n result the committed table reports
(difference and exact McNemar / paired-bootstrap p over all items), then the sequential result in seed 0's order
(resolved at which n and which way, or the interval after every item) and, over ``--orders`` seeded orders, the
median stopping n and the share of orders that resolved::

    python experiments/sequential_replay.py --data-dir ../shared/datasets
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from dspy_for.datasets import content_key
from dspy_for.experiments import DatasetConfig, MethodResult, ResultStore, load_examples
from dspy_for.experiments.sequential import seeded_order
from dspy_for.stats import format_p_value, paired_comparison, replay, split_alpha

RESULTS = Path(__file__).parent / "results" / "for" / "gsm8k" / "val"
#: label -> results file (the keys the committed tables were measured under)
FILES = {
    "cot": "cot.eafd6996eea0.jsonl",
    "for_n1_host": "for_n1_host.110de833a8f4.jsonl",
    "for_n3_host": "for_n3_host.b7305e14fee8.jsonl",
    "self_consistency": "self_consistency.abc11647aedc.jsonl",
}
ACCURACY_PAIRS = [("for_n1_host", "cot"), ("self_consistency", "cot"), ("for_n1_host", "self_consistency")]
JUDGED = ("judged_accuracy", "quality.reasoning", "quality.coherence", "quality.holistic")


def values(result: MethodResult, score: str) -> dict[str, float]:
    return result.scores_by_key() if score == "accuracy" else result.judge_values(score)


def row(a: MethodResult, b: MethodResult, score: str, examples: list, alpha: float, orders: int) -> str:
    va, vb = values(a, score), values(b, score)
    keys = [k for k in (content_key(ex.get("question"), ex.get("answer")) for ex in examples) if k in va and k in vb]
    fixed = paired_comparison([va[k] for k in keys], [vb[k] for k in keys])
    kind = "binary" if score in ("accuracy", "judged_accuracy") else "bounded"
    stops, resolved_orders, first = [], 0, None
    for seed in range(orders):
        order = [content_key(ex.get("question"), ex.get("answer")) for ex in seeded_order(examples, seed)]
        pairs = [(va[k], vb[k]) for k in order if k in va and k in vb]
        r = replay([p[0] for p in pairs], [p[1] for p in pairs], kind=kind, alpha=alpha)
        first = first or r
        if r.resolved and r.stopped_at is not None:
            resolved_orders += 1
            stops.append(r.stopped_at)
    k = 100 if kind == "binary" or score == "judged_accuracy" else 1
    seq = (
        f"resolved at n={first.stopped_at} ({a.label if first.direction > 0 else b.label} better)"
        if first.resolved
        else f"unresolved at n={first.n}, CI [{k * first.low:+.2f}, {k * first.high:+.2f}]"
    )
    median = f"{statistics.median(stops):.0f}" if stops else "-"
    return (
        f"| {a.label} − {b.label} | {score} | {len(keys)} | {k * fixed.diff:+.2f}, {format_p_value(fixed.p_value)} "
        f"| {seq} | {median} | {resolved_orders}/{orders} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="Directory with the upstream GSM8K files.")
    parser.add_argument("--first", type=int, default=100, help="The first N val items the tables used.")
    parser.add_argument("--alpha", type=float, default=0.05, help="Error rate of each table, split over its pairs.")
    parser.add_argument("--orders", type=int, default=20, help="Seeded item orders to replay (seed 0 is compare's).")
    args = parser.parse_args()
    examples = load_examples(DatasetConfig(name="gsm8k", split="val", first=args.first, data_dir=args.data_dir))
    results = {label: MethodResult(label, list(ResultStore(RESULTS / f).load().values())) for label, f in FILES.items()}
    header = (
        "| pair | score | n | fixed n: Δ, p | sequential, seed 0 | median stop n | orders resolved |\n"
        "|---|---|---|---|---|---|---|"
    )
    alpha = split_alpha(args.alpha, len(ACCURACY_PAIRS))
    print(f"Accuracy (first {args.first}; α = {args.alpha} over {len(ACCURACY_PAIRS)} pairs, {alpha:.4f} each)")
    print(header)
    for a, b in ACCURACY_PAIRS:
        print(row(results[a], results[b], "accuracy", examples, alpha, args.orders))
    alpha = split_alpha(args.alpha, len(JUDGED))
    print(f"\nThe Figure 2 layout, judged by the 1.5B (α = {args.alpha} over {len(JUDGED)} scores, {alpha:.4f} each)")
    print(header)
    for score in JUDGED:
        print(row(results["for_n3_host"], results["cot"], score, examples, alpha, args.orders))


if __name__ == "__main__":
    main()
