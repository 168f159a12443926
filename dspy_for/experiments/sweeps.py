"""``dspy-for sweep``: Optuna search over a method's options on validation data, tracked in MLflow.

* Each trial is one run of the shared run path: :func:`~dspy_for.experiments.run.prepare_run` with the
  trial's options, then :func:`~dspy_for.experiments.run.evaluate` chunk by chunk, reporting the running
  accuracy so a pruner stops hopeless trials early (single-objective studies); multi-objective studies
  optimise accuracy (max) and tokens/item (min) and keep the Pareto front.
* A trial with a failed item (an LM error) is FAIL, never COMPLETE with a low score; it is re-run when the
  sweep is resumed. ``max_consecutive_failures`` failed trials in a row end the sweep with an error.
* ``timeout``: no trial starts after it, and a running trial stops at its next chunk (FAIL, re-run on
  resume), with 1 or N workers.
* ``workers=N`` runs N local worker processes on the same study (see :mod:`.sweep_storage`).
* ``final_test``: the best configuration once on the test split, through the same run path as ``compare``
  (label-using methods get their labels there too).
* With the DSPy cache on, a trial that repeats a configuration, or is a prefix of one already run (FOR
  with a smaller N, ProRefine with a smaller n), costs only the calls that differ.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from dspy_for.compat import optuna as optuna_compat
from dspy_for.errors import ConfigError, DspyForError
from dspy_for.experiments import sweep_tracking, tracing, tracking
from dspy_for.experiments.records import MethodResult
from dspy_for.experiments.run import evaluate, load_examples, prepare_run
from dspy_for.experiments.spec import DatasetConfig, JudgeConfig
from dspy_for.experiments.sweep_spec import SweepSpec, load_sweep_spec
from dspy_for.experiments.sweep_storage import (
    HOST,
    counted,
    lock_path,
    make_storage,
    open_study,
    recover_stale,
    requeue_failed,
)

__all__ = [
    "SweepError",
    "SweepResult",
    "SweepSpec",
    "load_sweep_spec",
    "make_storage",
    "open_study",
    "run_study",
    "sweep",
]

logger = logging.getLogger("dspy_for.sweep")

Objective = Callable[[Any], Any]


class SweepError(DspyForError, RuntimeError):
    """The sweep stopped because its trials kept failing (e.g. the LM endpoint is down)."""


class TrialFailed(RuntimeError):
    """A trial whose items failed (LM errors) or that the timeout cut: FAIL, re-run on resume."""


# ---------------------------------------------------------------------------------------- objective


def default_objective(spec: SweepSpec, parent_run_id: str | None = None, deadline: float | None = None) -> Objective:
    """The real objective: the trial's method through the run path, evaluated chunk by chunk."""
    import optuna

    examples = load_examples(spec.dataset)

    def objective(trial: Any) -> Any:
        spec.suggest(trial)  # draws the trial's parameters into trial.params
        run = prepare_run(
            spec, spec.dataset, spec.trial_method(trial.params, f"trial-{trial.number}"), examples=examples
        )
        if run.compile_usage is not None:
            total = run.compile_usage.get("total", {})
            trial.set_user_attr("compile_tokens", float(total.get("tokens", 0) + total.get("cached_tokens", 0)))
            trial.set_user_attr("compile_calls", float(total.get("calls", 0)))
        results: list[MethodResult] = []
        for step, start in enumerate(range(0, len(examples), spec.chunk_size)):
            if deadline is not None and time.monotonic() > deadline:
                raise TrialFailed(f"stopped by the sweep's timeout after {sum(r.n for r in results)} items")
            results.append(evaluate(run, examples[start : start + spec.chunk_size], progress=False))
            merged = _merge(results)
            _record_usage(trial, merged)
            if merged.n_failed:
                errors = merged.error_counts().most_common(1)
                raise TrialFailed(f"{merged.n_failed} item(s) failed: {errors[0][0]}")
            value = objective_value(merged, spec.objectives[0])
            trial.set_user_attr("intermediate", [*trial.user_attrs.get("intermediate", []), value])
            logger.info(
                "trial %d %s: %d/%d items, %s %.3f",
                trial.number,
                trial.params,
                merged.n,
                len(examples),
                spec.objectives[0],
                value,
            )
            if not spec.multi:
                trial.report(value, step)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        merged = _merge(results)
        values = [objective_value(merged, o) for o in spec.objectives]
        for name, value in zip(spec.objectives, values, strict=True):
            trial.set_user_attr(f"objective.{name}", value)
        return values[0] if not spec.multi else tuple(values)

    return objective


