"""Throughput against a remote-like endpoint: ``compare`` vs ``dspy.Evaluate`` and ``mlflow.genai.evaluate``, methods
side by side, and a rate limit.

A local OpenAI-compatible server (``dspy_for.testing.OpenAICompatibleServer``, 127.0.0.1 only) answers every call
after ``--latency`` seconds, like a hosted model; the items are GSM8K questions read from ``DATA_DIR/gsm8k/
train.jsonl`` (the upstream file) into a temporary JSONL, run with ``dspy-for compare --data`` (the command a user
types, to its exit). Each measurement is a whole process (interpreter start-up, imports, MLflow tracking, a fresh
DSPy cache) timed from outside, so a number is what a user waits. The latency-bound ideal is calls × latency ÷
concurrency (the calls the server answered). Every run names ``openai/gpt-4o-mini``, as a hosted run names a model
DSPy's and litellm's price catalogs know (for a name DSPy does not know, a plain ``dspy.LM`` reads its whole catalog
on every call to price it, which would slow ``dspy.Evaluate``'s side alone).

1. ``evaluate``: CoT at two sizes in one run — 1,319 items × 64 threads and 100 × 16 — ``compare`` ÷ ``dspy.Evaluate``
   (goals at 1,319 × 64: ≤ 1.3 with per-item traces, ≤ 1.15 without), with and without MLflow traces, into a new
   MLflow store (a user's first run: MLflow creates its tables) and into an existing one; with traces also written
   by a thread of the run's process (``DSPY_FOR_TRACE_WRITER=thread``) instead of the trace writer process; and at
   100 × 16, ``compare`` (traces on) ÷ ``mlflow.genai.evaluate`` of the same CoT program with a scorer equal to the
   project's numeric match (goal ≤ 0.5; ``MLFLOW_GENAI_EVAL_MAX_WORKERS`` = the threads).
2. ``methods``: a 4-method compare (single, CoT, FOR N=1 + Host, self-consistency k=4) ÷ its slowest method alone
   (goal ≤ 1.3).
3. ``rate-limit``: CoT at 16 threads against an endpoint that takes 4 requests in flight and answers 429 with
   ``Retry-After: 1`` beyond: failed items (goal 0) and wall ÷ the rate-limited ideal (goal ≤ 1.5), for the whole
   process, for the command alone (from its start to its exit: without interpreter start-up and imports) and for
   its calls (the server's first request to its last answer: without the run's set-up and report).

    python experiments/benchmarks/remote_throughput.py --data-dir DATA_DIR            # all three, full size
    python experiments/benchmarks/remote_throughput.py --data-dir DATA_DIR --quick    # tiny sizes: it runs, no numbers
    python experiments/benchmarks/remote_throughput.py --data-dir DATA_DIR --only evaluate --repeats 3

One whole process varies by 15–20 % from run to run on a small machine: ``--repeats N`` runs ``evaluate``'s processes
N times in turn (Evaluate, then each compare, then again) and shows each row's mean wall with its range, the ratios
between means.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOALS = {"evaluate": 1.15, "methods": 1.3, "rate-limit": 1.5}
TRACED_GOAL, GENAI_GOAL = 1.3, 0.5  # compare with traces ÷ dspy.Evaluate; compare ÷ mlflow.genai.evaluate
#: what every child gets (as ``import dspy_for`` sets them): litellm's cost map and MLflow's telemetry stay offline
CHILD_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true", "OPENAI_API_KEY": "sk-bench"}
FOUR = "single,cot,for_n1_host,sc_k4"
#: the model every run names, served by the test server: one DSPy's and litellm's catalogs know, as a hosted run's is
#: (for a name it does not know, DSPy reads its whole catalog to price each call: about 1.5 ms of CPU per call here)
MODEL = "openai/gpt-4o-mini"
CONFIG = """experiment = "throughput"
lm = "{model}"
lm_options = {{ api_base = "{base}" }}
num_threads = {threads}
baseline = "cot"
[[methods]]
name = "single"
[[methods]]
name = "cot"
[[methods]]
name = "for"
label = "for_n1_host"
options = {{ rounds = 1, host = true }}
[[methods]]
name = "self_consistency"
label = "sc_k4"
options = {{ k = 4, temperature = 0.7 }}
"""


# ------------------------------------------------------------------------------------------- children


def _child_compare(args: argparse.Namespace) -> None:
    """``dspy-for compare`` as a user types it, run to its exit: its own table and its exit code (non-zero when an item
    failed). ``run_s``: the command alone, from its start to its exit, without interpreter start-up and imports;
    ``failed``: the failed items of the comparison it ran (``?`` when it exited before one)."""
    from dspy_for import cli_start

    methods = args.methods.split(",")
    baseline = "cot" if "cot" in methods else methods[0]
    uri = ["--tracking-uri", args.tracking_uri] if args.tracking_uri else []
    traces = "--no-traces" if args.no_traces else "--traces"
    sys.argv = ["dspy-for", "compare", args.config, "--data", args.data, "--methods", args.methods,
                "--baseline", baseline, traces, *uri]  # fmt: skip
    cli_start.start(sys.argv[1:])  # what `dspy-for` does first: its tracking process starts beside its imports
    import dspy_for.cli as cli

    ran: list[Any] = []
    real = cli.run_compare

    def kept(*a: Any, **k: Any) -> Any:  # the command's own call, its result kept for its count of failed items
        ran.append(real(*a, **k))
        return ran[-1]

    cli.run_compare = kept
    start = time.perf_counter()
    try:
        cli.main()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code or 0
    run_s = time.perf_counter() - start
    failed = ran[0].n_failed if ran else f"? (exit {code})"
    print(json.dumps({"failed": failed, "run_s": run_s}))
    sys.exit(code)


def _correct(answer: object, gold: object) -> bool:
    """The project's numeric match (:func:`dspy_for.metrics.numeric_match`) on these items: numbers within 0.01."""
    try:
        return abs(float(str(answer).replace(",", "")) - float(str(gold).replace(",", ""))) < 0.01
    except ValueError:
        return False


