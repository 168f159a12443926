"""The sweep's own small MLflow layer (not optuna-integration's deprecated ``MLflowCallback``).

One parent run per study; one nested run per trial (params, intermediate values as steps, final values,
state, usage), written with ``MlflowClient`` so worker processes log safely; the best trial(s) tagged;
plots on the parent: optimization history, parameter importances, Pareto front (multi-objective).
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspy_for.experiments.tracking import store as tracking
from dspy_for.experiments.tracking.store import critical_write
from dspy_for.secrets import hide_password, redact

if TYPE_CHECKING:
    from dspy_for.experiments.sweeps.final_test import FinalTest
    from dspy_for.experiments.sweeps.spec import SweepSpec

__all__ = ["finish_parent", "finish_trial", "hide_password", "start_parent", "start_trial"]

logger = logging.getLogger("dspy_for.sweep")


def _client(spec: SweepSpec) -> tuple[Any, str]:
    tracking.setup_tracking(spec.tracking_uri, spec.experiment)
    return tracking.client(), tracking.experiment_id(spec.experiment)


@critical_write
def start_parent(spec: SweepSpec) -> str:
    """The study's parent run: reused when the study is resumed (same study name and storage)."""
    client, exp_id = _client(spec)
    found = client.search_runs(
        [exp_id],
        filter_string=f"tags.`dspy_for.study` = '{spec.study}' and tags.`dspy_for.kind` = 'sweep'",
        max_results=1,
    )
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        return run_id
    run = client.create_run(
        exp_id, run_name=f"sweep-{spec.study}", tags={"dspy_for.kind": "sweep", "dspy_for.study": spec.study}
    )
    config = spec.to_dict()
    for key in ("storage", "tracking_uri"):
        config[key] = hide_password(config[key])
    params = tracking.safe_params({"sweep": config, **tracking.environment_params()})
    for k, v in params.items():
        client.log_param(run.info.run_id, k, v)
    return run.info.run_id


@critical_write
def start_trial(spec: SweepSpec, number: int, parent_run_id: str | None) -> str | None:
    """The trial's nested run, created when the trial starts so its items stream into it as traces; its id."""
    if parent_run_id is None:
        return None
    client, exp_id = _client(spec)
    tags = {"mlflow.parentRunId": parent_run_id, "dspy_for.study": spec.study, "dspy_for.trial": str(number)}
    return str(client.create_run(exp_id, run_name=f"trial-{number}", tags=tags).info.run_id)


@critical_write
def finish_trial(
    spec: SweepSpec, study: Any, number: int, run_id: str | None, *, error: str | None = None, killed: bool = False
) -> None:
    """The trial's params, intermediate values as steps, final values, state and usage; then its end status
    (FAILED for a failed trial, KILLED for one a Ctrl-C or SIGTERM stopped)."""
    if run_id is None:
        return
    client, _ = _client(spec)
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    client.set_tag(run_id, "dspy_for.state", trial.state.name)
    if "retry_of" in trial.user_attrs:
        client.set_tag(run_id, "retry_of", str(trial.user_attrs["retry_of"]))
    method = spec.decode(trial.params)[0] if trial.params else spec.method
    for k, v in tracking.safe_params({"params": trial.params, "method": method}).items():
        client.log_param(run_id, k, v)
    for step, value in enumerate(trial.user_attrs.get("intermediate", [])):
        client.log_metric(run_id, f"intermediate_{spec.objectives[0]}", value, step=step)
    if trial.values:
        client.log_metric(run_id, _metric(spec.objectives[0]), trial.values[0])
        if len(trial.values) > 1:
            client.log_metric(run_id, _metric(spec.objectives[1]), trial.values[1])
    for key in (
        "tokens_per_item",
        "spent_tokens",
        "cached_tokens",
        "calls",
        "n_items",
        "n_failed",
        "n_unparsed",
        "compile_tokens",
        "compile_calls",
    ):
        if trial.user_attrs.get(key) is not None:
            client.log_metric(run_id, key, float(trial.user_attrs[key]))
    if error:
        client.set_tag(run_id, "error", tracking.redact(error)[:5000])
    status = "KILLED" if killed else "FAILED" if trial.state.name == "FAIL" else "FINISHED"
    client.set_terminated(run_id, status=status)


