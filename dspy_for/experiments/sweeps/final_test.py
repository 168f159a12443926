"""``--final-test``: the best trial's configuration run once on the test split, through the same run core as
``compare`` and under the sweep's one spend limit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dspy_for.experiments.core import MethodResult
from dspy_for.experiments.core.summarize import summarize
from dspy_for.experiments.core.summary import Summary
from dspy_for.experiments.sweeps.spec import SweepSpec
from dspy_for.experiments.tracked_run import TrackedRun
from dspy_for.experiments.tracking.datasets import log_dataset

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


def run_final_test(tracked: TrackedRun, study: Any) -> FinalTest:
    """The best configuration once on the test split, in ``tracked`` (the sweep's parent run, under the sweep's
    spend limit): through the same run core as ``compare``, its data and one trace per item logged on the parent run
    (a tracing failure is only a warning). Nothing scored: no accuracy, no cost, never a 0.0 standing for an
    outage."""
    spec = tracked.spec
    assert isinstance(spec, SweepSpec)
    best = study.best_trial
    test = replace(spec.dataset, split=spec.test_split, first=None)
    method = spec.trial_method(best.params, "final-test")
    before = tracked.limit.not_started
    cell = tracked.open(test, method)
    if cell is None:
        tracked.raise_error(test, method)
        left = tracked.limit.not_started - before  # max_cost was reached before its compile: none of its items ran
        return FinalTest(method.name, best.params, summarize(MethodResult(method.label, [])), left)
    if tracked.run_id is not None:
        log_dataset(cell.run, context="test", run_id=tracked.run_id)
    tracked.feed([cell])
    tracked.close(cell)
    left = tracked.limit.not_started - before
    return FinalTest(cell.run.method.name, best.params, summarize(cell.result), not_started=left)
