"""``advise --volume --compile bootstrap --budget`` on the real local model, two pilot items: with a budget CoT fits
and its prompt with four demos would not, the compiled candidate is dropped before any compile (no compiled program,
no compile spend), and ``--dry-run`` shows the same decision from the stored pilot."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dspy_for.datasets import load_dataset
from dspy_for.experiments import advise
from dspy_for.experiments.advisor.result import OVER_BUDGET

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


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