def _program_and_rows(args: argparse.Namespace) -> tuple[Any, list[dict[str, Any]]]:
    import dspy

    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    lm = dspy.LM(MODEL, api_base=args.base, api_key="sk-bench", temperature=0.0, max_tokens=1024)
    dspy.configure(lm=lm)
    return dspy.ChainOfThought("question -> answer: float"), rows


def _child_evaluate(args: argparse.Namespace) -> None:
    import dspy

    program, rows = _program_and_rows(args)
    devset = [dspy.Example(question=r["question"], answer=str(r["answer"])).with_inputs("question") for r in rows]

    def metric(example: Any, pred: Any, trace: Any = None) -> float:
        return float(_correct(pred.answer, example.answer))

    evaluate = dspy.Evaluate(devset=devset, metric=metric, num_threads=args.threads, display_progress=False)
    out = evaluate(program)
    print(json.dumps({"failed": 0, "score": float(out.score)}))


def _child_genai(args: argparse.Namespace) -> None:
    """``mlflow.genai.evaluate`` of the same CoT program (a trace per item, MLflow's own), its scorer the same match."""
    import mlflow
    from mlflow.genai.scorers import scorer

    program, rows = _program_and_rows(args)
    mlflow.set_tracking_uri(args.tracking_uri)
    mlflow.set_experiment("throughput-genai")

    def predict(question: str) -> dict[str, Any]:
        return {"answer": program(question=question).answer}

    @scorer
    def correct(outputs: dict[str, Any], expectations: dict[str, Any]) -> bool:
        return _correct(outputs["answer"], expectations["expected_response"])

    data = [{"inputs": {"question": r["question"]}, "expectations": {"expected_response": r["answer"]}} for r in rows]
    result = mlflow.genai.evaluate(data=data, predict_fn=predict, scorers=[correct])
    print(json.dumps({"failed": 0, "metrics": {k: float(v) for k, v in result.metrics.items()}}))


