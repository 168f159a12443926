from __future__ import annotations

import os

import pytest

from dspy_for.experiments.comparison import compare
from dspy_for.experiments.tracking.writer import trace_writer

pytestmark = pytest.mark.llm
MODEL = os.environ.get("DSPY_FOR_TEST_MODEL", "qwen2.5-coder-0.5b")


def test_quickstart_config_on_a_real_local_model(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    config = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "quickstart.toml")
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    result = compare(config, lm=f"local/{MODEL}", limit=1, max_tokens=384, tracking_uri=uri)
    res = result.results["gsm8k"]
    assert set(res) == {"single", "cot", "for_n1", "prorefine_k32_n2"} and not result.errors["gsm8k"]
    assert all(r.n == 1 for r in res.values())
    assert res["for_n1"].calls_per_item > res["cot"].calls_per_item
    assert (tmp_path / "mlruns" / "mlflow.db").is_file() and result.plots
    # the frames say where each row came from: the run, the config, the model of each role, what served each answer
    items = result.to_pandas()
    assert set(items["run_id"]) == {result.run_id} and set(items["config"]) == {config}
    assert set(items["lm.task"].dropna()) == {f"local/{MODEL}"} and items["served_by"].notna().all()
    assert items["trace_id"].notna().all() and str(items["started_at"].dt.tz) == "UTC"
    assert list(items["method"].cat.categories) == ["single", "cot", "for_n1", "prorefine_k32_n2"]
    # every item has its trace in MLflow, written by the trace writer process, with a span for each of its LM calls
    assert trace_writer().mode == "process"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(result.spec.experiment)
    for label, r in res.items():
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


def test_compare_with_a_judge_on_an_item(tmp_path, monkeypatch):
    config = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "quickstart.toml")
    monkeypatch.chdir(tmp_path)
    result = compare(
        config,
        lm=f"local/{MODEL}",
        judge_lm=f"local/{MODEL}",
        limit=1,
        methods="cot",
        max_tokens=384,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
    )
    cot = result.results["gsm8k"]["cot"]
    assert cot.n_failed == 0 and all(i.judge is not None for i in cot.items)
    judged = next(c.summary.judge for c in result.cells if c.label == "cot" and c.summary is not None)
    assert judged is not None and judged.n == 1 and judged.scores["judged_accuracy"].n == 1
    # the judge's calls are its own role, never part of the method's tokens per item
    assert cot.judge_usage.total.calls >= 1 and "judge" not in cot.usage.roles


def test_a_sequential_comparison_on_four_items(tmp_path, monkeypatch):
    config = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "quickstart.toml")
    monkeypatch.chdir(tmp_path)
    result = compare(
        config,
        lm=f"local/{MODEL}",
        methods="single,cot",
        sequential=True,
        max_items=4,
        max_tokens=384,
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
    )
    (pair,) = result.sequential
    assert pair.method in ("single", "cot") and pair.result.n <= 4 and result.ok
    res = result.results["gsm8k"]
    assert all(r.n_failed == 0 and 1 <= r.n <= 4 for r in res.values())
