"""A fully stored re-run on the real local model: the first run starts the server and stores every record; the
re-run, with the model directory pointed somewhere empty (as if the model were never pulled) and starting a server
refused, gives the same table from the stores."""

from __future__ import annotations

import os

import pytest

from dspy_for.experiments.comparison import compare
from dspy_for.lm import server as local_server

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "quickstart.toml")


def test_a_stored_rerun_of_the_local_model_starts_no_server_and_needs_no_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = {"lm": f"local/{MODEL}", "methods": "cot", "limit": 2, "max_tokens": 256}
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    first = compare(CONFIG, tracking_uri=uri, **run)
    assert first.ok

    def refuse(*args, **kwargs):
        raise AssertionError("a run with nothing to run started the local server")

    monkeypatch.setattr(local_server, "ensure_server", refuse)
    monkeypatch.setenv("DSPY_FOR_MODEL_DIR", str(tmp_path / "no-models"))
    monkeypatch.setenv("DSPY_FOR_SERVER_DIR", str(tmp_path / "no-servers"))
    second = compare(CONFIG, tracking_uri=uri, **run)
    assert second.ok and not any(second.errors.values())
    numbers = ("n", "accuracy", "tokens_per_item", "calls")
    assert [{k: r[k] for k in numbers} for r in second.rows] == [{k: r[k] for k in numbers} for r in first.rows]
    assert second.results["gsm8k"]["cot"].lms == first.results["gsm8k"]["cot"].lms  # named as the built LM was
    assert not (tmp_path / "no-servers").exists()