# ------------------------------------------------------------------------------------------- parent


def _items(data_dir: Path, n: int, where: Path) -> Path:
    src = data_dir / "gsm8k" / "train.jsonl"
    if not src.is_file():
        sys.exit(f"no GSM8K file at {src}: pass --data-dir with the upstream gsm8k/train.jsonl")
    out = where / f"gsm8k_{n}.jsonl"
    with src.open() as f, out.open("w") as g:
        for line in list(f)[:n]:
            row = json.loads(line)
            g.write(json.dumps({"question": row["question"], "answer": row["answer"].split("####")[-1].strip()}) + "\n")
    return out


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    env = {**env, **CHILD_ENV}
    proc = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode not in (0,):
        sys.stderr.write(proc.stderr[-3000:])
    last = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return wall, json.loads(last[-1]) if last else {"failed": "?"}


def _run(
    mode: str,
    server: Any,
    data: Path,
    threads: int,
    work: Path,
    methods: str = "cot",
    traces: bool = True,
    existing_store: bool = False,
    writer: str = "process",
) -> tuple[float, dict[str, Any], int]:
    """One child process (``mode``: compare, evaluate or genai); returns its wall time, its report (with ``calls_s``:
    the server's first request to its last answer) and the calls the server answered. ``existing_store``: the MLflow
    store already exists (made by an untimed one-item run on other items with its own caches), as it does for every
    run but a user's first. ``writer``: where compare writes its traces (``DSPY_FOR_TRACE_WRITER``)."""
    run_dir = Path(tempfile.mkdtemp(dir=work))
    if existing_store:
        first = run_dir / "first"
        first.mkdir()
        one = first / "gsm8k_first.jsonl"
        one.write_text(data.read_text().splitlines()[-1] + "\n")
        config = first / "first.toml"
        config.write_text(CONFIG.format(model=MODEL, base=server.base_url, threads=1))
        env = {**os.environ, "DSPY_FOR_CACHE_DIR": str(first / "cache"), "DSPY_CACHEDIR": str(first / "dspy_cache")}
        argv = ["--child", "compare", "--config", str(config), "--data", str(one), "--methods", "cot",
                "--tracking-uri", f"sqlite:///{run_dir}/mlflow.db"]  # fmt: skip
        _timed(argv, env)
    env = {
        **os.environ,
        "DSPY_FOR_CACHE_DIR": str(run_dir / "cache"),
        "DSPY_CACHEDIR": str(run_dir / "dspy_cache"),
        "DSPY_FOR_TRACE_WRITER": writer,
        "MLFLOW_GENAI_EVAL_MAX_WORKERS": str(threads),
    }
    server.reset_counters()
    uri = ["--tracking-uri", f"sqlite:///{run_dir}/mlflow.db"]
    if mode == "compare":
        config = run_dir / "throughput.toml"
        config.write_text(CONFIG.format(model=MODEL, base=server.base_url, threads=threads))
        argv = ["--child", "compare", "--config", str(config), "--data", str(data), "--methods", methods, *uri,
                *([] if traces else ["--no-traces"])]  # fmt: skip
    else:
        argv = ["--child", mode, "--data", str(data), "--base", server.base_url, "--threads", str(threads), *uri]
    wall, report = _timed(argv, env)
    report["calls_s"] = server.busy_seconds or 0.0
    return wall, report, len(server.responses)


