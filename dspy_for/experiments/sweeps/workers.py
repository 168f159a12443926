"""The sweep's workers: the trial objective (the trial's method through the run path, chunk by chunk) and
the loop that takes trials from the shared study, in this process or in ``workers`` spawned processes.

See :mod:`.sweeps` for what a sweep does; :func:`~dspy_for.experiments.sweeps.sweep` calls :func:`run_study`.
:func:`default_objective` is looked up on this module when a study runs: the place to patch it.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from typing import Any

from filelock import FileLock

from dspy_for._offline import apply_offline_defaults
from dspy_for.compat import optuna as optuna_compat
from dspy_for.datasets import content_key
from dspy_for.errors import ConfigError, DspyForError
from dspy_for.experiments.core import load_examples
from dspy_for.experiments.core.spend import money
from dspy_for.experiments.core.summarize import summarize
from dspy_for.experiments.core.summary import Summary
from dspy_for.experiments.spec.settings import value_kind
from dspy_for.experiments.sweeps import tracking as sweep_tracking
from dspy_for.experiments.sweeps.pruning import ITEM_VALUES, incumbent_values, item_values, resolved_worse
from dspy_for.experiments.sweeps.spec import OBJECTIVES, SweepSpec
from dspy_for.experiments.sweeps.storage import HOST, counted, lock_path, open_study, recover_stale
from dspy_for.experiments.tracked_run import TrackedRun

__all__ = [
    "Objective",
    "SweepError",
    "TrialFailed",
    "cost_reached",
    "default_objective",
    "logger",
    "objective_value",
    "run_study",
    "study_spent",
]

logger = logging.getLogger("dspy_for.sweep")

Objective = Callable[[Any], Any]


class SweepError(DspyForError, RuntimeError):
    """The sweep stopped because its trials kept failing (e.g. the LM endpoint is down)."""


class TrialFailed(RuntimeError):
    """A trial whose items failed (LM errors) or that the timeout cut: FAIL, re-run on resume."""


# ---------------------------------------------------------------------------------------- objective


class TrialObjective:
    """The real objective: the trial's method through the run core, fed chunk by chunk; after each chunk the
    running objective is reported so the pruner can stop a hopeless trial. Items stream, as they land, into the
    trial's MLflow run (its id in the trial's user attribute ``mlflow_run_id``) as traces."""

    def __init__(self, spec: SweepSpec, deadline: float | None = None) -> None:
        self.spec, self.deadline = spec, deadline
        self.examples = load_examples(spec.dataset)
        self.order = [content_key(ex.get("question"), ex.get("answer")) for ex in self.examples]

    def _paired_prune(self, trial: Any, values: list[float | None]) -> bool:
        """``pruner = "paired"``: resolved worse than the best trial so far (see :mod:`.pruning`)."""
        if self.spec.pruner != "paired":
            return False
        incumbent = incumbent_values(trial.study)
        if incumbent is None:
            return False
        objective = self.spec.objectives[0]
        return resolved_worse(
            values,
            incumbent,
            maximize=OBJECTIVES[objective] == "maximize",
            alpha=self.spec.alpha,
            binary=objective in ("accuracy", "judged_accuracy")
            and value_kind(self.spec.epochs, self.spec.reducer) == "binary",
        )

    def __call__(self, trial: Any) -> Any:
        import optuna

        spec, examples, deadline = self.spec, self.examples, self.deadline
        spec.suggest(trial)  # draws the trial's parameters into trial.params
        method = spec.trial_method(trial.params, f"trial-{trial.number}")
        run_id = trial.user_attrs.get("mlflow_run_id")
        tracked = TrackedRun(spec, run_id=run_id, cells=False, store=False, progress=False)
        with tracked:
            _sync_spend(tracked, trial)  # a compile's spend counts too
            cell = tracked.open(spec.dataset, method, examples)
            _record_spend(tracked, trial)
            if cell is None:
                tracked.raise_error(spec.dataset, method)
                raise TrialFailed(_COST_REACHED.format(_max(spec)))
            if cell.run.compile_usage is not None:
                total = cell.run.compile_usage.get("total", {})
                trial.set_user_attr("compile_tokens", float(total.get("tokens", 0) + total.get("cached_tokens", 0)))
                trial.set_user_attr("compile_calls", float(total.get("calls", 0)))
            for step, start in enumerate(range(0, len(examples), spec.chunk_size)):
                if deadline is not None and time.monotonic() > deadline:
                    raise TrialFailed(f"stopped by the sweep's timeout after {len(cell.result.items)} items")
                _sync_spend(tracked, trial)
                tracked.feed([cell], examples[start : start + spec.chunk_size])
                _record_spend(tracked, trial)
                if tracked.out_of_money:
                    raise TrialFailed(_COST_REACHED.format(_max(spec)))
                summary = summarize(cell.result)
                _record_usage(trial, summary)
                if summary.failed:
                    raise TrialFailed(f"{summary.failed} item(s) failed: {next(iter(summary.errors))}")
                value = objective_value(summary, spec.objectives[0])
                trial.set_user_attr("intermediate", [*trial.user_attrs.get("intermediate", []), value])
                logger.info(
                    "trial %d %s: %d/%d items, %s %.3f",
                    trial.number,
                    trial.params,
                    summary.n,
                    len(examples),
                    spec.objectives[0],
                    value,
                )
                per_item = item_values(cell.result, spec.objectives[0], self.order)
                trial.set_user_attr(ITEM_VALUES, per_item)
                if not spec.multi:
                    trial.report(value, step)
                    if trial.should_prune() or self._paired_prune(trial, per_item):
                        raise optuna.TrialPruned()
            tracked.close(cell)
        final = summarize(cell.result)
        values = [objective_value(final, o) for o in spec.objectives]
        for name, value in zip(spec.objectives, values, strict=True):
            trial.set_user_attr(f"objective.{name}", value)
        return values[0] if not spec.multi else tuple(values)


def default_objective(spec: SweepSpec, parent_run_id: str | None = None, deadline: float | None = None) -> Objective:
    """The objective every sweep uses unless ``objective_path`` names another (see :class:`TrialObjective`)."""
    return TrialObjective(spec, deadline)


def objective_value(summary: Summary, objective: str) -> float:
    """One objective of a trial, read off its summary (scored items only): accuracy, tokens/item, or a judge
    score's mean. A value that was not measured (nothing scored, no judge score) fails the trial."""
    if objective in ("accuracy", "tokens_per_item"):
        value = getattr(summary, objective)
    else:
        score = summary.judge.scores.get(objective) if summary.judge is not None else None
        value = score.mean if score is not None else None
    if value is None:
        raise TrialFailed(f"no item gave a `{objective}` value")
    return float(value)