def _metric(objective: str) -> str:
    """A trial's objective as an MLflow metric (tokens/item is also logged as a usage metric of its own)."""
    return "objective_tokens_per_item" if objective == "tokens_per_item" else objective


@critical_write
def finish_parent(
    spec: SweepSpec, study: Any, parent_run_id: str | None, final_test: FinalTest | None, status: str = "FINISHED"
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from optuna.trial import TrialState

    if parent_run_id is None:
        return
    client, exp_id = _client(spec)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    best = study.best_trials if complete else []
    best_numbers = {t.number for t in best}
    best_runs = []
    for run in client.search_runs([exp_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'"):
        if run.data.tags.get("dspy_for.trial", "").isdigit() and int(run.data.tags["dspy_for.trial"]) in best_numbers:
            client.set_tag(run.info.run_id, "dspy_for.best", "true")
            best_runs.append((int(run.data.tags["dspy_for.trial"]), run.info.run_id))
    if best_runs:  # one click from the study's run to its best trial(s): a tag and links in its description
        client.set_tag(parent_run_id, "dspy_for.best_trial_run_id", sorted(best_runs)[0][1])
        links = "\n".join(f"- [trial {n}](#/experiments/{exp_id}/runs/{rid})" for n, rid in sorted(best_runs))
        client.set_tag(
            parent_run_id, "mlflow.note.content", f"**Best trial{'s' if len(best_runs) > 1 else ''}**\n{links}"
        )
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    for state, n in counts.items():
        client.log_metric(parent_run_id, f"trials.{state.lower()}", n)
    if best and not spec.multi:
        client.log_metric(parent_run_id, f"best_{spec.objectives[0]}", best[0].values[0])
        for k, v in tracking.safe_params({"best": best[0].params}).items():
            client.set_tag(parent_run_id, k, v)
    if final_test is not None:
        for name, value in final_test.summary.metrics().items():
            client.log_metric(parent_run_id, f"final_test.{name}", value)
    try:  # the study's plots: one that cannot be drawn or logged is a warning; the sweep and its runs stand
        _log_plots(spec, study, complete, client, parent_run_id)
    except Exception as exc:
        error = redact(f"{type(exc).__name__}: {exc}")
        logger.warning("the study's plots could not be written (the sweep's results are kept): %s", error)
        client.set_tag(parent_run_id, "dspy_for.report_failed.the_study_plots", error[:500])
    client.set_terminated(parent_run_id, status=status)


def _log_plots(spec: SweepSpec, study: Any, complete: list[Any], client: Any, parent_run_id: str) -> None:
    """Optimization history, parameter importances (or the Pareto front) on the parent run."""
    import matplotlib.pyplot as plt
    import optuna

    figures = {}
    vis = optuna.visualization.matplotlib
    with _quiet():
        if complete and not spec.multi:
            figures["optimization_history.png"] = vis.plot_optimization_history(study).figure
        if len(complete) >= 2 and study.get_trials()[0].params:
            try:
                target = (lambda t: t.values[0]) if spec.multi else None
                figures["param_importances.png"] = vis.plot_param_importances(
                    study, target=target, target_name=spec.objectives[0]
                ).figure
            except (ValueError, RuntimeError):  # e.g. a parameter that never varied
                pass
        if spec.multi and complete:
            figures["pareto_front.png"] = vis.plot_pareto_front(study, target_names=list(spec.objectives)).figure
    with tempfile.TemporaryDirectory() as tmp:
        for name, fig in figures.items():
            path = Path(tmp) / name
            # `.figure` of a Figure is itself, of a SubFigure its root Figure (only a root Figure can be saved)
            fig.figure.savefig(path, dpi=110, bbox_inches="tight")
            plt.close(fig.figure)  # Optuna draws with pyplot, which keeps every figure open until closed
            client.log_artifact(parent_run_id, str(path))


class _quiet:
    """Optuna's matplotlib plots warn that they are experimental; keep the console clean."""

    def __enter__(self) -> None:
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)
