"""The local server's prompt cache, off vs on: prompt tokens computed ÷ sent, wall time per FOR item and per
CoT item, and the items whose answer or dialogue changed (issue 30 §3; docs/prompt_cache.md).

Both servers of the model run side by side in a fresh server directory (the default server and the
prompt-caching one; only one computes at a time), with a fresh, empty DSPy cache and ``cache=False``, so
every call reaches its server. Per GSM8K val item the methods run cache off and on, interleaved (off, on
for even items, on, off for odd ones), so load from other processes hits both alike; the order of the
requests each server sees is the order of a normal sequential run.

* sent: the prompt tokens of every call (the server's usage); computed: the prompt tokens the server
  evaluated, read from its log per request (llama.cpp's ``prompt eval`` count, or the exact reuse line
  ``Llama.generate: K prefix-match hit, remaining R prompt tokens`` when the server reused a prefix).
* ``--control``: each item once more on the default server, after an unrelated request: the default
  server reuses the longest prefix it shares with the request before, and that changes its arithmetic at
  the last bit, so this is how often its own dialogues change with nothing but the request before them.
* changed answer: the final answer differs (a program error, e.g. an unreadable first answer, counts as the
  answer "error: <type>"; a failed LM call stops the benchmark); changed dialogue: any LM output of the item
  differs, or the number of calls does.
* wall s: the item's wall time; server CPU s: the CPU time the server process spent on it (from /proc),
  less disturbed by other jobs than wall time but no substitute for it. Timings are only meaningful alone
  on the machine (llama.cpp is compute-bound: any other CPU job slows the server several times).

    python experiments/benchmarks/prompt_cache.py --data-dir ../shared/datasets            # 3 items, 1.5B
    python experiments/benchmarks/prompt_cache.py --data-dir ../shared/datasets --model qwen2.5-coder-0.5b --items 2
    python experiments/benchmarks/prompt_cache.py --data-dir ../shared/datasets --items 10 --control
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)

GOAL = 1.3  # FOR items at least this much faster with the cache, answers identical
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "for": ("for", {"rounds": 1, "host": True}),  # FOR N = 1 + Host, as in the matched-budget table
    "cot": ("cot", {}),
}
_END = re.compile(r"llama_perf_context_print:\s+total time")
_PROMPT_EVAL = re.compile(r"llama_perf_context_print:\s+prompt eval time =.*?/\s*(\d+) tokens")
_REUSE = re.compile(r"prefix-match hit, remaining (\d+) prompt tokens to eval")


def computed_per_request(log_text: str) -> list[int]:
    """Prompt tokens evaluated by each request completed in ``log_text`` (a llama-cpp-python server log, verbose).

    A request ends at llama.cpp's ``total time`` timing line. Its count is the ``remaining R`` of the reuse line
    when the server reused a prefix (exact, even for a single token), else the ``prompt eval`` token count.
    """
    out: list[int] = []
    reuse: int | None = None
    prompt_eval: int | None = None
    for line in log_text.splitlines():
        if m := _REUSE.search(line):
            reuse = int(m.group(1))
        elif m := _PROMPT_EVAL.search(line):
            prompt_eval = int(m.group(1))
        elif _END.search(line):
            if reuse is None and prompt_eval is None:
                raise RuntimeError(f"a request in the server log has no prompt evaluation count: {line!r}")
            out.append(reuse if reuse is not None else int(prompt_eval or 0))
            reuse = prompt_eval = None
    return out


class LogReader:
    """New text of a server log since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def read(self) -> str:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        return data.decode(errors="replace")


@dataclass
class Run:
    """One method on one item with one server."""

    answer: str
    outputs: list[str]
    sent: int
    computed: int
    completion: int
    wall: float
    cpu: float
    calls: int


MODES = ("off", "on", "off again")  # "off again": the control, the default server once more after another request


