"""Cost of a FOR-Prompting sweep over N with the DSPy cache on.

Runs FOR with N = 3 once, then a sweep over N in {0, 1, 2, 3} (every trial a fresh program, as a sweep
trial is), and prints the tokens actually spent (not served from cache) by the sweep divided by the
tokens of the single N = 3 run (target <= 1.15: rounds' prompts don't depend on N, so smaller N are
prefixes of the N = 3 run and only the Host calls differ).

    python experiments/benchmarks/sweep_cost.py                       # scripted LM with a token model
    python experiments/benchmarks/sweep_cost.py --lm local/qwen2.5-coder-0.5b --items 3
"""

from __future__ import annotations

import argparse
import tempfile

import dspy


def scripted_lm():
    from dspy_for.testing import ScriptedLM, system_text

    def respond(messages, max_tokens):
        s = system_text(messages)
        work = " ".join(["step"] * 60)
        if "You are the Debater" in s:
            n = sum("Debater" in m.get("content", "") for m in messages)
            return {"questions": [f"How did you check step {len(str(messages)) % 7 + n}?"]}
        if "asked questions about" in s:
            return {"responses": ["re-checked"], "error_found": "False", "error": "none", "reasoning": work,
                    "answer": "27"}
        return {"reasoning": work, "answer": "27"}

    return ScriptedLM(respond, cache=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lm", default=None, help="LM spec (default: a scripted LM, no server needed)")
    ap.add_argument("--items", type=int, default=5)
    args = ap.parse_args()

    from dspy_for import make_lm, track_usage
    from dspy_for.datasets import load_dataset
    from dspy_for.experiments.methods import build_method
    from dspy_for.lm.factory import _NamespacedCache

    lm = scripted_lm() if args.lm is None else make_lm(args.lm, max_tokens=512)
    items = load_dataset("gsm8k", "sample")[: args.items]
    results = {}
    for host in (False, True):
        with tempfile.TemporaryDirectory() as tmp:  # a cold cache for each setting
            dspy.cache = _NamespacedCache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=tmp,
                                          memory_max_entries=100_000)

            def run(n: int, host: bool = host):
                program = build_method("for", "question -> answer: float", lm=lm, rounds=n, host=host)
                with track_usage() as usage:
                    for ex in items:
                        program(question=ex.question)
                return usage.total

            single = run(3)
            rows = [(n, run(n)) for n in (0, 1, 2, 3)]
            results[host] = (single, rows)
    print(f"{'host':>5s} {'trial':>8s} {'calls':>6s} {'cached':>7s} {'spent tok':>10s} {'cached tok':>11s}")
    for host, (single, rows) in results.items():
        print(f"{host!s:>5s} {'N=3 ref':>8s} {single.calls:6d} {single.cached_calls:7d} {single.tokens:10d} "
              f"{single.cached_tokens:11d}")
        for n, u in rows:
            print(f"{host!s:>5s} {'N=' + str(n):>8s} {u.calls:6d} {u.cached_calls:7d} {u.tokens:10d} "
                  f"{u.cached_tokens:11d}")
    for host, (single, rows) in results.items():
        total = single.tokens + sum(u.tokens for _, u in rows)
        print(f"host={host}: tokens spent by the sweep over N in 0..3 (incl. the N=3 run) / N=3 run: "
              f"{total / single.tokens:.3f}  (target <= 1.15)")


if __name__ == "__main__":
    main()
