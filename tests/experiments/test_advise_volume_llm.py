"""``dspy-for advise --volume --compile bootstrap --train`` on a real local model, a few items (``llm``): CoT and CoT
compiled by BootstrapFewShot on a user's training file, the compile's cost recorded and counted in the cost per correct
answer at the volume, and a re-run that reuses the compile."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspy_for.cli import app
from dspy_for.datasets import load_dataset

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_advise_volume_with_a_bootstrap_compile_on_a_real_local_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sample = [{"question": ex.question, "answer": ex.answer} for ex in load_dataset("gsm8k", "sample")]
    data, train = _jsonl(tmp_path / "task.jsonl", sample[:6]), _jsonl(tmp_path / "train.jsonl", sample[30:36])
    args = ["advise", "--lm", f"local/{MODEL}", "--data", str(data), "--methods", "cot", "--max-items", "6"]
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
