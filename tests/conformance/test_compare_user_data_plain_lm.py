"""`compare --data FILE.jsonl` against the local OpenAI-compatible test server: with a plain ``dspy.LM`` from Python
and with ``make_lm`` from the command line, a numeric file is scored by the numeric rule and a text file by
normalized exact match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import CANARY_KEY, plain_lm
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.experiments import compare
from dspy_for.testing import user_text

CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid"}


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sums(tmp_path: Path) -> Path:
    return _jsonl(tmp_path / "sums.jsonl", [{"question": f"What is 3 + {i}?", "answer": 3 + i} for i in range(4)])


def capitals(tmp_path: Path) -> Path:
    return _jsonl(
        tmp_path / "capitals.jsonl", [{"question": f"Capital of {c}?", "answer": a} for c, a in CAPITALS.items()]
    )


def sum_answers(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """Right as a number (``8.0``), wrong as an exact string."""
    i = int(user_text(messages).split("What is 3 + ")[1].split("?")[0])
    return {"reasoning": "added", "answer": f"{3 + i}.0"}


def capital_answers(messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
    """Right after normalization (article, full stop), with no number for the numeric rule to read."""
    country = next(c for c in CAPITALS if c in user_text(messages))
    return {"reasoning": "known", "answer": f"the {CAPITALS[country]}."}


CASES = [(sums, sum_answers, "jsonl_sums", 4), (capitals, capital_answers, "jsonl_capitals", 3)]


@pytest.mark.parametrize(("make", "responder", "name", "n"), CASES)
def test_compare_data_with_a_plain_lm_scores_by_the_files_metric(
    fault_server, tmp_path, monkeypatch, make, responder, name, n
):
    monkeypatch.chdir(tmp_path)
    fault_server.responder = responder
    result = compare(
        None,
        data=make(tmp_path),
        methods="cot",
        lm=plain_lm(fault_server),
        num_threads=4,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
    )
    cot = result.results[name]["cot"]
    assert result.ok and cot.n == n and cot.accuracy == 1.0


@pytest.mark.parametrize(("make", "responder", "name", "n"), CASES)
def test_compare_data_from_the_command_line_with_make_lm(fault_server, tmp_path, monkeypatch, make, responder, name, n):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    fault_server.responder = responder
    args = [
        "compare",
        "--data",
        str(make(tmp_path)),
        "--methods",
        "cot",
        "--lm",
        "openai/test-model",
        "--lm-option",
        f"api_base={fault_server.base_url}",
        "--lm-option",
        "num_retries=0",
        "--lm-option",
        "timeout=5",
        "--threads",
        "4",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        "--results-dir",
        str(tmp_path / "results"),
    ]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    assert name in out.output and "100.0" in out.output
    stored = list((tmp_path / "results").rglob("*.jsonl"))
    assert stored and all(CANARY_KEY not in p.read_text() for p in stored)
