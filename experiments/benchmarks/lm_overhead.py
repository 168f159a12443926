"""Overhead of dspy-for's LM layer over the raw OpenAI client, against the local llama.cpp server.

The same 20 chat completions (fixed prompts, temperature 0, max_tokens 64) once through the `openai`
client and once through `make_lm(..., cache=False)` (usage recording included); prints both wall times
and their ratio (target <= 1.10).

    python experiments/benchmarks/lm_overhead.py [--model qwen2.5-coder-0.5b] [--n 20]
"""

from __future__ import annotations

import argparse
import time

PROMPTS = [f"In one sentence, what is {a} times {b}?" for a, b in zip(range(2, 40, 2), range(3, 60, 3), strict=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()

    from openai import OpenAI

    from dspy_for import make_lm, track_usage

    lm = make_lm(f"local/{args.model}", cache=False, max_tokens=64)
    client = OpenAI(base_url=lm.server.base_url, api_key="local-no-key")
    prompts = (PROMPTS * 2)[: args.n]
    client.chat.completions.create(model=lm.server.alias, messages=[{"role": "user", "content": "hi"}], max_tokens=4)

    start = time.perf_counter()
    raw_tokens = 0
    for p in prompts:
        r = client.chat.completions.create(model=lm.server.alias, messages=[{"role": "user", "content": p}],
                                           temperature=0, max_tokens=64)
        raw_tokens += r.usage.completion_tokens
    raw = time.perf_counter() - start

    start = time.perf_counter()
    with track_usage() as usage:
        for p in prompts:
            lm(p, temperature=0, max_tokens=64)
    ours = time.perf_counter() - start

    print(f"{'path':28s} {'calls':>5s} {'completion tok':>15s} {'wall s':>8s}")
    print(f"{'raw openai client':28s} {len(prompts):5d} {raw_tokens:15d} {raw:8.2f}")
    u = usage.total
    print(f"{'dspy-for LM layer (no cache)':28s} {u.calls:5d} {u.completion_tokens:15d} {ours:8.2f}")
    print(f"ratio (ours / raw): {ours / raw:.3f}  (target <= 1.10)")


if __name__ == "__main__":
    main()
