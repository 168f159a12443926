"""Runs on one results folder never wait on each other in a circle: two or three ``compare`` processes whose methods
come in opposite orders, and an ``advise`` beside a ``compare``, all finish, share the work (no item is run twice)
and exit 0. Each process is real, against the local OpenAI-compatible test server; a barrier makes the worst order
certain: every process holds the lock of its first method's store before any asks for a second one (the order that
deadlocked two runs started together). A deadlock fails the test at its timeout instead of hanging it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from cli_processes import common_args, compare_args, env, respond

from dspy_for.testing import OpenAICompatibleServer

#: how long the processes may take together before the test calls it a deadlock
TIMEOUT = 420

# A process of the test: the dspy-for command line, with every store lock's first acquisition held at a barrier until
# every process of the test holds its own first lock (or 20 s pass).
_PROCESS = textwrap.dedent("""
    import os, sys, time
    import filelock

    barrier, count = sys.argv[1], int(sys.argv[2])
    _acquire = filelock.BaseFileLock.acquire
    first = []

    def acquire(self, *args, **kwargs):
        proxy = _acquire(self, *args, **kwargs)
        if not first and str(self.lock_file).endswith(".jsonl.lock"):
            first.append(self.lock_file)
            open(os.path.join(barrier, str(os.getpid())), "w").close()
            end = time.monotonic() + 20
            while len(os.listdir(barrier)) < count and time.monotonic() < end:
                time.sleep(0.05)
        return proxy

    filelock.BaseFileLock.acquire = acquire
    from dspy_for.cli import app
    app(sys.argv[3:], prog_name="dspy-for")
""")


def _advise(methods: str, server: OpenAICompatibleServer, tmp_path: Path) -> list[str]:
    return ["advise", "--methods", methods, "--max-items", "3", *common_args(server, tmp_path)]


def _run_together(
    commands: list[list[str]], tmp_path: Path, environ: dict[str, str] | None = None, timeout: float = TIMEOUT
) -> list[subprocess.CompletedProcess[str]]:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS, str(barrier), str(len(commands)), *argv],
            cwd=tmp_path,
            env=environ or env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for argv in commands
    ]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        tails = "\n---\n".join((p.communicate()[0] or "")[-1500:] for p in procs)
        pytest.fail(f"the runs did not finish in {timeout} s (a deadlock):\n{tails}")
    assert len(os.listdir(barrier)) == len(commands), "not every process reached a store lock:\n" + "\n---\n".join(
        out[-2000:] for out in outs
    )
    return [subprocess.CompletedProcess(p.args, p.returncode, out) for p, out in zip(procs, outs, strict=True)]


def _records_per_item(tmp_path: Path) -> dict[str, Counter[tuple[str, int]]]:
    """Each results file's records, counted by item and epoch (a count above 1: an item run twice)."""
    out: dict[str, Counter[tuple[str, int]]] = {}
    for path in sorted((tmp_path / "results").rglob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        out[path.name.split(".")[0]] = Counter((r["question"], r["epoch"]) for r in rows)
    return out


def _check(done: list[subprocess.CompletedProcess[str]], tmp_path: Path, labels: set[str]) -> None:
    for p in done:
        assert p.returncode == 0, p.stdout[-3000:]
        assert "Traceback" not in p.stdout, p.stdout[-3000:]
    stored = _records_per_item(tmp_path)
    assert labels <= set(stored), stored
    for label, counts in stored.items():
        assert len(counts) == 3 and set(counts.values()) == {1}, f"{label}: an item ran twice or is missing: {counts}"


@pytest.fixture
def server():
    with OpenAICompatibleServer(respond, latency=0.1) as s:
        yield s


def test_two_compares_in_opposite_orders_finish_and_share_the_work(server, tmp_path: Path):
    done = _run_together(
        [compare_args("cot,for", server, tmp_path), compare_args("for,cot", server, tmp_path)], tmp_path
    )
    _check(done, tmp_path, {"cot", "for"})


def test_three_compares_in_rotated_orders_finish_and_share_the_work(server, tmp_path: Path):
    orders = ["cot,for,single", "for,single,cot", "single,cot,for"]
    done = _run_together([compare_args(o, server, tmp_path) for o in orders], tmp_path)
    _check(done, tmp_path, {"cot", "for", "single"})


def test_an_advise_beside_a_compare_finishes_and_shares_the_work(server, tmp_path: Path):
    done = _run_together([_advise("cot,for", server, tmp_path), compare_args("for,cot", server, tmp_path)], tmp_path)
    _check(done, tmp_path, {"cot", "for"})


@pytest.mark.llm
def test_two_compares_in_opposite_orders_on_the_local_model(tmp_path: Path):
    """The same on the embedded model (shared by both processes): one item, CoT and the single call."""
    model = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
    common = ["--lm", f"local/{model}", "--lm-option", "max_tokens=256", "--dataset", "gsm8k", "--split", "sample"]
    common += ["--first", "1", "--tracking-uri", f"sqlite:///{tmp_path}/mlruns/mlflow.db"]
    common += ["--results-dir", str(tmp_path / "results"), "--no-match-budget"]
    orders = ["cot,single", "single,cot"]
    commands = [["compare", "--methods", o, "--baseline", o.split(",")[0], *common] for o in orders]
    done = _run_together(commands, tmp_path, {**os.environ, "COLUMNS": "200"}, timeout=900)  # a busy CPU: slow
    for p in done:
        assert p.returncode in (0, 1), p.stdout[-3000:]  # (1: an item the small model failed is an error)
        assert "Traceback" not in p.stdout, p.stdout[-3000:]
    for path in sorted((tmp_path / "results").rglob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        finished = Counter(r["question"] for r in rows if r["error"] is None)  # (a failed item runs again: an error)
        assert len({r["question"] for r in rows}) == 1 and set(finished.values()) <= {1}, (path.name, rows)
