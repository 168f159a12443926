"""``dspy-for compare``: methods × datasets, one honest table, everything tracked in MLflow.

Flow: spec → for each dataset: examples → for each method: program from the registry →
:func:`evaluate_method` (per-item results, usage, resume) → one nested MLflow run per method ×
dataset → the table with paired tests against the baseline, and plots, logged on the parent run.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from dspy_for.datasets import data_hash, dataset_info, load_dataset
from dspy_for.experiments.methods import build_method, get_method
from dspy_for.experiments.runner import MethodResult, evaluate_method
from dspy_for.experiments.spec import ExperimentSpec, MethodConfig, load_spec, prompts_fingerprint
from dspy_for.lm import describe_lm, make_lm
from dspy_for.metrics import metric_for

__all__ = ["ComparisonResult", "compare", "signature_for"]

logger = logging.getLogger("dspy_for.compare")

_SIGNATURES = {
    "float": "question -> answer: float",
    "int": "question -> answer: int",
    "str": "question -> answer: str",
    "str (A-E)": "question -> answer: str",
}


def signature_for(dataset: str) -> str:
    return _SIGNATURES[dataset_info(dataset).answer_type]


@dataclass
class ComparisonResult:
    spec: ExperimentSpec
    results: dict[str, dict[str, MethodResult]] = field(default_factory=dict)  # dataset -> label -> result
    errors: dict[str, dict[str, str]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    run_id: str | None = None
    run_dir: Path | None = None
    plots: list[Path] = field(default_factory=list)


def _lms_for(spec: ExperimentSpec, m: MethodConfig) -> tuple[Any, dict[str, Any]]:
    roles = get_method(m.name).roles
    opts = {"max_tokens": spec.max_tokens, "cache": spec.cache}
    default = make_lm(spec.lm, **opts)
    role_specs = {r: s for r, s in {**spec.role_lms, **m.role_lms}.items() if r in roles}
    return default, {r: make_lm(s, **opts) for r, s in role_specs.items()}


def _matched_options(m: MethodConfig, target_tokens: float, cot_tokens: float) -> dict[str, Any]:
    """Options that spend about ``target_tokens`` per item, from CoT's cost per call."""
    n = max(1, round(target_tokens / max(cot_tokens, 1.0)))
    if m.name == "self_consistency":
        return {**m.options, "k": n}
    if m.name == "refine":
        return {**m.options, "N": n, "threshold": 2.0}  # an unreachable threshold spends all N attempts
    return m.options


def compare(spec_or_path: ExperimentSpec | str | Path | None = None, **overrides: Any) -> ComparisonResult:
    """Run a comparison (see the module docstring). ``overrides`` are the CLI flags' names."""
    import mlflow

    from dspy_for.experiments import report, tracking

    spec = spec_or_path if isinstance(spec_or_path, ExperimentSpec) else load_spec(spec_or_path, **overrides)
    uri = spec.tracking_uri
    tracking.setup_tracking(uri, spec.experiment)
    root = Path(mlflow.get_tracking_uri()[len("sqlite:///"):]).parent if mlflow.get_tracking_uri().startswith(
        "sqlite:///") else Path("mlruns")
    run_dir = root / "compare" / spec.fingerprint()
    run_dir.mkdir(parents=True, exist_ok=True)
    items_dir = Path(spec.results_dir) if spec.results_dir else root / "compare" / "items"
    out = ComparisonResult(spec=spec, run_dir=run_dir)
    if spec.autolog:
        mlflow.dspy.autolog()

    with mlflow.start_run(run_name=f"compare-{spec.experiment}") as parent:
        out.run_id = parent.info.run_id
        mlflow.log_params(tracking.safe_params({"spec": _public_spec(spec), **tracking.environment_params()}))
        mlflow.set_tags({"dspy_for.kind": "comparison", "dspy_for.fingerprint": spec.fingerprint()})
        for d in spec.datasets:
            examples = load_dataset(d.name, d.split, data_dir=d.data_dir, limit=d.limit, seed=d.seed)
            if d.first:
                examples = examples[: d.first]
            metric = metric_for(d.name)
            sig = signature_for(d.name)
            out.results[d.name], out.errors[d.name] = {}, {}
            methods = _ordered(spec)
            for m in methods:
                options = m.options
                if spec.match_budget and m.name in ("self_consistency", "refine"):
                    options = _matched_budget(out.results[d.name], m)
                res, err = _run_one(spec, d, m, options, examples, metric, sig, run_dir, items_dir)
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
    return out