@dataclass
class Row:
    runs: dict[str, list[Run]] = field(default_factory=lambda: {mode: [] for mode in MODES})


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc), its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_item(program: Any, lm: Any, log: LogReader, example: Any) -> Run:
    import dspy

    from dspy_for.lm import track_usage

    log.read()
    cpu = cpu_seconds(lm.server.pid)
    start = time.perf_counter()
    with dspy.context(lm=lm), track_usage() as usage:
        try:
            answer = str(program(**example.inputs()).get("answer"))
        except Exception as exc:  # the program failed (e.g. an unreadable first answer): compared like an answer
            answer = f"error: {type(exc).__name__}"
    wall = time.perf_counter() - start
    cpu = cpu_seconds(lm.server.pid) - cpu
    calls = [c for c in usage.calls if not c.cache_hit]
    if any(not c.ok for c in usage.calls):  # an LM failure fails the benchmark: it is no outcome to compare
        raise RuntimeError(f"an LM call failed: {[c.error for c in usage.calls if not c.ok]}")
    computed = computed_per_request(log.read())
    if len(computed) != len(calls):
        raise RuntimeError(f"{len(calls)} LM calls but {len(computed)} requests in the server log {log.path}")
    outputs = [repr(c.content.returned) if c.content is not None else "?" for c in usage.calls]
    return Run(
        answer=answer,
        outputs=outputs,
        sent=sum(c.prompt_tokens for c in calls),
        computed=sum(computed),
        completion=sum(c.completion_tokens for c in calls),
        wall=wall,
        cpu=cpu,
        calls=len(usage.calls),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="local registry model (dspy-for models list)")
    ap.add_argument("--items", type=int, default=3, help="GSM8K val items, from the first")
    ap.add_argument("--skip", type=int, default=0, help="start at this GSM8K val item")
    ap.add_argument("--data-dir", default=None, help="directory with gsm8k/train.jsonl (e.g. ../shared/datasets)")
    ap.add_argument("--methods", default="for,cot", help=f"comma-separated, of: {', '.join(METHODS)}")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None, help="server CPU threads (default: all cores)")
    ap.add_argument(
        "--control",
        action="store_true",
        help="also run each item once more on the default server after an unrelated request: how often its own "
        "dialogues change with the request before them (the noise floor of the off/on comparison)",
    )
    args = ap.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        ap.error(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")

    work = Path(tempfile.mkdtemp(prefix="dspy-for-prompt-cache-"))
    os.environ["DSPY_FOR_SERVER_DIR"] = str(work / "servers")  # our own servers: their logs are ours alone
    os.environ["DSPY_FOR_CACHE_DIR"] = str(work / "dspy_cache")  # empty, and cache=False below anyway

    from dspy_for import make_lm
    from dspy_for.datasets import load_dataset, signature_for
    from dspy_for.experiments import build_method
    from dspy_for.lm import server

    examples = load_dataset("gsm8k", "val", data_dir=args.data_dir)[args.skip : args.skip + args.items]
    signature = signature_for("gsm8k")
    threads = {"n_threads": args.threads} if args.threads else {}
    lms = {
        on: make_lm(f"local/{args.model}", cache=False, max_tokens=args.max_tokens, prompt_cache=on, **threads)
        for on in (False, True)
    }
    logs = {on: LogReader(server._paths(args.model, on)[2]) for on in (False, True)}
    rows = {m: Row() for m in methods}
    print(f"model {args.model}; {len(examples)} GSM8K val items from {args.skip}; servers and logs in {work}")
    try:
        for i, ex in enumerate(examples):
            order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
            for m in methods:
                name, options = METHODS[m]
                for mode in order + (["off again"] if args.control else []):
                    lm = lms[mode == "on"]
                    if mode == "off again":
                        lm("Reply with the word: ok", max_tokens=4)  # another request before the item
                        logs[False].read()
                    program = build_method(name, signature, lm=lm, **options)
                    run = run_item(program, lm, logs[mode == "on"], ex)
                    rows[m].runs[mode].append(run)
                    print(
                        f"item {args.skip + i:3d} {m:4s} {mode:9s}: {run.wall:7.1f} s (server CPU {run.cpu:6.1f} s), "
                        f"{run.calls:2d} calls, sent {run.sent:5d}, computed {run.computed:5d}, answer {run.answer}",
                        flush=True,
                    )
    finally:
        for on in (False, True):
            server.release_server(args.model, on)
    report(rows, args.model, args.skip)


def first_difference(a: Run, b: Run) -> str:
    """Where two runs' dialogues part: the first differing call and character."""
    for k, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=False)):
        if x != y:
            at = next((j for j, (c, d) in enumerate(zip(x, y, strict=False)) if c != d), min(len(x), len(y)))
            return f"call {k + 1} of {len(a.outputs)}/{len(b.outputs)}, character {at}"
    return f"{len(a.outputs)} vs {len(b.outputs)} calls"


def report(rows: dict[str, Row], model: str, skip: int = 0) -> None:
    print(f"\nprompt cache off vs on, {model}, interleaved per item")
    head = (
        f"{'method':6s} {'server':9s} {'items':>5s} {'calls/item':>10s} {'sent/item':>9s} {'computed/item':>13s} "
        f"{'computed÷sent':>13s} {'wall s/item':>11s} {'median s':>8s} {'server CPU s/item':>17s}"
    )
    print(head)
    for m, row in rows.items():
        for mode, runs in row.runs.items():
            if not runs:
                continue
            n = len(runs)
            sent = sum(r.sent for r in runs)
            computed = sum(r.computed for r in runs)
            print(
                f"{m:6s} {mode:9s} {n:5d} {sum(r.calls for r in runs) / n:10.1f} {sent / n:9.0f} {computed / n:13.0f} "
                f"{computed / sent:13.2f} {sum(r.wall for r in runs) / n:11.1f} "
                f"{statistics.median(r.wall for r in runs):8.1f} {sum(r.cpu for r in runs) / n:17.1f}"
            )
    print()
    for m, row in rows.items():
        off = row.runs["off"]
        for mode in ("on", "off again"):
            other = row.runs[mode]
            if not other:
                continue
            pairs = list(zip(off, other, strict=True))
            answers = [skip + i for i, (a, b) in enumerate(pairs) if a.answer != b.answer]
            dialogues = {skip + i: first_difference(a, b) for i, (a, b) in enumerate(pairs) if a.outputs != b.outputs}
            what = "with the cache" if mode == "on" else "the default server again (control)"
            speed = sum(r.wall for r in off) / sum(r.wall for r in other)
            cpu = sum(r.cpu for r in off) / sum(r.cpu for r in other)
            goal = f" (goal >= {GOAL}x with identical answers)" if m == "for" and mode == "on" else ""
            print(
                f"{m}, off vs {what}: {speed:.2f}x faster{goal}, server CPU {cpu:.2f}x less; answers changed on "
                f"{len(answers)} of {len(pairs)} items {answers}; dialogues changed on {len(dialogues)}"
            )
            for item, where in dialogues.items():
                print(f"    item {item}: first difference at {where}")


if __name__ == "__main__":
    main()
