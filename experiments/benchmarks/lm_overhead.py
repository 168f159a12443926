"""Overhead of dspy-for's LM layer over the raw OpenAI client, against the local llama.cpp server.

The same 20 chat completions (fixed prompts, temperature 0, max_tokens 64) once through the `openai`
client and once through `make_lm(..., cache=False)` (usage recording included), interleaved call by
call; prints both wall times and their ratio (target <= 1.10). Set DSPY_FOR_SERVER_DIR to a fresh
directory to measure on a server no other process is using.

    python experiments/benchmarks/lm_overhead.py [--model qwen2.5-coder-0.5b] [--n 20]
"""

from __future__ import annotations

import argparse
import statistics
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

    # interleave the two paths call by call, alternating which goes first (llama.cpp reuses the previous
    # prompt's KV cache), so load from other processes on the shared CPU hits both alike
    times: dict[str, list[float]] = {"raw": [], "ours": []}
    raw_tokens = raw_prompt = 0

    def call_raw(p: str) -> None:
        nonlocal raw_tokens, raw_prompt
        r = client.chat.completions.create(model=lm.server.alias, messages=[{"role": "user", "content": p}],
                                           temperature=0, max_tokens=64)
        raw_tokens += r.usage.completion_tokens
        raw_prompt += r.usage.prompt_tokens

    def call_ours(p: str) -> None:
        lm(p, temperature=0, max_tokens=64)

    with track_usage() as usage:
        for i, p in enumerate(prompts):
            order = [("raw", call_raw), ("ours", call_ours)]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                fn(p)
                times[name].append(time.perf_counter() - start)
    raw, ours = sum(times["raw"]), sum(times["ours"])
    med_raw, med_ours = statistics.median(times["raw"]), statistics.median(times["ours"])

    u = usage.total
    print(f"{'path':28s} {'calls':>5s} {'prompt tok':>10s} {'completion tok':>14s} {'wall s':>8s} {'median s':>9s}")
    print(f"{'raw openai client':28s} {len(prompts):5d} {raw_prompt:10d} {raw_tokens:14d} {raw:8.2f} {med_raw:9.3f}")
    print(f"{'dspy-for LM layer (no cache)':28s} {u.calls:5d} {u.prompt_tokens:10d} {u.completion_tokens:14d} "
          f"{ours:8.2f} {med_ours:9.3f}")
    print(f"ratio (ours / raw): total {ours / raw:.3f}, median call {med_ours / med_raw:.3f}  (target <= 1.10)")

if __name__ == "__main__":
    main()
