"""``--final-test``: the best trial's configuration run once on the test split, through the same run core as
``compare`` and under the sweep's one spend limit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dspy_for.experiments.core import Evaluation, MethodResult, SpendLimit, prepare_run
from dspy_for.experiments.core.compile_step import CompileNotStarted
from dspy_for.experiments.core.summary import Summary, summarize
from dspy_for.experiments.sweeps.spec import SweepSpec
from dspy_for.experiments.tracking.datasets import log_dataset
from dspy_for.experiments.tracking.sink import MlflowSink

__all__ = ["FinalTest", "run_final_test"]


@dataclass(frozen=True)
class FinalTest:
    """``--final-test``: the best trial's configuration run once on the test split (its method and parameters, and
    the summary of its records), and the items ``max_cost`` kept it from starting."""

    method: str
    params: dict[str, Any]
    summary: Summary
    not_started: int = 0

    def row(self) -> dict[str, Any]:
        return {"method": self.method, "params": self.params, **self.summary.row()}


def run_final_test(spec: SweepSpec, study: Any, parent: str | None, limit: SpendLimit | None = None) -> FinalTest:
    """The best configuration once on the test split, through the same run core as ``compare``, under the sweep's
    spend ``limit``; its data and one trace per item are logged on the sweep's parent run (a tracing failure is
    only a warning). Nothing scored: no accuracy, no cost, never a 0.0 standing for an outage."""
    best = study.best_trial
    test = replace(spec.dataset, split=spec.test_split, first=None)
    method = spec.trial_method(best.params, "final-test")
    try:
        run = prepare_run(spec, test, method, limit=limit)
    except CompileNotStarted as exc:  # max_cost was reached before its compile: none of its items starts
        if limit is not None:
            limit.not_started += exc.items
        return FinalTest(method.name, best.params, summarize(MethodResult(method.label, [])), exc.items)
    sinks = []
    if parent is not None:
        log_dataset(run, context="test", run_id=parent)
        sinks.append(MlflowSink(run, parent, end_run=False))
    before = limit.not_started if limit is not None else 0
    with Evaluation(run, sinks=sinks, origin=parent) as ev:
        ev.feed(run.examples, limit=limit)
    left = (limit.not_started - before) if limit is not None else 0
    return FinalTest(run.method.name, best.params, summarize(ev.result), not_started=left)
