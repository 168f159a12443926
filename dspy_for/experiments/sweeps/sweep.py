"""``dspy-for sweep``: Optuna search over a method's options on validation data, tracked in MLflow.

* Each trial is one run of the shared run path: :func:`~dspy_for.experiments.core.run.prepare_run` with the
  trial's options, then :func:`~dspy_for.experiments.core.run.evaluate` chunk by chunk, reporting the running
  accuracy so a pruner stops hopeless trials early (single-objective studies); multi-objective studies
  optimise accuracy (max) and tokens/item (min) and keep the Pareto front.
* A trial with a failed item (an LM error) is FAIL, never COMPLETE with a low score; it is re-run when the
  sweep is resumed. ``max_consecutive_failures`` failed trials in a row end the sweep with an error.
* ``timeout``: no trial starts after it, and a running trial stops at its next chunk (FAIL, re-run on
  resume), with 1 or N workers.
* ``workers=N`` runs N local worker processes on the same study (see :mod:`.sweep_workers`, :mod:`.sweep_storage`).
* ``final_test``: the best configuration once on the test split, through the same run path as ``compare``
  (label-using methods get their labels there too).
* With the DSPy cache on, a trial that repeats a configuration, or is a prefix of one already run (FOR
  with a smaller N, ProRefine with a smaller n), costs only the calls that differ.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspy_for.compat import optuna as optuna_compat
from dspy_for.errors import ConfigError
from dspy_for.experiments.core import SpendLimit
from dspy_for.experiments.core.frames import lm_names, provenance
from dspy_for.experiments.core.plan import RunPlan
from dspy_for.experiments.core.sinks import interruptible
from dspy_for.experiments.core.summary import Summary
from dspy_for.experiments.spec.config import Overrides
from dspy_for.experiments.sweeps import tracking as sweep_tracking
from dspy_for.experiments.sweeps.final_test import FinalTest, run_final_test
from dspy_for.experiments.sweeps.frames import trials_frame, trials_html
from dspy_for.experiments.sweeps.plan import plan_sweep
from dspy_for.experiments.sweeps.spec import SweepSpec, load_sweep_spec
from dspy_for.experiments.sweeps.storage import make_storage, open_study, requeue_failed
from dspy_for.experiments.sweeps.workers import SweepError, run_study, study_spent
from dspy_for.experiments.sweeps.workers import _worker_entry as _worker_entry  # re-exported for worker scripts
from dspy_for.experiments.tracked_run import TrackedRun

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FinalTest",
    "SweepError",
    "SweepResult",
    "SweepSpec",
    "load_sweep_spec",
    "make_storage",
    "open_study",
    "run_study",
    "sweep",
]


# -------------------------------------------------------------------------------------------- sweep


@dataclass
class SweepResult:
    """What ``sweep`` returns (a :class:`~dspy_for.experiments.core.outcome.RunOutcome`): the study, its MLflow
    parent run, the final test if one ran, and what the sweep spent against ``max_cost``."""

    spec: SweepSpec
    study: Any
    parent_run_id: str | None
    final_test: FinalTest | None = None
    spend: SpendLimit | None = None
    config: str | None = None  # the sweep's config file, as given (None: a spec object)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(t.state.name for t in self.study.get_trials(deepcopy=False)))

    def _trials(self, attr: str) -> int:
        """A count over every trial's items (its user attribute ``attr``: ``n_items``, ``n_failed``, ...)."""
        return sum(int(t.user_attrs.get(attr, 0)) for t in self.study.get_trials(deepcopy=False))

    @property
    def _final(self) -> Summary | None:
        return self.final_test.summary if self.final_test is not None else None

    @property
    def n_scored(self) -> int:
        return self._trials("n_items") - self._trials("n_failed") + (self._final.n if self._final else 0)

    @property
    def n_failed(self) -> int:
        return self._trials("n_failed") + (self._final.failed if self._final else 0)

    @property
    def n_unparsed(self) -> int:
        return self._trials("n_unparsed") + (self._final.unparsed if self._final else 0)

    @property
    def spent_usd(self) -> float:
        """USD the sweep has spent (its trials in all its runs, and the final test; cache hits free)."""
        return self.spend.total if self.spend is not None else study_spent(self.study)

    @property
    def stopped_by_cost(self) -> bool:
        """``max_cost`` was reached with trials (or final-test items) left out; a re-run with a higher one resumes."""
        return self.spend is not None and self.spend.stopped

    @property
    def ok(self) -> bool:
        """No trial failed, ``max_cost`` did not stop it, and the final test (if any) had no failed item."""
        final_failed = self.final_test is not None and self.final_test.summary.failed
        return not self.counts.get("FAIL") and not self.stopped_by_cost and not final_failed

    def to_pandas(self, level: str = "trials") -> pd.DataFrame:
        """The sweep's trials as a pandas data frame, each trial's options as ``options.<name>`` columns (a sweep keeps
        no item records: ``trials`` is its one level); see :mod:`~dspy_for.experiments.sweeps.frames`."""
        lms = {role: lm for m in self.spec.methods for role, lm in lm_names(self.spec, m).items()}
        origin = provenance(self.parent_run_id, self.spec, self.config, lms)
        return trials_frame(self.study, self.spec.objectives, origin, level)

    def _repr_html_(self) -> str:
        """The trials in a notebook, as an HTML table."""
        return trials_html(self.study, self.spec.objectives, f"study {self.spec.study}")


