"""``dspy-for compare``: methods × datasets, one honest table, everything tracked in MLflow.

Flow: spec → for each dataset and method: :func:`~dspy_for.experiments.run.prepare_run` →
:func:`~dspy_for.experiments.run.evaluate` (per-item records, kept in a results store for resume) → one
nested MLflow run per method × dataset → the table with paired tests against the baseline and the plots,
logged on the parent run. A method whose every item failed ends FAILED; any failed item makes
:attr:`ComparisonResult.ok` false (the CLI then exits non-zero after everything finished is logged).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspy_for.datasets import data_hash
from dspy_for.experiments import report, tracing, tracking
from dspy_for.experiments.config import load_spec
from dspy_for.experiments.records import MethodResult, ResultStore
from dspy_for.experiments.run import PreparedRun, evaluate, prepare_run, with_options
from dspy_for.experiments.spec import ExperimentSpec, MethodConfig
from dspy_for.lm import describe_lm
from dspy_for.secrets import redact

__all__ = ["ComparisonResult", "compare"]

logger = logging.getLogger("dspy_for.compare")


@dataclass
class ComparisonResult:
    spec: ExperimentSpec
    results: dict[str, dict[str, MethodResult]] = field(default_factory=dict)  # dataset -> label -> result
    errors: dict[str, dict[str, str]] = field(default_factory=dict)  # a method that could not run at all
    rows: list[dict[str, Any]] = field(default_factory=list)
    run_id: str | None = None
    run_dir: Path | None = None
    plots: list[Path] = field(default_factory=list)

    def item_errors(self) -> Counter[str]:
        """Each distinct item error across the comparison (secrets masked) with its count."""
        total: Counter[str] = Counter()
        for by_label in self.results.values():
            for r in by_label.values():
                total.update(r.error_counts())
        return total

    @property
    def n_failed(self) -> int:
        return sum(r.n_failed for by_label in self.results.values() for r in by_label.values())

    @property
    def judge_errors(self) -> int:
        return sum(r.judge_errors for by_label in self.results.values() for r in by_label.values())

    @property
    def ok(self) -> bool:
        """No failed item, no item the judge's LM failed on, and no method that could not run: every number
        printed is a measured one."""
        return self.n_failed == 0 and self.judge_errors == 0 and not any(self.errors.values())


def compare(spec_or_path: ExperimentSpec | str | Path | None = None, **overrides: Any) -> ComparisonResult:
    """Run a comparison (see the module docstring). ``overrides`` are the CLI flags' names; they apply and
    are validated whether a path or an :class:`ExperimentSpec` is given."""
    import mlflow

    spec = load_spec(spec_or_path, **overrides)
    root = tracking.setup_tracking(spec.tracking_uri, spec.experiment)
    run_dir = root / "compare" / spec.fingerprint()
    run_dir.mkdir(parents=True, exist_ok=True)
    items_dir = Path(spec.results_dir) if spec.results_dir else root / "compare" / "items"
    out = ComparisonResult(spec=spec, run_dir=run_dir)
    if spec.autolog:
        tracking.autolog()

    with mlflow.start_run(run_name=f"compare-{spec.experiment}") as parent:
        out.run_id = parent.info.run_id
        mlflow.log_params(
            tracking.safe_params(
                {
                    "spec": {**spec.to_dict(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")},
                    **tracking.environment_params(),
                }
            )
        )
        mlflow.set_tags({"dspy_for.kind": "comparison", "dspy_for.fingerprint": spec.fingerprint()})
        for d in spec.datasets:
            out.results[d.name], out.errors[d.name] = {}, {}
            examples = None
            for m in _ordered(spec):
                if spec.match_budget and m.name in ("self_consistency", "refine"):
                    m = with_options(m, _matched_budget(spec, out.results[d.name], m))
                res, err, examples = _run_one(spec, d, m, examples, run_dir, items_dir)
                if res is not None:
                    out.results[d.name][m.label] = res
                if err:
                    out.errors[d.name][m.label] = err
        out.rows = report.summary_rows(out)
        tracking.log_table(out.rows, "summary.jsonl")
        tracking.log_text_artifact(report.table_text(out), "summary.txt")
        for name, fig in report.figures(out).items():
            path = run_dir / name
            fig.savefig(path, dpi=120, bbox_inches="tight")
            tracking.log_figure(fig, name)
            out.plots.append(path)
        if not out.ok:
            mlflow.set_tag("dspy_for.failed_items", str(out.n_failed))
    return out


def _ordered(spec: ExperimentSpec) -> list[MethodConfig]:
    """FOR first when budgets are matched (the others are sized from its cost), else config order."""
    if not spec.match_budget:
        return list(spec.methods)
    key = {"for": 0, "cot": 1}
    return sorted(spec.methods, key=lambda m: key.get(m.name, 2))


def _matched_budget(spec: ExperimentSpec, done: dict[str, MethodResult], m: MethodConfig) -> dict[str, Any]:
    """Options that spend about the first FOR method's tokens per item: k CoT calls at CoT's measured cost
    per call (self-consistency), or up to N attempts (Refine, which stops early once its reward is met)."""
    for_res = next((done[x.label] for x in spec.methods if x.name == "for" and x.label in done), None)
    cot_res = next((done[x.label] for x in spec.methods if x.name == "cot" and x.label in done), None)
    if for_res is None or cot_res is None or not for_res.n_scored or not cot_res.n_scored:
        logger.warning("match_budget needs a `for` and a `cot` method with scored items; %s keeps its options", m.label)
        return m.options
    n = max(1, round(for_res.tokens_per_item / max(cot_res.tokens_per_item, 1.0)))
    if m.name == "self_consistency":
        return {**m.options, "k": n}
    # Refine: N attempts is the cap; it stops once its reward is met. (Forcing all N with an unreachable
    # threshold would only waste them: dspy.Refine keeps the first attempt with the best reward.)
    return {**m.options, "N": n}


def _run_one(
    spec: ExperimentSpec, d: Any, m: MethodConfig, examples: Any, run_dir: Path, items_dir: Path
) -> tuple[MethodResult | None, str | None, Any]:
    """One method on one dataset as a nested MLflow run; returns (result, error, the dataset's examples)."""
    import mlflow

    mlflow.start_run(run_name=f"{m.label} / {d.name}", nested=True)
    try:
        run = prepare_run(spec, d, m, examples=examples, compile_dir=items_dir / d.name / d.split)
        examples = run.examples
        _log_run_params(run)
        tracing.log_dataset(run)
        store = ResultStore.in_dir(items_dir, d.name, d.split, m.label, run.key)
        with store.exclusive():
            res = evaluate(run, store=store)
        _log_result(res, run.compile_usage)
        tracing.log_item_traces(run, res)
        program_path = run_dir / d.name / f"{m.label}.program.json"
        program_path.parent.mkdir(parents=True, exist_ok=True)
        run.program.save(str(program_path))
        mlflow.log_artifact(str(program_path))
        if res.n_failed:
            mlflow.set_tag("dspy_for.failed_items", str(res.n_failed))
            for error, count in res.error_counts().most_common():
                logger.error("%s on %s: %d item(s) failed: %s", m.label, d.name, count, error)
        mlflow.end_run("FAILED" if res.all_failed else "FINISHED")
        return res, None, examples
    except Exception as exc:
        err = redact(f"{type(exc).__name__}: {exc}")
        mlflow.set_tag("error", err[:5000])
        tracking.log_text_artifact(traceback.format_exc(), "error.txt")
        mlflow.end_run("FAILED")
        logger.error("method %s on %s failed: %s", m.label, d.name, err)
        return None, err, examples


def _log_run_params(run: PreparedRun) -> None:
    import mlflow

    d, m = run.dataset, run.method
    mlflow.log_params(
        tracking.safe_params(
            {
                "method": m.name,
                "label": m.label,
                "options": m.options,
                "lm": {r: describe_lm(run.role_lms[r]) for r in run.roles},
                "dataset": d.name,
                "split": d.split,
                "source": run.examples[0].get("source") if run.examples else "",
                "n": len(run.examples),
                "seed": d.seed,
                "data_hash": data_hash(run.examples),
                "compile": m.compile or {},
            }
        )
    )
    mlflow.set_tags(
        {"dspy_for.method": m.name, "dspy_for.dataset": d.name, "dspy_for.label_using": str(run.uses_labels)}
    )


def _log_result(res: MethodResult, compile_usage: dict[str, Any] | None) -> None:
    import mlflow

    lo, hi = res.ci
    n = max(1, res.n_scored)
    metrics = {
        "accuracy": res.accuracy,
        "accuracy_ci_low": lo,
        "accuracy_ci_high": hi,
        "n": float(res.n_scored),
        "failed_items": float(res.n_failed),
        "unparsed_items": float(res.n_unparsed),
        "wall_time": res.wall_time + res.reused_time,
        "tokens_per_item": res.tokens_per_item,
        "calls_per_item": res.calls_per_item,
    }
    for role_name, r in res.usage.roles.items():
        metrics[f"tokens_per_item.{role_name}"] = r.served_tokens / n  # what a cold run costs
        metrics[f"tokens_per_item.{role_name}.spent"] = r.tokens / n
        metrics[f"tokens_per_item.{role_name}.cached"] = r.cached_tokens / n
        metrics[f"calls_per_item.{role_name}"] = r.calls / n
    for k, v in res.stats_mean.items():
        metrics[f"mean.{k}"] = v
    if "role_collapse" in res.stats_mean:
        metrics["role_collapse_rate"] = sum(1 for i in res.scored if i.stats.get("role_collapse", 0) > 0) / n
    if compile_usage:
        total = compile_usage.get("total", {})
        metrics["compile.tokens"] = float(total.get("tokens", 0) + total.get("cached_tokens", 0))
        metrics["compile.calls"] = float(total.get("calls", 0))
    judged = report.judge_summary(res, None)
    for score in report.JUDGE_SCORES:
        if score in judged:
            e = judged[score]
            metrics.update({score: e["mean"], f"{score}_ci_low": e["low"], f"{score}_ci_high": e["high"]})
    if judged:
        metrics.update(
            {"judge.fallbacks": float(judged["fallbacks"]), "tokens_per_item.judge": judged["tokens_per_item"]}
        )
        if "kappa" in judged:
            metrics.update({"judge.kappa": judged["kappa"], "judge.agreement": judged["agreement"]})
    if res.n_scored:
        mlflow.log_metrics(metrics)
    else:  # nothing was measured: log the counts, never an accuracy or a token cost
        mlflow.log_metrics({"n": 0.0, "failed_items": float(res.n_failed)})
    rows = [
        {
            "id": i.id,
            "question": i.question,
            "gold": i.gold,
            "prediction": i.prediction,
            "correct": i.score,
            "error": i.error,
            "error_class": i.error_class,
            "unparsed": i.unparsed,
            "usage": i.usage.get("total", {}),
            "stats": i.stats,
            "judge": i.judge,
        }
        for i in res.items
    ]
    tracking.log_table(rows, "items.jsonl")
    tracking.log_table(
        [
            {"id": i.id, "trajectory": i.trajectory, "answers_by_round": i.answers_by_round}
            for i in res.items
            if i.trajectory
        ],
        "trajectories.jsonl",
    )
    if compile_usage:
        tracking.log_json_artifact(compile_usage, "compile_usage.json")
