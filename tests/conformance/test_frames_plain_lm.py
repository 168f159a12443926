"""The frames of a comparison run against an OpenAI-compatible endpoint say where every row came from and keep one
type per column: its MLflow run and experiment, its config, each role's LM, what served each answer (the endpoint's
dated snapshot and ``system_fingerprint``) and each record's MLflow trace — and ``load_results`` on the same config
finds the same run and traces in its tracking store, with no request to the endpoint."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import CANARY_KEY
from mlflow.tracking import MlflowClient
from test_export_plain_lm import _config as export_config

from dspy_for.experiments import compare, load_results

#: what the loaded result does not know of the run (its wall clock) or of the stack now
WALL = ["wall_time", "reused_time", "serving_now"]


#: the export test's comparison, traced, its LM priced, in an experiment of its own
RUN = {"traces": True, "experiment": "frames", "lm_options": ["price={input = 0.5, output = 1.5}"]}


def test_frames_of_a_run_against_an_endpoint_carry_their_provenance_and_types(fault_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    fault_server.model_snapshot, fault_server.system_fingerprint = "test-model-2026-01-01", "fp_frames"
    config = export_config(tmp_path, fault_server.base_url)
    result = compare(str(config), **RUN)
    assert result.ok and result.config == str(config)
    items, cells, pairs = (result.to_pandas(level=level) for level in ("items", "cells", "pairs"))
    for frame in (items, cells, pairs):
        assert set(frame["run_id"]) == {result.run_id} and set(frame["experiment"]) == {"frames"}
        assert set(frame["config"]) == {str(config)}
    assert set(items[items["method"] == "for_n1"]["lm.debater"]) == {"openai/test-model"}
    assert items[items["method"] == "cot"]["lm.debater"].isna().all()
    # what served each answer, as the endpoint said; the trace of each record, there to open in MLflow
    assert items["served_by"].notna().all() and items["served_by"].str.contains("fp_frames").all()
    assert items["trace_id"].notna().all() and items["trace_id"].is_unique
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    trace = client.get_trace(items["trace_id"].iloc[-1])
    assert trace.info.trace_metadata["dspy_for.item_id"] == items["item_id"].iloc[-1]
    # the types an analyst can rely on
    assert str(items["calls"].dtype) == "Int64" and str(items["failed"].dtype) == "boolean"
    assert str(items["started_at"].dt.tz) == "UTC" and list(items["method"].cat.categories) == ["cot", "for_n1"]
    assert items["cost"].notna().all() and str(cells["n"].dtype) == "Int64"
    for method, group in items.groupby("method", observed=True):  # the cell's dollars are its items'
        assert group["cost"].mean() == pytest.approx(cells.set_index("method").loc[method, "cost_per_item"])
    # loaded back from the config: the same run, the same traces, no request
    asked = len(fault_server.requests)
    loaded = load_results(config, **RUN)
    assert len(fault_server.requests) == asked and loaded.run_id == result.run_id
    pd.testing.assert_frame_equal(loaded.to_pandas(), items)
    pd.testing.assert_frame_equal(loaded.to_pandas(level="cells").drop(columns=WALL), cells.drop(columns=WALL))