#: the trial's user attribute that holds what its items spent (USD, cache hits free): the sweep's spend is their sum
SPENT = "spent_usd"
_COST_REACHED = "max_cost {} reached (the sweep's spend in all)"


def study_spent(study: Any) -> float:
    """USD the sweep's trials have spent so far (every worker's, from the shared storage)."""
    return float(sum(t.user_attrs.get(SPENT, 0.0) for t in study.get_trials(deepcopy=False)))


def cost_reached(spec: SweepSpec, study: Any) -> bool:
    """The sweep's ``max_cost`` is reached by what its trials, every worker's, have spent: no trial starts."""
    return spec.max_cost is not None and study_spent(study) >= spec.max_cost


def _sync_spend(tracked: TrackedRun, trial: Any) -> None:
    """The trial's one spend limit against what the sweep's other trials (every worker's) have spent, read
    from the shared study before its compile and each chunk; a trial stops (FAIL, re-run on resume) once reached."""
    if tracked.limit.max_cost is None:
        return
    tracked.limit.earlier = study_spent(trial.study) - float(trial.user_attrs.get(SPENT, 0.0))
    if tracked.out_of_money:
        raise TrialFailed(_COST_REACHED.format(money(tracked.limit.max_cost, as_given=True)))


def _record_spend(tracked: TrackedRun, trial: Any) -> None:
    """What the trial has spent so far, where every worker reads the sweep's spend (its user attribute)."""
    if tracked.limit.max_cost is not None:
        trial.set_user_attr(SPENT, tracked.limit.spent)


def _max(spec: SweepSpec) -> str:
    return money(spec.max_cost, as_given=True)


def _record_usage(trial: Any, summary: Summary) -> None:
    trial.set_user_attr("n_items", summary.n + summary.failed)
    trial.set_user_attr("n_failed", summary.failed)
    trial.set_user_attr("n_unparsed", summary.unparsed)
    trial.set_user_attr("tokens_per_item", summary.tokens_per_item)
    trial.set_user_attr("spent_tokens", summary.spent_tokens)
    trial.set_user_attr("cached_tokens", summary.cached_tokens)
    trial.set_user_attr("calls", summary.calls)


