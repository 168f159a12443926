"""Every command is a thin driver of one run object (:class:`~dspy_for.experiments.tracked_run.TrackedRun`): what surrounds
a run — the MLflow sinks, the spend limit, the results stores, the loop that feeds cells — is built in one place.
Read from the code with ``ast`` (nothing run), so a new driver that sets a run up by hand fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dspy_for"
SESSION = "experiments/tracked_run.py"
CORE_RUN = "experiments/core/run.py"  # where the loop is defined (and `evaluate`, one evaluation on its own)


def _calls(name: str) -> dict[str, int]:
    """Where ``name(...)`` is called in the package: {file relative to the package: count}."""
    found: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if called == name:
                    key = str(path.relative_to(PACKAGE))
                    found[key] = found.get(key, 0) + 1
    return found


@pytest.mark.parametrize("name", ["SpendLimit", "MlflowSink"])
def test_one_construction_of_the_spend_limit_and_of_the_mlflow_sinks(name):
    assert _calls(name) == {SESSION: 1}


def test_one_loop_feeds_every_cell():
    assert _calls("feed_together") == {SESSION: 1, CORE_RUN: 1}  # the run's loop; `Evaluation.feed` on its own
    # a cell's evaluation; `evaluate` (one, no tracked); a recheck's store-less re-runs, fed by the run's loop
    assert set(_calls("Evaluation")) == {SESSION, CORE_RUN, "experiments/core/recheck.py"}
    drivers = {SESSION, CORE_RUN, "experiments/core/recheck.py"}  # the recheck is handed the run's loop
    fed = {f for f in _calls("feed") if f not in drivers}
    assert fed <= {
        "experiments/comparison.py",
        "experiments/sequential.py",
        "experiments/advisor/driver.py",
        "experiments/advisor/rounds.py",
        "experiments/sweeps/workers.py",
        "experiments/sweeps/final_test.py",
    }, fed
    for f in fed:  # every driver feeds through the run object
        assert "tracked.feed(" in (PACKAGE / f).read_text(encoding="utf-8"), f


def test_the_mlflow_runs_of_a_run_start_in_one_place():
    """The run's own run and its cells' nested runs (a sweep's parent and trial runs are the study's, in its own
    module, and its tracked runs stream into them)."""
    started = _calls("start_run")
    started.pop("experiments/tracking/store.py")  # `active_run`: makes a run MLflow's active one, starts none
    assert started == {SESSION: 2}


def test_a_script_drives_the_run_object_as_the_guide_shows(install_scripted_lm, tmp_path):
    """The guide's example: cells opened in one tracked run, fed side by side, stored for resume, in MLflow."""
    from mlflow.tracking import MlflowClient

    from dspy_for.experiments import load_spec
    from dspy_for.experiments.tracked_run import TrackedRun
    from dspy_for.testing import for_responder

    lm = install_scripted_lm(for_responder())
    config = tmp_path / "c.toml"
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    config.write_text(
        f'tracking_uri = "{uri}"\nlm = "openai/fake"\n[[datasets]]\nname = "gsm8k"\nsplit = "sample"\nfirst = 2\n'
        '[[methods]]\nname = "cot"\n[[methods]]\nname = "single"\n'
    )
    spec = load_spec(config)

    def run() -> dict[str, float]:
        with TrackedRun(spec, items_dir=spec.items_dir(tmp_path / "mlruns"), name="my-run") as tracked:
            cells = [c for m in spec.methods if (c := tracked.open(spec.datasets[0], m)) is not None]
            tracked.feed(cells)
            results = {c.label: c.result for c in cells}
        assert tracked.status == "FINISHED" and tracked.run_id is not None
        runs = MlflowClient(uri).search_runs([MlflowClient(uri).get_run(tracked.run_id).info.experiment_id])
        assert {r.data.tags.get("mlflow.runName") for r in runs} >= {"my-run", "cot / gsm8k", "single / gsm8k"}
        return {label: r.accuracy for label, r in results.items() if r.n_scored == 2}

    first = run()
    calls = len(lm.calls)
    assert set(first) == {"cot", "single"} and calls == 4
    assert run() == first and len(lm.calls) == calls  # resumed from the stores: no LM call