def _ordered(spec: ExperimentSpec) -> list[MethodConfig]:
    """FOR first when budgets are matched (the others are sized from its cost), else config order."""
    if not spec.match_budget:
        return list(spec.methods)
    key = {"for": 0, "cot": 1}
    return sorted(spec.methods, key=lambda m: key.get(m.name, 2))


def _matched_budget(done: dict[str, MethodResult], m: MethodConfig) -> dict[str, Any]:
    for_res = next((r for label, r in done.items() if label.startswith("for")), None)
    cot_res = done.get("cot")
    if for_res is None or cot_res is None:
        logger.warning("match_budget needs a `for` and a `cot` method in the comparison; %s keeps its options",
                       m.label)
        return m.options
    return _matched_options(m, for_res.tokens_per_item, cot_res.tokens_per_item)


def _run_one(
    spec: ExperimentSpec, d: Any, m: MethodConfig, options: dict[str, Any], examples: list[dspy.Example],
    metric: Any, sig: str, run_dir: Path, items_dir: Path,
) -> tuple[MethodResult | None, str | None]:
    import mlflow

    from dspy_for.experiments import tracking

    mlflow.start_run(run_name=f"{m.label} / {d.name}", nested=True)
    try:
        default, role_lms = _lms_for(spec, m)
        program = build_method(m.name, sig, lm=default, role_lms=role_lms, **options)
        roles = get_method(m.name).roles
        key = spec.item_key(d, m, options, list(roles), prompts_fingerprint(program))
        stem = items_dir / d.name / d.split / f"{m.label}.{key}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        compile_usage = None
        if m.compile:
            program, compile_usage = _compile(spec, d, m, program, metric, stem)
        lm_params = {r: describe_lm(role_lms.get(r, default)) for r in roles}
        mlflow.log_params(tracking.safe_params({
            "method": m.name, "label": m.label, "options": options, "lm": lm_params,
            "dataset": d.name, "split": d.split, "source": examples[0].get("source") if examples else "",
            "n": len(examples), "seed": d.seed, "data_hash": data_hash(examples),
            "compile": m.compile or {},
        }))
        mlflow.set_tags({"dspy_for.method": m.name, "dspy_for.dataset": d.name,
                         "dspy_for.label_using": str(bool(options.get("verifier") == "oracle"))})
        with dspy.context(lm=default):
            res = evaluate_method(
                program, examples, metric=metric, num_threads=spec.num_threads,
                results_path=stem.with_name(stem.name + ".jsonl"), desc=f"{m.label} on {d.name}",
                pass_labels=bool(getattr(program, "uses_labels", False)),
            )
        res.label = m.label
        _log_result(res, compile_usage)
        program_path = run_dir / d.name / f"{m.label}.program.json"
        program_path.parent.mkdir(parents=True, exist_ok=True)
        program.save(str(program_path))
        mlflow.log_artifact(str(program_path))
        if res.n_failed:
            mlflow.set_tag("dspy_for.failed_items", str(res.n_failed))
        mlflow.end_run("FINISHED")
        return res, None
    except Exception as exc:
        err = f"{type(exc).__name__}: {exc}"
        mlflow.set_tag("error", tracking.redact(err)[:5000])
        tracking.log_text_artifact(traceback.format_exc(), "error.txt")
        mlflow.end_run("FAILED")
        logger.error("method %s on %s failed: %s", m.label, d.name, err)
        return None, err


