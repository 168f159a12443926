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

from dspy_for.compat import optuna as optuna_compat
from dspy_for.errors import ConfigError, DspyForError
from dspy_for.experiments import sweep_tracking, tracing
from dspy_for.experiments.records import MethodResult
from dspy_for.experiments.run import PreparedRun, evaluate, load_examples, prepare_run
from dspy_for.experiments.spec import DatasetConfig, JudgeConfig
from dspy_for.experiments.sweep_spec import SweepSpec
from dspy_for.experiments.sweep_storage import HOST, counted, lock_path, open_study, recover_stale

__all__ = [
    "Objective",
    "SweepError",
    "TrialFailed",
    "default_objective",
    "logger",
    "objective_value",
    "run_study",
]

logger = logging.getLogger("dspy_for.sweep")

Objective = Callable[[Any], Any]


class SweepError(DspyForError, RuntimeError):
    """The sweep stopped because its trials kept failing (e.g. the LM endpoint is down)."""


class TrialFailed(RuntimeError):
    """A trial whose items failed (LM errors) or that the timeout cut: FAIL, re-run on resume."""


# ---------------------------------------------------------------------------------------- objective


class TrialObjective:
    """The real objective: the trial's method through the run path, evaluated chunk by chunk. ``evaluated``
    keeps each trial's prepared run and records until the worker has logged them as traces on its run."""

    def __init__(self, spec: SweepSpec, deadline: float | None = None) -> None:
        self.spec, self.deadline = spec, deadline
        self.examples = load_examples(spec.dataset)
        self.evaluated: dict[int, tuple[PreparedRun, MethodResult]] = {}

    def __call__(self, trial: Any) -> Any:
        import optuna

        spec, examples, deadline = self.spec, self.examples, self.deadline
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
            self.evaluated[trial.number] = (run, merged)  # its items become traces on the trial's MLflow run
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


def default_objective(spec: SweepSpec, parent_run_id: str | None = None, deadline: float | None = None) -> Objective:
    """The objective every sweep uses unless ``objective_path`` names another (see :class:`TrialObjective`)."""
    return TrialObjective(spec, deadline)


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
        trial_run_id = sweep_tracking.log_trial(spec, study, trial.number, parent_run_id, error=error)
        evaluated = objective.evaluated.pop(trial.number, None) if isinstance(objective, TrialObjective) else None
        if evaluated is not None and trial_run_id is not None:
            tracing.log_item_traces(*evaluated, run_id=trial_run_id)
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
