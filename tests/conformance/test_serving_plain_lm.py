"""What served every answer, through a plain ``dspy.LM`` against the local OpenAI-compatible test server: each record
keeps the endpoint's model snapshot and ``system_fingerprint``; after the fingerprint changes, a cell mixing records
of both is marked in the table and its pairs with the baseline say so; ``rerun_changed`` runs exactly the records
the old fingerprint served again (counted in the server's request log), past DSPy's cache, and only once the
endpoint has said what serves it now."""

from __future__ import annotations

from pathlib import Path

from conftest import plain_lm
from mlflow.tracking import MlflowClient

from dspy_for.experiments import DatasetConfig, ExperimentSpec, MethodConfig, compare
from dspy_for.experiments.reports.table import table_text
from dspy_for.lm import configure_cache

SNAPSHOT = "test-model-2025-01-01"
OLD, NEW = f"{SNAPSHOT} fp_old", f"{SNAPSHOT} fp_new"


def _spec(tmp_path: Path, lm, first: int, methods: tuple[str, ...], **settings) -> ExperimentSpec:
    return ExperimentSpec(
        lm=lm,
        datasets=[DatasetConfig("gsm8k", "sample", first=first)],
        methods=[MethodConfig(m) for m in methods],
        baseline="cot",
        tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db",
        results_dir=str(tmp_path / "results"),
        experiment="serving-conformance",
        traces=False,
        **settings,
    )


def test_a_fingerprint_change_is_marked_and_rerun_changed_runs_exactly_those_records(
    fault_server, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    configure_cache(tmp_path / "dspy_cache")
    lm = plain_lm(fault_server, cache=True)  # DSPy's cache on: a re-run must go past it
    fault_server.model_snapshot, fault_server.system_fingerprint = SNAPSHOT, "fp_old"

    first = compare(_spec(tmp_path, lm, 4, ("cot",)))
    assert len(fault_server.requests) == 4
    assert [i.served_by for i in first.results["gsm8k"]["cot"].items] == [[OLD]] * 4
    assert "†" not in table_text(first)

    # the endpoint now runs another configuration: 2 new cot items and 6 new single items are served by it
    fault_server.system_fingerprint = "fp_new"
    fault_server.reset_counters()
    second = compare(_spec(tmp_path, lm, 6, ("cot", "single")))
    assert len(fault_server.requests) == 8
    rows = {r["method"]: r for r in second.rows}
    assert rows["cot"]["served_by"] == {NEW: 2, OLD: 4} and rows["cot"]["mixed_serving"]
    assert rows["single"]["served_by"] == {NEW: 6} and not rows["single"]["mixed_serving"]
    assert rows["single"]["paired_n"] == 6 and rows["single"]["mixed_pairs"] == 4  # its first 4 pairs mix stacks
    text = table_text(second)
    cot_line = next(line for line in text.splitlines() if line.startswith("cot "))
    single_line = next(line for line in text.splitlines() if line.startswith("single "))
    assert "†" in cot_line and "†" not in single_line
    flat = " ".join(text.split())
    assert "†: the cell's records were served by more than one stack" in flat
    assert f"cot† served by: {NEW} (2) · {OLD} (4); stack now: {NEW}" in flat
    assert "mixed pairs: 4 of 6 paired with cot" in flat
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    children = client.search_runs(
        [client.get_experiment_by_name("serving-conformance").experiment_id],
        f"tags.mlflow.parentRunId = '{second.run_id}'",
    )
    params = {r.data.params["label"]: r.data.params for r in children}
    assert params["cot"]["served_by"] == f"{NEW} (2); {OLD} (4)" and params["cot"]["served_by.now"] == NEW
    assert params["single"]["served_by"] == f"{NEW} (6)"

    # every record is stored: nothing new runs, so the endpoint has not said what serves it now
    fault_server.reset_counters()
    unknown = compare(_spec(tmp_path, lm, 6, ("cot", "single"), rerun_changed=True))
    assert len(fault_server.requests) == 0
    assert all(r["serving_now"] is None and r["reran"] == 0 for r in unknown.rows)
    assert "stack now: unknown (nothing new ran); 0 stored record(s) another stack served ran again" in " ".join(
        table_text(unknown).split()
    )

    # one new item each reports the stack now; cot's 4 records the old fingerprint served run again, past the cache
    fault_server.reset_counters()
    rerun = compare(_spec(tmp_path, lm, 7, ("cot", "single"), rerun_changed=True))
    assert len(fault_server.requests) == 1 + 1 + 4
    cot = rerun.results["gsm8k"]["cot"]
    assert cot.reran == 4 and rerun.results["gsm8k"]["single"].reran == 0
    assert [i.served_by for i in cot.items] == [[NEW]] * 7
    assert [i.id for i in cot.items] == [i.id for i in rerun.results["gsm8k"]["single"].items]  # dataset order
    rows = {r["method"]: r for r in rerun.rows}
    assert not any(r["mixed_serving"] or r["mixed_pairs"] for r in rows.values())
    assert "†" not in table_text(rerun)
    asked = [str(r["messages"][-1]["content"]) for r in fault_server.requests]
    # cot's first 4 items once each (run again), the 2 the new fingerprint served not at all, the new one by both
    assert [sum(i.question in q for q in asked) for i in cot.items] == [1, 1, 1, 1, 0, 0, 2]

    # the re-run records were stored in place of the old ones: a later run reuses them, nothing marked
    fault_server.reset_counters()
    later = compare(_spec(tmp_path, lm, 7, ("cot", "single")))
    assert len(fault_server.requests) == 0
    assert later.results["gsm8k"]["cot"].served_by() == {NEW: 7} and "†" not in table_text(later)
