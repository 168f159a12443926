"""Each method's time in the comparison table is its own: CoT (one call per item) and FOR-Prompting (a debate of
several calls per item) share one pool of threads, yet against an endpoint whose every call takes the same time the
table prints their seconds per item in about the ratio of their calls per item (the pool's wall time, the same for
both, is not what a method costs)."""

from __future__ import annotations

import re

from conftest import CANARY_KEY
from typer.testing import CliRunner

from dspy_for.cli import app

LATENCY = 0.5  # seconds per call: the calls dominate every item's time


def _row(output: str, method: str) -> list[str]:
    line = next(x for x in output.splitlines() if re.match(rf"^\s*{method}\s+\d", x))
    return line.split()


def _calls_per_item(output: str, method: str) -> float:
    found = re.search(rf"\b{method}: tokens/item by role: [^;]*; calls/item ([\d.]+)", " ".join(output.split()))
    assert found, output
    return float(found.group(1))


def test_cot_and_for_print_their_own_seconds_per_item_in_the_ratio_of_their_calls(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    fault_server.latency = LATENCY
    config = tmp_path / "no_cache.toml"
    config.write_text("cache = false\n", encoding="utf-8")  # every item's calls reach the endpoint
    args = [
        "compare",
        str(config),
        "--dataset",
        "gsm8k",
        "--split",
        "sample",
        "--first",
        "4",
        "--lm",
        "openai/test-model",
        "--lm-option",
        f"api_base={fault_server.base_url}",
        "--lm-option",
        "num_retries=0",
        "--lm-option",
        "timeout=10",
        "--num-threads",
        "4",
        "--no-traces",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        "--results-dir",
        str(tmp_path / "results"),
    ]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "200"})  # no --methods, no config methods: cot and for
    assert out.exit_code == 0, out.output
    header = next(x for x in out.output.splitlines() if "acc % [95% CI]" in x).split()
    assert header[-1] == "s/item", header
    cot_seconds, for_seconds = float(_row(out.output, "cot")[-1]), float(_row(out.output, "for")[-1])
    cot_calls, for_calls = _calls_per_item(out.output, "cot"), _calls_per_item(out.output, "for")
    assert cot_calls == 1.0 and for_calls >= 3.0, out.output
    assert cot_seconds >= LATENCY * 0.9, out.output
    # a FOR call costs a little more of the machine than a CoT call (longer prompts to build and parse): on a busy
    # machine its items run up to a few tenths of a second per call longer, never near the pool's wall time
    assert 0.75 < (for_seconds / cot_seconds) / (for_calls / cot_calls) < 1.8, out.output
    assert "s/item: seconds of the method's own call per scored answer" in " ".join(out.output.split())