def objective_value(result: MethodResult, objective: str) -> float:
    """One objective of a trial's (scored) items: accuracy, tokens/item, or a judge score's mean."""
    if objective == "accuracy":
        return result.accuracy
    if objective == "tokens_per_item":
        return result.tokens_per_item
    values = list(result.judge_values(objective).values())
    if not values:
        raise TrialFailed(f"the judge gave no `{objective}` score for any item")
    return sum(values) / len(values)


def _merge(results: list[MethodResult]) -> MethodResult:
    return MethodResult(
        label="", items=[i for r in results for i in r.items], wall_time=sum(r.wall_time for r in results)
    )


def _record_usage(trial: Any, result: MethodResult) -> None:
    total = result.usage.total
    trial.set_user_attr("n_items", result.n)
    trial.set_user_attr("n_failed", result.n_failed)
    trial.set_user_attr("n_unparsed", result.n_unparsed)
    trial.set_user_attr("tokens_per_item", result.tokens_per_item)
    trial.set_user_attr("spent_tokens", total.tokens)
    trial.set_user_attr("cached_tokens", total.cached_tokens)
    trial.set_user_attr("calls", total.calls)


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
            trial = study.ask()
            trial.set_user_attr("worker", me)
        state, values, error = optuna.trial.TrialState.COMPLETE, None, None
        try:
            with optuna_compat.heartbeat(trial, study):  # RDB storages: lets other machines see us die
                values = objective(trial)
        except optuna.TrialPruned:
            state = optuna.trial.TrialState.PRUNED
        except Exception as exc:  # a failing trial is recorded, the sweep goes on (up to the cap)
            state, error = optuna.trial.TrialState.FAIL, f"{type(exc).__name__}: {exc}"
            logger.error("trial %d failed: %s", trial.number, error)
        if state == optuna.trial.TrialState.COMPLETE:
            study.tell(trial, values)
        else:
            study.tell(trial, state=state)
        sweep_tracking.log_trial(spec, study, trial.number, parent_run_id, error=error)
        logger.info(
            "trial %d %s: %s, values %s, %.0f tokens/item",
            trial.number,
            trial.params,
            state.name,
            values,
            trial.user_attrs.get("tokens_per_item", 0.0),
        )
        failures = failures + 1 if state == optuna.trial.TrialState.FAIL else 0
        if failures >= spec.max_consecutive_failures:
            raise SweepError(
                f"{failures} trials in a row failed, the last with: {error}. Fix the cause and run "
                "the same command again: failed trials are re-run on resume."
            )


def _worker_entry(
    spec: SweepSpec | dict[str, Any],
    objective_path: str | None,
    parent_run_id: str | None,
    cwd: str,
    deadline_in: float | None = None,
) -> None:
    """A worker process: ``spec`` is the SweepSpec (or its ``dataclasses.asdict``), ``deadline_in`` the seconds
    left of the sweep's timeout."""
    os.chdir(cwd)
    if isinstance(spec, dict):
        spec = _spec_from_dict(spec)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
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


def _spec_from_dict(d: dict[str, Any]) -> SweepSpec:
    d = dict(d)
    d["dataset"] = DatasetConfig(**d["dataset"])
    d["judge"] = JudgeConfig(**d["judge"]) if d.get("judge") else None
    return SweepSpec(**d)


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