def _evaluate_rows(
    args: argparse.Namespace, server: Any, data: Path, threads: int, work: Path, genai: bool
) -> list[list[str]]:
    """CoT on ``data`` at ``threads``: dspy.Evaluate, then compare with and without traces into a new and an existing
    store (traces also by a thread), ``--repeats`` rounds of them in turn, and with ``genai`` mlflow.genai.evaluate
    once; one row each, its wall the rounds' mean (their range beside it), ratios to Evaluate's mean."""
    n = len(data.read_text().splitlines())
    runs = [(t, e, "process") for e in (False, True) for t in (True, False)] + [(True, True, "thread")]
    measured: dict[Any, list[tuple[float, dict[str, Any]]]] = {"evaluate": [], **{r: [] for r in runs}}
    ev_calls = 0
    for _ in range(args.repeats):  # in turn, so that a slower stretch of the machine falls on every run alike
        wall, report, ev_calls = _run("evaluate", server, data, threads, work)
        measured["evaluate"].append((wall, report))
        for traces, existing, writer in runs:
            wall, report, _ = _run("compare", server, data, threads, work, traces=traces, existing_store=existing,
                                   writer=writer)  # fmt: skip
            measured[(traces, existing, writer)].append((wall, report))
    ideal = ev_calls * args.latency / threads
    what = f"CoT {n} items × {threads} threads"
    ev_wall, ev_report = _mean(measured["evaluate"])
    rows = [[what, "dspy.Evaluate", _walls(measured["evaluate"]), f"{ideal:.1f}", ev_report["failed"],
             f"its calls {ev_report['calls_s']:.1f} s", ""]]  # fmt: skip
    traced: list[float] = []
    for traces, existing, writer in runs:
        wall, report = _mean(measured[(traces, existing, writer)])
        traced += [wall] if traces and writer == "process" else []
        run = ("compare" if traces else "compare --no-traces") + (", existing store" if existing else ", new store")
        run += ", traces by a thread" if writer == "thread" else ""
        alone, calls = report["run_s"], report["calls_s"]
        ratio = f"{wall / ev_wall:.2f} × Evaluate; the command alone {alone:.1f} s, its calls {calls:.1f} s"
        goal = "" if genai else f"≤ {TRACED_GOAL}" if traces else f"≤ {GOALS['evaluate']}"  # (the goals' size)
        rows.append([what, run, _walls(measured[(traces, existing, writer)]), f"{ideal:.1f}", report["failed"], ratio,
                     goal])  # fmt: skip
    if genai:
        wall, report, _ = _run("genai", server, data, threads, work)
        ratios = ", ".join(f"{w / wall:.2f}" for w in traced)
        rows.append([what, "mlflow.genai.evaluate", f"{wall:.1f}", f"{ideal:.1f}", str(report["failed"]),
                     f"compare with traces (new, existing store) ÷ it: {ratios}", f"≤ {GENAI_GOAL}"])  # fmt: skip
    return rows


def _mean(runs: list[tuple[float, dict[str, Any]]]) -> tuple[float, dict[str, Any]]:
    """The rounds' mean wall, and a report of their mean times; its ``failed``: each round's, joined when they differ
    (a round whose count is unknown shows ``?``)."""
    failed = sorted({str(r["failed"]) for _, r in runs})
    report: dict[str, Any] = {"failed": "/".join(failed)}
    for key in ("run_s", "calls_s"):
        if all(key in r for _, r in runs):
            report[key] = statistics.fmean(float(r[key]) for _, r in runs)
    return statistics.fmean(w for w, _ in runs), report


