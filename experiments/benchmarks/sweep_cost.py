"""What a FOR sweep over N costs with the DSPy cache on, relative to one N = 3 run.

A FOR run with N rounds is a prefix of the run with N + 1 rounds (the round prompts do not depend on N),
so a sweep over N ∈ {0, 1, 2, 3} should spend about what the single N = 3 run spends: every trial after
the first only pays for the rounds (and the Host call) it does not share with an earlier trial.

Each scenario runs the real sweep machinery (``dspy_for.experiments.sweeps.sweep`` with the trials enqueued in
the given order, default objective, journal storage, MLflow tracking) in a fresh directory with a fresh,
empty DSPy cache, and sums the tokens actually sent to the LM (``Usage.total.tokens``: cache hits are
counted apart as ``cached_tokens``).

    python experiments/benchmarks/sweep_cost.py                       # scripted LM, 20 items (seconds)
    python experiments/benchmarks/sweep_cost.py --lm local/qwen2.5-coder-0.5b --items 3 --host off

The scripted LM answers like FOR's roles would, with a realistic length model (Defender work of 60–140
words, 1–3 Debater questions that depend on the dialogue so far, replies per question, a Host
re-solution); tokens are whitespace words. Target: sweep / single ≤ 1.15.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)

TARGET = 1.15
WORDS = [
    "add", "subtract", "multiply", "total", "each", "remaining", "so", "therefore", "per", "cost", "left",
    "units", "times", "half", "twice", "amount", "number", "sum", "difference", "check", "step", "value",
    "result", "gives",
]


def _h(text: str, mod: int) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % mod


def _prose(seed: str, n: int) -> str:
    return " ".join(WORDS[_h(f"{seed}{i}", len(WORDS))] for i in range(n))


def scripted_responder(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    from dspy_for.testing import system_text, user_text

    system, user = system_text(messages), user_text(messages)
    answer = str(_h(user[:200], 90) + 10)
    if "You are the Debater" in system:
        k = 1 + _h(user, 3)
        return {"questions": [f"How did you get {_prose(user + str(i), 6)} in step {i + 1}?" for i in range(k)]}
    if "asked questions about" in system:
        k = max(1, user.count("?"))
        return {"responses": [_prose(f"{user}r{i}", 20) for i in range(min(k, 3))], "error_found": "False",
                "error": "none", "reasoning": _prose(user, 60 + _h(user, 80)), "answer": answer}
    if "You are the Host" in system:
        return {"reasoning": _prose(user, 80 + _h(user, 60)), "answer": answer}
    return {"reasoning": _prose(user, 60 + _h(user, 80)), "answer": answer}


CONFIG = """
method = "for"
study = "cost"
lm = "{lm}"
max_tokens = {max_tokens}
n_trials = {n}
chunk_size = 1000
pruner = "none"
sampler = "random"
enqueue = [{points}]
[fixed]
host = {host}
stop = "fixed"
[dataset]
name = "{dataset}"
split = "{split}"
first = {items}
{data_dir}
[search.rounds]
type = "int"
low = 0
high = 3
"""


def run_scenario(order: list[int], args: argparse.Namespace, host: bool) -> dict[str, float]:
    """A fresh directory and an empty cache; the trials of ``order`` in that order. Returns token sums."""
    import dspy
    from dspy.clients.cache import Cache

    import dspy_for.lm as lm_pkg
    from dspy_for.experiments.sweeps.sweep import sweep

    with tempfile.TemporaryDirectory(prefix="sweep-cost-") as tmp:
        os.chdir(tmp)
        os.environ["DSPY_FOR_CACHE_DIR"] = str(Path(tmp) / "cache")
        if args.lm == "scripted":
            from dspy_for.testing import ScriptedLM

            dspy.cache = Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir="",
                               memory_max_entries=1_000_000)
            lm = ScriptedLM(scripted_responder, cache=True)
            lm_pkg.make_lm = lambda spec, **options: lm  # the objective resolves make_lm at call time
        cfg = Path(tmp) / "cost.toml"
        cfg.write_text(CONFIG.format(
            lm=args.lm if args.lm != "scripted" else "openai/scripted", max_tokens=args.max_tokens, n=len(order),
            points=", ".join(f"{{ rounds = {r} }}" for r in order), host=str(host).lower(),
            dataset=args.dataset, split=args.split, items=args.items,
            data_dir=f'data_dir = "{args.data_dir}"' if args.data_dir else ""))
        result = sweep(cfg, tracking_uri=f"sqlite:///{tmp}/mlruns/mlflow.db")
        trials = result.study.trials
        if [t.params["rounds"] for t in trials] != order or any(t.state.name != "COMPLETE" for t in trials):
            raise RuntimeError(f"unexpected trials: {[(t.params, t.state.name) for t in trials]}")
        return {
            "spent": sum(t.user_attrs["spent_tokens"] for t in trials),
            "cached": sum(t.user_attrs["cached_tokens"] for t in trials),
            "calls": sum(t.user_attrs["calls"] for t in trials),
            "accuracy": {t.params["rounds"]: t.value for t in trials},
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lm", default="scripted", help="'scripted' (default) or a make_lm spec, e.g. local/...")
    p.add_argument("--items", type=int, default=20)
    p.add_argument("--dataset", default="gsm8k")
    p.add_argument("--split", default="sample")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--host", choices=("off", "on", "both"), default="both")
    args = p.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    cwd = os.getcwd()
    hosts = {"off": [False], "on": [True], "both": [False, True]}[args.host]
    table = Table(title=f"FOR sweep N ∈ {{0,1,2,3}} vs one N = 3 run — lm={args.lm}, {args.items} items "
                        f"of {args.dataset}/{args.split}, fresh cache per row")
    for col in ("host", "sweep order", "sweep tokens", "N=3 tokens", "ratio", f"≤ {TARGET}", "sweep cached"):
        table.add_column(col, justify="right")
    for host in hosts:
        single = run_scenario([3], args, host)
        for order in ([0, 1, 2, 3], [3, 2, 1, 0]):
            s = run_scenario(order, args, host)
            ratio = s["spent"] / max(1, single["spent"])
            table.add_row("on" if host else "off", ",".join(map(str, order)), f"{s['spent']:.0f}",
                          f"{single['spent']:.0f}", f"{ratio:.3f}", "yes" if ratio <= TARGET else "NO",
                          f"{s['cached']:.0f}")
    os.chdir(cwd)
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
