"""The local server's prompt cache on FOR, off and on: completion tokens per second, and the prompt tokens the server
evaluated against those it was sent (docs/prompt_cache.md).

Each run is a ``compare`` of FOR (N = 1 + Host) on the first ``--items`` GSM8K val items, at temperature 0 with DSPy's
cache off, on a server of its own started fresh for it with the default slots (items side by side, as a comparison
runs them), into a fresh results directory: ``prompt_cache = false`` (every prompt read whole) and the default
(llama.cpp's prompt reuse), in the order ``--order`` gives, ``--repeats`` times. Per run:

* completion tokens/s: the completion tokens of every call ÷ the run's wall time (``compare`` alone: the server is
  started before the clock);
* prompt tokens sent (the calls' usage), evaluated and reused (the server's own counters, ``/metrics``:
  ``prompt_tokens_total`` and ``prompt_tokens_cached_total``);
* the items whose final answer changed from the first run without the cache.

Timings are only meaningful alone on the machine (llama.cpp is compute-bound: a second CPU job slows it several
times); the token counts are not affected by load.

    python experiments/benchmarks/prompt_cache.py --data-dir DATA_DIR                  # 6 items, 1.5B
    python experiments/benchmarks/prompt_cache.py --data-dir DATA_DIR --model qwen2.5-coder-0.5b --items 2 \\
        --max-tokens 256                                                                 # a quick check
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)

CONFIG = """experiment = "prompt-cache"
[[datasets]]
name = "gsm8k"
split = "val"
[[methods]]
name = "for"
label = "for_n1_host"
options = { rounds = 1, host = true }
"""


@dataclass
class Run:
    cache: bool
    wall: float
    completion: int
    sent: int
    evaluated: int
    reused: int
    answers: dict[str, str]

    @property
    def tps(self) -> float:
        return self.completion / self.wall


def run(cache: bool, args: argparse.Namespace, work: Path, n: int) -> Run:
    from dspy_for.experiments.comparison import compare
    from dspy_for.lm import server

    folder = work / f"run{n}-{'on' if cache else 'off'}"
    folder.mkdir()
    config = folder / "for.toml"
    config.write_text(CONFIG)
    server.ensure_server(args.model)  # started (and loaded) before the clock: each run on a fresh server
    start = time.perf_counter()
    result = compare(
        config,
        first=args.items,
        data_dir=args.data_dir,
        lm=f"local/{args.model}",
        lm_options={"prompt_cache": cache},
        max_tokens=args.max_tokens,
        cache=False,
        results_dir=str(folder / "items"),
        tracking_uri=f"sqlite:///{folder}/mlflow.db",
    )
    wall = time.perf_counter() - start
    seen = server.metrics(server.ensure_server(args.model))
    server.stop_server(args.model)
    if not result.ok:
        raise SystemExit(f"a run with the cache {'on' if cache else 'off'} has failed items: see {folder}")
    items = result.results["gsm8k"]["for_n1_host"].items
    total: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0}
    for item in items:
        for k in total:
            total[k] += int(item.usage.get("total", {}).get(k, 0))
    return Run(
        cache=cache,
        wall=wall,
        completion=total["completion_tokens"],
        sent=total["prompt_tokens"],
        evaluated=int(seen["prompt_tokens_total"]),
        reused=int(seen["prompt_tokens_cached_total"]),
        answers={item.id: item.answer for item in items},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="directory with gsm8k/train.jsonl (e.g. ../shared/datasets)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="local registry model (dspy-for models list)")
    ap.add_argument("--items", type=int, default=6, help="GSM8K val items, from the first")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--order", default="off,on", help="the runs' order, e.g. off,on or on,off")
    ap.add_argument("--repeats", type=int, default=1, help="how many times to run the order")
    args = ap.parse_args()
    order = [o.strip() for o in args.order.split(",")]
    if set(order) - {"on", "off"}:
        ap.error("--order takes on and off")
    work = Path(tempfile.mkdtemp(prefix="dspy-for-prompt-cache-"))
    os.environ["DSPY_FOR_SERVER_DIR"] = str(work / "servers")  # servers of our own: never a shared one
    os.environ["DSPY_FOR_CACHE_DIR"] = str(work / "dspy_cache")  # and cache=False: every answer is the server's
    runs: list[Run] = []
    print(f"{args.model}, FOR N=1 + Host, GSM8K val first {args.items} items; servers, logs and records in {work}")
    for _ in range(args.repeats):
        for o in order:
            r = run(o == "on", args, work, len(runs))
            runs.append(r)
            print(f"  prompt cache {o:3s}: {r.tps:5.2f} completion tok/s, {r.wall:7.1f} s", flush=True)
    print(
        f"\n{'prompt cache':12s} {'completion tok/s':>16s} {'wall s':>8s} {'completion':>10s} {'prompt sent':>11s} "
        f"{'evaluated':>9s} {'reused':>7s} {'evaluated ÷ sent':>16s}"
    )
    for r in runs:
        print(
            f"{'on' if r.cache else 'off':12s} {r.tps:16.2f} {r.wall:8.1f} {r.completion:10d} {r.sent:11d} "
            f"{r.evaluated:9d} {r.reused:7d} {r.evaluated / max(r.sent, 1):16.2f}"
        )
    off = [r for r in runs if not r.cache]
    on = [r for r in runs if r.cache]
    if off and on:
        speed = sum(r.completion for r in on) / sum(r.wall for r in on)
        base = sum(r.completion for r in off) / sum(r.wall for r in off)
        print(f"\nwith the cache ÷ without: {speed / base:.2f}× completion tokens/s")
        first = off[0].answers
        for r in runs[1:]:
            changed = sorted(k for k in first if r.answers.get(k) != first[k])
            label = "on" if r.cache else "off"
            print(f"answers changed from the first run without the cache, a run {label}: {len(changed)} {changed}")


if __name__ == "__main__":
    main()
