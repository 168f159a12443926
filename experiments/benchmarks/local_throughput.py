"""The embedded server's throughput: completion tokens per second and wall time with 1, 2, 4 and 8 requests in flight,
llama.cpp's batching ``llama-server`` beside the earlier embedded server (llama-cpp-python's, one request at a time).

Each row is one server, started fresh on its own (a server directory of the benchmark's own), answering the same
GSM8K train questions as chat requests (temperature 0, ``--max-tokens`` each, no cache) with N requests in flight: a
pool of N clients, each sending its next question when its last is answered. Completion tokens/s is every answer's
completion tokens ÷ the wall time from the first request sent to the last answer. Rows:

* ``llama-server`` with ``slots`` = N (N requests in flight on N slots);
* ``llama-server`` with the default slots (:data:`~dspy_for.lm.options.DEFAULT_SLOTS`) at N in flight, where N differs;
* ``llama-cpp-python``: the earlier server (``pip install 'dspy-for[legacy-server]'``; left out when it is not
  installed), which answers one request at a time whatever N.

Besides: each model's prompt tokens/s on one request alone (llama-server's own timing of its prompt reading, from
``/metrics``), and at the end the lines of ``[models.NAME.speed]`` for ``dspy_for/lm/models.toml`` (what ``--dry-run``
estimates a local cell's LM time from). ``--out FILE`` keeps every row as a JSON line and skips the rows already
there: a killed run resumes. Timings are only meaningful alone on the machine: a second CPU job slows llama.cpp
several times.

    python experiments/benchmarks/local_throughput.py --data-dir DATA_DIR --out throughput.jsonl
    python experiments/benchmarks/local_throughput.py --data-dir DATA_DIR --models qwen2.5-coder-0.5b \\
        --levels 1,4 --servers new --questions 4 --max-tokens 32          # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)

SYSTEM = "Solve the grade-school math problem. Think step by step, then give the final number."
SERVERS = ("new", "old")


@dataclass(frozen=True)
class Row:
    model: str
    server: str  # "llama-server" or "llama-cpp-python"
    slots: int  # parallel slots (1 for llama-cpp-python)
    in_flight: int
    questions: int
    max_tokens: int
    completion_tokens: int
    wall: float
    prompt_tps_alone: float | None = None  # llama-server's prompt tokens/s, with one request in flight

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.model, self.server, self.slots, self.in_flight, self.questions, self.max_tokens)

    @property
    def tps(self) -> float:
        return self.completion_tokens / self.wall


def chat(base_url: str, model: str, question: str, max_tokens: int) -> int:
    """One chat request; its completion tokens."""
    body = {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "temperature": 0.0,
        "max_tokens": max_tokens,
    }
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=3600) as resp:
        answer = json.loads(resp.read())
    return int(answer["usage"]["completion_tokens"])


def run_load(base_url: str, model: str, questions: list[str], in_flight: int, max_tokens: int) -> tuple[int, float]:
    """Every question with ``in_flight`` requests at a time: (completion tokens, wall seconds)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        tokens = sum(pool.map(lambda q: chat(base_url, model, q, max_tokens), questions))
    return tokens, time.perf_counter() - start


def new_server(name: str, slots: int) -> tuple[Any, Any]:
    from dspy_for.lm import server

    info, proc = server.start_server(name, slots=slots, started_by="benchmark")
    return info, proc


def old_server(name: str, work: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """llama-cpp-python's server, as the embedded server of earlier versions ran it: (base URL, process)."""
    from dspy_for.errors import require
    from dspy_for.lm import server
    from dspy_for.lm.registry import model_path

    require("llama_cpp.server", extra="legacy-server", package="llama-cpp-python[server]")
    port = server._free_port()
    alias = server.alias_for(name)
    threads = str(min(os.cpu_count() or 2, 8))
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path(name)), "--model_alias", alias]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads", threads]
    log = (work / f"{name}.old.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    info = server.ServerInfo(name, alias, "127.0.0.1", port, proc.pid, "benchmark", 4096, int(threads))
    deadline = time.monotonic() + 300
    while not server.healthy(info, timeout=1.0):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"llama-cpp-python's server did not start; see {work / f'{name}.old.log'}")
        time.sleep(0.5)
    return info.base_url, proc


def measure(name: str, kind: str, slots: int, in_flight: int, questions: list[str], max_tokens: int, work: Path) -> Row:
    from dspy_for.lm import server

    if kind == "new":
        info, proc = new_server(name, slots)
        base, alias = info.base_url, info.alias
    else:
        base, proc = old_server(name, work)
        alias = server.alias_for(name)
    try:
        tokens, wall = run_load(base, alias, questions, in_flight, max_tokens)
        prompt_tps = None
        if kind == "new" and in_flight == 1:
            seen = server.metrics(info)
            prompt_tps = seen["prompt_tokens_total"] / seen["prompt_seconds_total"]
    finally:
        server._terminate(proc.pid)
    label = "llama-server" if kind == "new" else "llama-cpp-python"
    return Row(name, label, slots, in_flight, len(questions), max_tokens, tokens, wall, prompt_tps)