def _load_objective(
    spec: SweepSpec, objective_path: str | None, parent_run_id: str | None, deadline: float | None
) -> Objective:
    if objective_path is None:
        return default_objective(spec, parent_run_id, deadline)
    module, _, name = objective_path.partition(":")
    factory = getattr(importlib.import_module(module), name)
    return factory(spec)  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------------------ workers


def _work(spec: SweepSpec, objective: Objective, parent_run_id: str | None, deadline: float | None) -> None:
    """One worker: take trials under the study lock until n_trials are accounted for, the deadline passes,
    or ``max_consecutive_failures`` trials in a row failed."""
    import optuna

    study = open_study(spec)
    lock = FileLock(str(lock_path(spec.study, spec.storage)))
    me = f"{HOST}:{os.getpid()}"
    failures = 0
    while True:
        if deadline is not None and time.monotonic() > deadline:
            logger.info("timeout reached: no new trial starts")
            return
        with lock:
            recover_stale(study)
            if counted(study) >= spec.n_trials:
                return
            if cost_reached(spec, study):
                logger.error("%s: no trial starts (resume with a higher max_cost)", _COST_REACHED.format(_max(spec)))
                return
            trial = study.ask()
            trial.set_user_attr("worker", me)
        run_id = sweep_tracking.start_trial(spec, trial.number, parent_run_id)
        if run_id is not None:
            trial.set_user_attr("mlflow_run_id", run_id)
        state, values, error = optuna.trial.TrialState.COMPLETE, None, None
        try:
            with optuna_compat.heartbeat(trial, study):  # RDB storages: lets other machines see us die
                values = objective(trial)
        except optuna.TrialPruned:
            state = optuna.trial.TrialState.PRUNED
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the trial is FAIL (re-run on resume), its run KILLED
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            sweep_tracking.finish_trial(spec, study, trial.number, run_id, error="interrupted", killed=True)
            raise
        except Exception as exc:  # a failing trial is recorded, the sweep goes on (up to the cap)
            state, error = optuna.trial.TrialState.FAIL, f"{type(exc).__name__}: {exc}"
            logger.error("trial %d failed: %s", trial.number, error)
        if state == optuna.trial.TrialState.COMPLETE:
            study.tell(trial, values)
        else:
            study.tell(trial, state=state)
        sweep_tracking.finish_trial(spec, study, trial.number, run_id, error=error)
        logger.info(
            "trial %d %s: %s, values %s, %.0f tokens/item",
            trial.number,
            trial.params,
            state.name,
            values,
            trial.user_attrs.get("tokens_per_item") or 0.0,
        )
        failures = failures + 1 if state == optuna.trial.TrialState.FAIL else 0
        if failures >= spec.max_consecutive_failures:
            raise SweepError(
                f"{failures} trials in a row failed, the last with: {error}. Fix the cause and run "
                "the same command again: failed trials are re-run on resume."
            )


def _worker_entry(
    spec: SweepSpec,
    objective_path: str | None,
    parent_run_id: str | None,
    cwd: str,
    deadline_in: float | None = None,
) -> None:
    """A worker process: ``spec`` is the sweep's spec, ``deadline_in`` the seconds left of the sweep's timeout."""
    os.chdir(cwd)
    apply_offline_defaults()
    if not logger.handlers:  # a spawned worker: its progress lines go to stderr like the parent's
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"[worker {os.getpid()}] %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    deadline = time.monotonic() + deadline_in if deadline_in is not None else None
    try:
        _work(spec, _load_objective(spec, objective_path, parent_run_id, deadline), parent_run_id, deadline)
    except SweepError as exc:
        logger.error("%s", exc)
        raise SystemExit(3) from None


def run_study(
    spec: SweepSpec,
    *,
    workers: int = 1,
    objective_path: str | None = None,
    parent_run_id: str | None = None,
    timeout: float | None = None,
) -> Any:
    """Run the study with ``workers`` local processes (1: in this process). Returns the study."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"`workers` must be a positive integer, got {workers!r}.")
    deadline = time.monotonic() + timeout if timeout is not None else None
    if workers == 1:
        _work(spec, _load_objective(spec, objective_path, parent_run_id, deadline), parent_run_id, deadline)
        return open_study(spec)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_worker_entry, args=(spec, objective_path, parent_run_id, os.getcwd(), timeout))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode == 3 for p in procs):
        raise SweepError(
            "a worker stopped after its trials kept failing (see the errors above); failed trials "
            "are re-run when the sweep is resumed."
        )
    return open_study(spec)
