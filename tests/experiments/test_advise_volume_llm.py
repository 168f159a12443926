"""``dspy-for advise --volume --compile bootstrap --train`` on a real local model, a few items (``llm``): CoT and CoT
compiled by BootstrapFewShot on a user's training file, the compile's cost recorded and counted in the cost per correct
answer at the volume, and a re-run that reuses the compile; with a budget CoT fits and its prompt with four demos would
not, the compiled candidate is dropped before any compile, and ``--dry-run`` shows the same decision from the stored
pilot."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.datasets import load_dataset
from dspy_for.experiments import advise
from dspy_for.experiments.advisor.result import OVER_BUDGET

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_advise_volume_with_a_bootstrap_compile_on_a_real_local_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sample = [{"question": ex.question, "answer": ex.answer} for ex in load_dataset("gsm8k", "sample")]
    data, train = _jsonl(tmp_path / "task.jsonl", sample[:2]), _jsonl(tmp_path / "train.jsonl", sample[30:32])
    args = ["advise", "--lm", f"local/{MODEL}", "--data", str(data), "--methods", "cot", "--max-items", "2"]
    args += ["--volume", "10000", "--compile", "bootstrap", "--train", str(train)]
    args += ["--tracking-uri", f"sqlite:///{tmp_path}/mlruns/mlflow.db", "--results-dir", str(tmp_path / "results")]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    flat = " ".join(out.output.split())
    assert out.exit_code in (0, 1), out.output  # 1: an item failed (reported), never a crash or bad input
    assert "volume 10,000 items" in flat and "/correct @10,000" in flat, out.output
    assert re.search(r"cot_bootstrap compile: [\d,]+ tok( · \$0)? · [\d.,]+s", flat), out.output  # local: $0
    assert re.search(r"recommended( \(unresolved\))?: cot(_bootstrap)?\b", flat), out.output
    assert list((tmp_path / "results").rglob("cot_bootstrap.*.compiled.json"))
    again = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert again.exit_code == out.exit_code and "(reused)" in " ".join(again.output.split()), again.output


def test_a_compile_the_budget_cannot_hold_is_never_started_on_the_real_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sample = [{"question": ex.question, "answer": ex.answer} for ex in load_dataset("gsm8k", "sample")]
    data, train = _jsonl(tmp_path / "task.jsonl", sample[:2]), _jsonl(tmp_path / "train.jsonl", sample[30:34])
    kw: dict[str, Any] = {"lm": f"local/{MODEL}", "data": data, "methods": "cot", "pilot": 2, "max_items": 2}
    kw.update(max_tokens=256, tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db", progress=False)
    probe = advise(**kw)  # CoT's pilot, stored: the run below reuses it
    cot = probe.outcome("cot").result
    assert cot is not None and cot.n_scored
    budget = 1.2 * cot.tokens_per_item
    compiled = {"volume": 1000, "compile": "bootstrap", "train": train, "budget": budget}
    advice = advise(**kw, **compiled)
    dropped = advice.outcome("cot_bootstrap")
    assert dropped.status == OVER_BUDGET and dropped.reason.startswith("not compiled: ") and dropped.result is None
    assert not list(tmp_path.rglob("cot_bootstrap.*.compiled.json"))
    plan = advise(**kw, **compiled, dry_run=True)
    cells = [c for c in plan.cells if c.label == "cot_bootstrap"]
    assert cells and all(c.to_run == 0 and c.note == dropped.reason for c in cells)
