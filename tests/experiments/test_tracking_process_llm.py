"""On the real local model: ``dspy-for compare`` as typed, its tracking store kept by the command line's tracking
process — the command's own process never imports MLflow, and each record names the MLflow run that produced it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_tracking_process import ENTRY, ROOT

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
CONFIG = f"""
experiment = "served"
lm = "local/{MODEL}"
max_tokens = 128
baseline = "cot"
[[datasets]]
name = "gsm8k"
split = "sample"
first = 2
[[methods]]
name = "cot"
"""


def test_compare_on_the_local_model_keeps_its_store_in_the_tracking_process(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    config = tmp_path / "served.toml"
    config.write_text(CONFIG)
    args = ["compare", str(config), "--tracking-uri", uri]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"}
    env.pop("DSPY_FOR_TRACE_WRITER", None)
    done = subprocess.run([sys.executable, "-c", ENTRY, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.split("IMPORTED ", 1)[1].splitlines()[0]) == ["dspy"]
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("served").experiment_id])
    cell = next(r for r in runs if r.data.params.get("label") == "cot")
    assert cell.info.status == "FINISHED" and cell.data.metrics["n"] == 2.0
    stored = [json.loads(line) for f in tmp_path.glob("mlruns/**/cot.*.jsonl") for line in f.read_text().splitlines()]
    assert len(stored) == 2 and {r["origin"] for r in stored} == {cell.info.run_id}
    assert len(client.search_traces(locations=[cell.info.experiment_id], max_results=10)) == 2