# -------------------------------------------------------------------------------------------- sweep


@dataclass
class SweepResult:
    spec: SweepSpec
    study: Any
    parent_run_id: str | None
    final_test: dict[str, Any] | None = None

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(t.state.name for t in self.study.get_trials(deepcopy=False)))

    @property
    def ok(self) -> bool:
        """No trial failed and the final test (if any) had no failed item."""
        return not self.counts.get("FAIL") and not (self.final_test or {}).get("failed")


def sweep(
    config: SweepSpec | str | Path | None = None,
    *,
    workers: int = 1,
    final_test: bool = False,
    objective_path: str | None = None,
    timeout: float | None = None,
    **overrides: Any,
) -> SweepResult:
    """Run (or resume) a sweep; see the module docstring. ``overrides`` are the CLI flags' names; they apply
    and are validated whether a path or a :class:`SweepSpec` is given."""
    spec = load_sweep_spec(config, **overrides)
    optuna_compat.check_supported()  # an Optuna without the internals we use fails here, not mid-sweep
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"`--workers` must be a positive integer, got {workers!r}.")
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"`--timeout` must be a positive number of seconds, got {timeout!r}.")
    study = open_study(spec)  # create it (and check the storage) before workers race to
    if spec.enqueue and not study.get_trials(deepcopy=False):  # a resumed study has them already
        space = spec.space
        for point in spec.enqueue:
            study.enqueue_trial(space.validate_point(point), user_attrs={"enqueued": True})
    requeue_failed(study)
    parent = sweep_tracking.start_parent(spec)
    try:
        study = run_study(spec, workers=workers, objective_path=objective_path, parent_run_id=parent, timeout=timeout)
    except SweepError:
        sweep_tracking.finish_parent(spec, open_study(spec), parent, None, status="FAILED")
        raise
    result = SweepResult(spec=spec, study=study, parent_run_id=parent)
    if final_test and not spec.multi and objective_path is None and result.counts.get("COMPLETE"):
        result.final_test = run_final_test(spec, study)
    sweep_tracking.finish_parent(spec, study, parent, result.final_test)
    return result


def run_final_test(spec: SweepSpec, study: Any) -> dict[str, Any]:
    """The best configuration once on the test split, through the same run path as ``compare``; its data and
    one trace per item are logged on the sweep's parent run (a tracing failure is only a warning)."""
    best = study.best_trial
    test = replace(spec.dataset, split=spec.test_split, first=None)
    run = prepare_run(spec, test, spec.trial_method(best.params, "final-test"))
    res = evaluate(run)
    try:
        from mlflow.tracking import MlflowClient

        tracking.setup_tracking(spec.tracking_uri, spec.experiment)
        parents = MlflowClient().search_runs(  # the parent run sweep_tracking.start_parent made or reused
            [tracking.experiment_id(spec.experiment)],
            max_results=1,
            filter_string=f"tags.`dspy_for.study` = '{spec.study}' and tags.`dspy_for.kind` = 'sweep'",
        )
        if parents:
            tracing.log_dataset(run, context="test", run_id=parents[0].info.run_id)
            tracing.log_item_traces(run, res, run_id=parents[0].info.run_id)
    except Exception as exc:
        logger.warning(
            "could not log the final test's items to MLflow: %s", tracking.redact(f"{type(exc).__name__}: {exc}")
        )
    lo, hi = res.ci
    return {
        "method": run.method.name,
        "params": best.params,
        "accuracy": res.accuracy,
        "ci_low": lo,
        "ci_high": hi,
        "tokens_per_item": res.tokens_per_item,
        "n": res.n_scored,
        "failed": res.n_failed,
        "unparsed": res.n_unparsed,
        "errors": dict(res.error_counts()),
    }