def _compile(spec: ExperimentSpec, d: Any, m: MethodConfig, program: dspy.Module, metric: Any,
             stem: Path) -> tuple[dspy.Module, dict[str, Any]]:
    from dspy_for.errors import ConfigError, require

    optimizers = require("dspy_for.optimizers", extra="dev", package="dspy-for (optimizers)")
    cfg = dict(m.compile or {})
    kind = cfg.pop("kind", None)
    if not kind:
        raise ConfigError(f"`compile` of method `{m.label}` needs a `kind` (textgrad, gepa, mipro, bootstrap).")
    trainset = load_dataset(d.name, cfg.pop("trainset", "train"), data_dir=d.data_dir,
                            limit=cfg.pop("train_limit", None), seed=d.seed)
    valset = load_dataset(d.name, cfg.pop("valset", "val"), data_dir=d.data_dir,
                          limit=cfg.pop("val_limit", None), seed=d.seed)
    cached = stem.with_name(stem.name + ".compiled.json")
    if cached.is_file():
        program.load(str(cached))
        return program, json.loads((cached.with_suffix(".usage.json")).read_text())
    optimizer_lm = make_lm(cfg.pop("optimizer_lm", spec.lm), max_tokens=spec.max_tokens)
    result = optimizers.compile_program(kind, program, trainset=trainset, valset=valset, metric=metric,
                                        seed=spec.seed, optimizer_lm=optimizer_lm, **cfg)
    result.program.save(str(cached))
    cached.with_suffix(".usage.json").write_text(json.dumps(result.usage))
    return result.program, result.usage


def _log_result(res: MethodResult, compile_usage: dict[str, Any] | None) -> None:
    import mlflow

    from dspy_for.experiments import tracking

    lo, hi = res.ci
    metrics = {"accuracy": res.accuracy, "accuracy_ci_low": lo, "accuracy_ci_high": hi,
               "n": float(res.n), "failed_items": float(res.n_failed), "wall_time": res.wall_time,
               "tokens_per_item": res.tokens_per_item, "calls_per_item": res.calls_per_item}
    usage = res.usage
    for role_name, r in usage.roles.items():
        metrics[f"tokens_per_item.{role_name}"] = r.served_tokens / max(1, res.n)  # what a cold run costs
        metrics[f"tokens_per_item.{role_name}.spent"] = r.tokens / max(1, res.n)
        metrics[f"tokens_per_item.{role_name}.cached"] = r.cached_tokens / max(1, res.n)
        metrics[f"calls_per_item.{role_name}"] = r.calls / max(1, res.n)
    for k, v in res.stats_mean.items():
        metrics[f"mean.{k}"] = v
    if "role_collapse" in res.stats_mean:
        metrics["role_collapse_rate"] = sum(1 for i in res.items if i.stats.get("role_collapse", 0) > 0) / max(1, res.n)
    if compile_usage:
        total = compile_usage.get("total", {})
        metrics["compile.tokens"] = float(total.get("tokens", 0) + total.get("cached_tokens", 0))
        metrics["compile.calls"] = float(total.get("calls", 0))
    mlflow.log_metrics(metrics)
    rows = [{"id": i.id, "question": i.question, "gold": i.gold, "prediction": i.prediction, "correct": i.score,
             "error": i.error, "usage": i.usage.get("total", {}), "stats": i.stats} for i in res.items]
    tracking.log_table(rows, "items.jsonl")
    tracking.log_table([{"id": i.id, "trajectory": i.trajectory, "answers_by_round": i.answers_by_round}
                        for i in res.items if i.trajectory], "trajectories.jsonl")
    if compile_usage:
        tracking.log_json_artifact(compile_usage, "compile_usage.json")


def _public_spec(spec: ExperimentSpec) -> dict[str, Any]:
    d = spec.to_dict()
    d["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    return d
