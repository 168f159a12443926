"""Per-item traces on the real local model, written by the trace writer process: every item of a comparison has its
trace in MLflow once the comparison returns, with a span for each of its LM calls."""

from __future__ import annotations

import os

import pytest

from dspy_for.experiments.comparison import compare
from dspy_for.experiments.tracking.writer import trace_writer

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "quickstart.toml")


def test_every_item_of_a_real_run_has_its_trace_with_its_calls(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = compare(CONFIG, lm=f"local/{MODEL}", methods="cot,for_n1", limit=2, max_tokens=256, tracking_uri=uri)
    assert trace_writer().mode == "process"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(result.spec.experiment)
    for label, r in result.results["gsm8k"].items():
        (run,) = client.search_runs(
            [experiment.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{result.run_id}' and params.label = '{label}'",
        )
        found = client.search_traces(
            locations=[experiment.experiment_id], filter_string=f"metadata.`mlflow.sourceRun` = '{run.info.run_id}'"
        )
        traced = {t.info.trace_metadata["dspy_for.item_id"]: t for t in found}
        assert set(traced) == {i.id for i in r.items}
        for item in r.items:
            calls = [s for s in traced[item.id].data.spans if s.parent_id is not None]
            assert len(calls) == item.usage["total"]["calls"]  # one span per LM call