def plan(
    models: list[str], servers: list[str], levels: list[int], default_slots: int
) -> list[tuple[str, str, int, int]]:
    """(model, server kind, slots, in flight) of every row, in the order they run."""
    rows = []
    for m in models:
        for n in levels:
            if "old" in servers:
                rows.append((m, "old", 1, n))
            if "new" in servers:
                rows.append((m, "new", n, n))
                if n != default_slots:
                    rows.append((m, "new", default_slots, n))
    return rows


def report(rows: list[Row], default_slots: int) -> None:
    print(
        f"\n{'model':20s} {'server':17s} {'slots':>5s} {'in flight':>9s} {'completion tok/s':>16s} {'wall s':>8s} "
        f"{'tokens':>7s}"
    )
    for r in rows:
        print(
            f"{r.model:20s} {r.server:17s} {r.slots:5d} {r.in_flight:9d} {r.tps:16.1f} {r.wall:8.1f} "
            f"{r.completion_tokens:7d}"
        )
    print()
    for model in dict.fromkeys(r.model for r in rows):
        mine = [r for r in rows if r.model == model]
        old = {r.in_flight: r for r in mine if r.server == "llama-cpp-python"}
        new = {r.in_flight: r for r in mine if r.server == "llama-server" and r.slots == r.in_flight}
        for n, r in new.items():
            if n in old:
                print(
                    f"{model}: {n} in flight, llama-server on {n} slots ÷ llama-cpp-python: {r.tps / old[n].tps:.2f}×"
                )
        alone = next((r.prompt_tps_alone for r in mine if r.prompt_tps_alone), None)
        speeds = {r.slots: round(r.tps, 1) for r in new.values()}
        if speeds and alone:
            print(f'\n[models."{model}".speed]')
            what = f"{mine[0].questions} GSM8K train questions, temperature 0, {mine[0].max_tokens} max tokens"
            print(f'measured = "{os.cpu_count()} cores, {time.strftime("%Y-%m-%d")}, local_throughput.py: {what}"')
            print(f"prompt = {alone:.1f}")
            print("completion = { " + ", ".join(f"{k} = {v}" for k, v in sorted(speeds.items())) + " }\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="directory with gsm8k/train.jsonl (e.g. ../shared/datasets)")
    ap.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    ap.add_argument("--servers", default="new,old", help="new (llama-server), old (llama-cpp-python), or both")
    ap.add_argument("--levels", default="1,2,4,8", help="requests in flight")
    ap.add_argument("--questions", type=int, default=8, help="GSM8K train questions, from the first")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", default=None, help="JSONL of the rows: kept, and the rows in it are not run again")
    args = ap.parse_args()

    from dspy_for.datasets import load_dataset
    from dspy_for.lm.options import DEFAULT_SLOTS

    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if not set(servers) <= set(SERVERS):
        ap.error(f"--servers takes {', '.join(SERVERS)}")
    if "old" in servers:
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError:
            print("llama-cpp-python is not installed (pip install 'dspy-for[legacy-server]'): no old-server rows")
            servers.remove("old")
    levels = [int(x) for x in args.levels.split(",")]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    questions = [str(ex.question) for ex in load_dataset("gsm8k", "train", data_dir=args.data_dir)[: args.questions]]
    work = Path(tempfile.mkdtemp(prefix="dspy-for-throughput-"))
    os.environ["DSPY_FOR_SERVER_DIR"] = str(work / "servers")  # servers of our own: never a shared one
    out = Path(args.out) if args.out else None
    done = (
        [Row(**json.loads(line)) for line in out.read_text().splitlines() if line.strip()]
        if out and out.exists()
        else []
    )
    rows = list(done)
    print(f"{len(questions)} questions, {args.max_tokens} max tokens; servers and logs in {work}")
    for model, kind, slots, n in plan(models, servers, levels, DEFAULT_SLOTS):
        label = "llama-server" if kind == "new" else "llama-cpp-python"
        key = (model, label, slots, n, len(questions), args.max_tokens)
        if any(r.key == key for r in done):
            continue
        row = measure(model, kind, slots, n, questions, args.max_tokens, work)
        print(f"{model} {label} slots {slots}, {n} in flight: {row.tps:.1f} tok/s, {row.wall:.1f} s", flush=True)
        rows.append(row)
        if out is not None:
            with out.open("a") as f:
                f.write(json.dumps(asdict(row)) + "\n")
    wanted = {
        (m, "llama-server" if k == "new" else "llama-cpp-python", s, n)
        for m, k, s, n in plan(models, servers, levels, DEFAULT_SLOTS)
    }
    report([r for r in rows if (r.model, r.server, r.slots, r.in_flight) in wanted and r.questions == len(questions)
            and r.max_tokens == args.max_tokens], DEFAULT_SLOTS)  # fmt: skip


if __name__ == "__main__":
    main()