def _walls(runs: list[tuple[float, dict[str, Any]]]) -> str:
    """The mean wall, with the rounds' range when there are several: ``20.0 (18.3–21.0)``."""
    walls = [w for w, _ in runs]
    mean = statistics.fmean(walls)
    return f"{mean:.1f}" if len(walls) == 1 else f"{mean:.1f} ({min(walls):.1f}–{max(walls):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, help="Directory with the upstream gsm8k/train.jsonl.")
    ap.add_argument("--latency", type=float, default=0.5, help="Seconds the server takes to answer each call.")
    ap.add_argument("--quick", action="store_true", help="Tiny sizes, to check it runs (numbers mean nothing).")
    ap.add_argument("--only", choices=sorted(GOALS), help="Run one measurement.")
    ap.add_argument(
        "--repeats", type=int, default=1, help="Rounds of `evaluate`'s runs, in turn; each row shows their mean."
    )
    ap.add_argument("--child", choices=["compare", "evaluate", "genai"], help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--methods", help=argparse.SUPPRESS)
    ap.add_argument("--tracking-uri", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    ap.add_argument("--no-traces", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=16, help=argparse.SUPPRESS)
    args = ap.parse_args()
    children = {"compare": _child_compare, "evaluate": _child_evaluate, "genai": _child_genai}
    if args.child is not None:
        return children[args.child](args)
    if args.data_dir is None:
        ap.error("--data-dir DATA_DIR is required (the directory holding gsm8k/train.jsonl)")
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}: pass --repeats 1 (the default) or more")

    from dspy_for.testing import OpenAICompatibleServer, for_responder

    sizes = {"evaluate": [(24, 8), (12, 4)], "methods": [(8, 4)], "rate-limit": [(8, 4)]} if args.quick else {
        "evaluate": [(1319, 64), (100, 16)], "methods": [(200, 16)], "rate-limit": [(60, 16)]
    }  # fmt: skip
    rows: list[list[str]] = []
    work = Path(tempfile.mkdtemp(prefix="dspy-for-throughput-"))
    responder = for_responder("18")
    wanted = [args.only] if args.only else ["evaluate", "methods", "rate-limit"]
    if "evaluate" in wanted:
        (big, big_t), (small, small_t) = sizes["evaluate"]
        with OpenAICompatibleServer(responder, latency=args.latency) as server:
            rows += _evaluate_rows(args, server, _items(args.data_dir, big, work), big_t, work, genai=False)
            rows += _evaluate_rows(args, server, _items(args.data_dir, small, work), small_t, work, genai=True)
    if "methods" in wanted:
        ((n, t),) = sizes["methods"]
        data = _items(args.data_dir, n, work)
        alone: dict[str, float] = {}
        with OpenAICompatibleServer(responder, latency=args.latency) as server:
            for m in FOUR.split(","):
                alone[m] = _run("compare", server, data, t, work, methods=m)[0]
            wall, report, calls = _run("compare", server, data, t, work, methods=FOUR)
        slowest = max(alone, key=lambda m: alone[m])
        each = ", ".join(f"{m} {w:.1f}" for m, w in alone.items())
        ratio = f"{wall / alone[slowest]:.2f} × slowest alone, {wall / sum(alone.values()):.2f} × their sum ({each} s)"
        rows.append([f"4 methods, {n} items × {t} threads", "compare", f"{wall:.1f}", f"{calls * args.latency / t:.1f}",
                     str(report["failed"]), ratio, "≤ 1.3"])  # fmt: skip
    if "rate-limit" in wanted:
        ((n, t),) = sizes["rate-limit"]
        data = _items(args.data_dir, n, work)
        with OpenAICompatibleServer(responder, latency=args.latency, max_in_flight=4, retry_after=1.0) as server:
            for existing in (False, True):
                wall, report, calls = _run("compare", server, data, t, work, existing_store=existing)
                limited = server.rate_limited
                ideal = calls * args.latency / 4
                rows.append(
                    [
                        f"CoT {n} items × {t} threads, 4 in flight",
                        "compare" + (", existing store" if existing else ", new store"),
                        f"{wall:.1f}",
                        f"{ideal:.1f}",
                        str(report["failed"]),
                        f"{wall / ideal:.2f} × ideal ({limited} × 429); the command alone {report['run_s']:.1f} s = "
                        f"{report['run_s'] / ideal:.2f} ×; its calls {report['calls_s']:.1f} s = "
                        f"{report['calls_s'] / ideal:.2f} ×",
                        "0 failed, ≤ 1.5",
                    ]
                )
    header = ["what", "run", "wall s", "ideal s", "failed", "ratio", "goal"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"latency {args.latency} s per call; each run a whole process, fresh caches")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()