def sweep(
    config: SweepSpec | str | Path | None = None,
    *,
    workers: int = 1,
    final_test: bool = False,
    objective_path: str | None = None,
    timeout: float | None = None,
    overrides: Overrides | None = None,
    **kwargs: Any,
) -> SweepResult | RunPlan:
    """Run (or resume) a sweep; see the module docstring. ``overrides`` (or the same as keyword arguments, e.g.
    ``n_trials=20``) apply and are validated whether a path or a :class:`SweepSpec` is given. ``dry_run=True``: the
    :class:`~dspy_for.experiments.core.plan.RunPlan` instead, with no LM built or called and no study opened."""
    spec = load_sweep_spec(config, overrides, **kwargs)
    optuna_compat.check_supported()  # an Optuna without the internals we use fails here, not mid-sweep
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"`--workers` must be a positive integer, got {workers!r}.")
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"`--timeout` must be a positive number of seconds, got {timeout!r}.")
    if spec.dry_run:  # the plan before the spend: no study, no MLflow run, no LM
        return plan_sweep(spec)
    study = open_study(spec)  # create it (and check the storage) before workers race to
    if spec.enqueue and not study.get_trials(deepcopy=False):  # a resumed study has them already
        space = spec.space
        for point in spec.enqueue:
            study.enqueue_trial(space.validate_point(point), user_attrs={"enqueued": True})
    requeue_failed(study)
    parent = sweep_tracking.start_parent(spec)
    try:
        with interruptible():
            study = run_study(
                spec, workers=workers, objective_path=objective_path, parent_run_id=parent, timeout=timeout
            )
            # the final test's run: under the sweep's one spend limit (what every trial spent before it)
            left_out = "trial(s) not finished"
            ending = TrackedRun(
                spec, run_id=parent, cells=False, store=False, earlier=study_spent(study), left_out=left_out
            )
            with ending:
                source = str(config) if isinstance(config, str | Path) else None
                result = SweepResult(spec=spec, study=study, parent_run_id=parent, spend=ending.limit, config=source)
                if final_test and not spec.multi and objective_path is None and result.counts.get("COMPLETE"):
                    result.final_test = run_final_test(ending, study)
            _count_left_out(result)
    except (SweepError, KeyboardInterrupt) as exc:
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        sweep_tracking.finish_parent(spec, open_study(spec), parent, None, status=status)
        raise
    sweep_tracking.finish_parent(spec, study, parent, result.final_test)
    return result


def _count_left_out(result: SweepResult) -> None:
    """Once ``max_cost`` is reached: the trials that did not finish (and a final test it cut short) are left out."""
    spend = result.spend
    if spend is None or not spend.reached:
        return
    done = result.counts.get("COMPLETE", 0) + result.counts.get("PRUNED", 0)
    cut = 1 if result.final_test is not None and result.final_test.not_started else 0
    spend.left_out += " (the final test among them)" if cut else ""
    spend.not_started = max(0, result.spec.n_trials - done) + cut
