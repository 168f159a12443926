"""On the real local model: the items' first LM calls, made in worker threads, import nothing (DSPy's engine path is
imported on the main thread before the threads start)."""

from __future__ import annotations

import os

import pytest
from test_imports import _child

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "quickstart.toml")


def test_worker_threads_import_nothing_on_the_local_model(tmp_path):
    got = _child(
        f"""
        from dspy_for.experiments import compare
        result = compare({os.path.abspath(CONFIG)!r}, lm="local/{MODEL}", methods="cot", limit=2, max_tokens=128,
                         num_threads=2, tracking_uri="sqlite:///{tmp_path}/mlruns/mlflow.db")
        assert result.ok, result.errors
        """,
        cwd=tmp_path,
    )
    in_workers = sorted({m for thread, m in got["imported"] if thread.startswith("dspy-for-item")})
    assert in_workers == [], " ".join(in_workers)
