"""``dspy-for compare``: methods × datasets, one honest table, everything tracked in MLflow.

Flow: spec → for each dataset and method: :func:`~dspy_for.experiments.core.prepare.prepare_run` → the run core
(:class:`~dspy_for.experiments.core.run.Evaluation`), whose records stream into the results store (resume)
and one nested MLflow run per method × dataset (:class:`~dspy_for.experiments.tracking.sink.MlflowSink`) → the
table with paired tests against the baseline and the plots, logged on the parent run. A method whose every item
failed ends FAILED; any failed item makes :attr:`ComparisonResult.ok` false (the CLI then exits non-zero after
everything finished is logged). Ctrl-C or SIGTERM ends every open MLflow run KILLED, with what finished kept.
"""

from __future__ import annotations

import logging
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspy_for.datasets import data_hash
from dspy_for.experiments.core import (
    Evaluation,
    Feed,
    MethodResult,
    PreparedRun,
    ResultStore,
    SpendLimit,
    feed_together,
    prepare_run,
    with_options,
)
from dspy_for.experiments.core.compile_step import CompileNotStarted
from dspy_for.experiments.core.recheck import recheck_cells
from dspy_for.experiments.core.records import ComparisonResult
from dspy_for.experiments.core.sinks import interruptible
from dspy_for.experiments.methods import BUDGET_UNIT, get_method
from dspy_for.experiments.reports import table as report
from dspy_for.experiments.reports.compiled import breakeven_of
from dspy_for.experiments.reports.recheck import log_recheck
from dspy_for.experiments.sequential import log_outcomes, outcome_rows, run_sequential
from dspy_for.experiments.spec import DatasetConfig, ExperimentSpec, MethodConfig, load_spec
from dspy_for.experiments.spec.config import Overrides
from dspy_for.experiments.tracking import store
from dspy_for.experiments.tracking.datasets import log_dataset
from dspy_for.experiments.tracking.sink import MlflowSink
from dspy_for.lm import describe_lm
from dspy_for.secrets import redact

__all__ = ["ComparisonResult", "compare", "prepare_tracked"]

logger = logging.getLogger("dspy_for.compare")


def compare(
    spec_or_path: ExperimentSpec | str | Path | None = None, overrides: Overrides | None = None, **kwargs: Any
) -> ComparisonResult:
    """Run a comparison (see the module docstring). ``overrides`` (or the same as keyword arguments, e.g.
    ``first=10``) apply and are validated whether a path or an :class:`ExperimentSpec` is given."""
    spec = load_spec(spec_or_path, overrides, **kwargs)
    root = store.setup_tracking(spec.tracking_uri, spec.experiment)
    run_dir = root / "compare" / spec.fingerprint()
    run_dir.mkdir(parents=True, exist_ok=True)
    items_dir = spec.items_dir(root)
    out = ComparisonResult(spec=spec, run_dir=run_dir)
    if spec.autolog:
        store.autolog()
    tags = {"dspy_for.kind": "comparison", "dspy_for.fingerprint": spec.fingerprint()}
    parent = out.run_id = store.start_run(f"compare-{spec.experiment}", spec.experiment, tags=tags)
    status = "FAILED"
    limit = out.spend = SpendLimit(spec.max_cost)
    try:
        with interruptible():
            spec_params = {**spec.to_dict(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
            store.log_params(parent, {"spec": spec_params, **store.environment_params()})
            for d in spec.datasets:
                out.results[d.name], out.errors[d.name] = {}, {}
            c = _Comparison(spec, parent, run_dir, items_dir, out, limit)
            if spec.sequential:
                for d in spec.datasets:
                    _run_sequential(c, d)
            else:
                examples: dict[str, Any] = {}
                for phase in _phases(spec):
                    _run_together(c, phase, examples)
            _report(out, parent, run_dir)
            if spec.recheck:  # the noise floor: N stored items per cell re-run uncached, never stored
                out.recheck = recheck_cells(spec, out, items_dir, limit)
                log_recheck(parent, out.recheck)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        store.end_run(parent, status)
    return out


def _report(out: ComparisonResult, parent: str, run_dir: Path) -> None:
    """The table (``summary.jsonl``, ``summary.txt``) and the plots, on the parent run and in ``run_dir``."""
    out.cells = report.summary_cells(out)
    out.breakeven = breakeven_of(out)
    store.log_table(parent, out.rows, "summary.jsonl")
    if out.breakeven:
        store.log_table(parent, out.breakeven, "breakeven.jsonl")
    store.log_text(parent, report.table_text(out), "summary.txt")
    for name, fig in report.figures(out).items():
        path = run_dir / name
        fig.savefig(path, dpi=120, bbox_inches="tight")
        store.log_figure(parent, fig, name)
        out.plots.append(path)
    if not out.ok:
        store.set_tags(parent, {"dspy_for.failed_items": str(out.n_failed)})


def _phases(spec: ExperimentSpec) -> list[list[MethodConfig]]:
    """The methods in the order they can run: all at once, or, when budgets are matched, the methods a budget sizes
    (their registry entry's ``sized``) after the others, whose measured cost sizes them."""
    if not spec.match_budget:
        return [list(spec.methods)]
    sized = [m for m in spec.methods if get_method(m.name).sized is not None]
    return [[m for m in spec.methods if m not in sized], sized]


def _matched_budget(spec: ExperimentSpec, done: dict[str, MethodResult], m: MethodConfig) -> dict[str, Any]:
    """``m``'s options with its sized option (its registry entry's ``sized``: k samples, N attempts; a cap where the
    method stops early) set to spend about the budget reference's measured tokens per item (the run's first method
    whose entry is one) in calls of CoT's measured tokens per item, by the one budget sizer
    (:meth:`~dspy_for.experiments.methods.MethodEntry.sized_to`: the nearest whole number of calls)."""
    ref = next((done[x.label] for x in spec.methods if get_method(x.name).budget_reference and x.label in done), None)
    unit = next((done[x.label] for x in spec.methods if x.name == BUDGET_UNIT and x.label in done), None)
    if ref is None or unit is None or not ref.n_scored or not unit.n_scored:
        logger.warning(
            "match_budget needs a budget reference (a method whose registry entry sets the budget, e.g. FOR-Prompting) "
            "and a `%s` method with scored items; %s keeps its options",
            BUDGET_UNIT,
            m.label,
        )
        return m.options
    sized = get_method(m.name).sized_to(m.options, ref.tokens_per_item, max(unit.tokens_per_item, 1.0))
    if sized is None:
        logger.warning("match_budget: the budget buys %s fewer calls than it takes; it keeps its options", m.label)
        return m.options
    return sized


@dataclass(frozen=True)
class _Comparison:
    """What every part of one comparison shares: its spec, MLflow parent run, directories, result and spend."""

    spec: ExperimentSpec
    parent: str
    run_dir: Path
    items_dir: Path
    out: ComparisonResult
    limit: SpendLimit


def _run_sequential(c: _Comparison, d: DatasetConfig) -> None:
    """Every method of the spec on dataset ``d`` at once, sequentially (:mod:`dspy_for.experiments.sequential`)."""
    spec, parent, run_dir, items_dir, out, limit = c.spec, c.parent, c.run_dir, c.items_dir, c.out, c.limit
    runs: dict[str, PreparedRun] = {}
    children: dict[str, str] = {}
    examples = None
    for m in spec.methods:
        run, child, err = prepare_tracked(spec, d, m, examples, parent, run_dir, items_dir, limit)
        if err:
            out.errors[d.name][m.label] = err
        elif run is not None and child is not None:
            runs[m.label], children[m.label], examples = run, child, run.examples
    if spec.baseline not in runs:
        for child in children.values():
            store.end_run(child, "FAILED")
        out.errors[d.name].setdefault(str(spec.baseline), "the baseline could not run: nothing to compare with")
        return
    status = "FAILED"
    results: dict[str, MethodResult] = {}
    try:
        results, outcomes = run_sequential(spec, runs, children, items_dir, limit)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        for label, child in children.items():
            failed = label in results and results[label].all_failed
            store.end_run(child, "FAILED" if failed and status == "FINISHED" else status)
    out.results[d.name] = results
    out.sequential += outcome_rows(outcomes)
    log_outcomes(parent, outcomes)


def prepare_tracked(
    spec: ExperimentSpec,
    d: DatasetConfig,
    m: MethodConfig,
    examples: Any,
    parent: str,
    run_dir: Path,
    items_dir: Path,
    limit: SpendLimit | None = None,
) -> tuple[PreparedRun | None, str | None, str | None]:
    """One method's prepared run and its nested MLflow run (params, dataset, program logged); or the error that
    kept it from running (its MLflow run then ended FAILED). ``limit``: the run's ``max_cost``, which a new compile's
    spend counts against; once it is reached no new compile starts and the method is left out (``(None, None,
    None)``, its items counted as not started, its MLflow run ended KILLED)."""
    tags = {"dspy_for.method": m.name, "dspy_for.dataset": d.name}
    child = store.start_run(f"{m.label} / {d.name}", spec.experiment, parent_id=parent, tags=tags)
    try:
        run = prepare_run(spec, d, m, examples=examples, compile_dir=items_dir / d.name / d.split, limit=limit)
        _log_run(run, child, run_dir)
    except CompileNotStarted as exc:  # max_cost was reached first: left out, as an item that did not start
        if limit is not None:
            limit.not_started += exc.items
        store.set_tags(child, {"dspy_for.not_started": str(exc)})
        store.end_run(child, "KILLED")
        logger.warning("%s on %s: %s", m.label, d.name, exc)
        return None, None, None
    except Exception as exc:  # the method could not run at all (a bad compile step, an LM that cannot be built)
        err = redact(f"{type(exc).__name__}: {exc}")
        store.set_tags(child, {"error": err})
        store.log_text(child, traceback.format_exc(), "error.txt")
        store.end_run(child, "FAILED")
        logger.error("method %s on %s failed: %s", m.label, d.name, err)
        return None, None, err
    return run, child, None


def _run_together(c: _Comparison, methods: list[MethodConfig], examples: dict[str, Any]) -> None:
    """``methods`` on every dataset, side by side on one pool of ``num_threads`` workers (each method × dataset a
    nested MLflow run streaming its items); ``examples`` keeps each dataset's items once loaded. With ``autolog``
    they run one after another, since mlflow.dspy.autolog traces into the one active run."""
    spec, parent, run_dir, items_dir, out, limit = c.spec, c.parent, c.run_dir, c.items_dir, c.out, c.limit
    runs: list[tuple[PreparedRun, str]] = []
    for d in spec.datasets:
        for m in methods:
            if spec.match_budget and get_method(m.name).sized is not None:
                m = with_options(m, _matched_budget(spec, out.results[d.name], m))
            run, child, err = prepare_tracked(spec, d, m, examples.get(d.name), parent, run_dir, items_dir, limit)
            if err:
                out.errors[d.name][m.label] = err
            elif run is not None and child is not None:
                runs.append((run, child))
                examples[d.name] = run.examples
    groups = [[r] for r in runs] if spec.autolog else [runs]
    for group in groups:
        with ExitStack() as stack:
            feeds = []
            for run, child in group:
                results = ResultStore.in_dir(items_dir, run.dataset.name, run.dataset.split, run.method.label, run.key)
                stack.enter_context(results.exclusive())
                ev = Evaluation(run, store=results, sinks=[MlflowSink(run, child, end_run=False)], origin=child)
                stack.callback(_end_child, ev, child)
                stack.enter_context(ev)
                feeds.append(Feed(ev, run.examples))
            if spec.autolog:
                stack.enter_context(store.active_run(group[0][1], True))  # autolog's DSPy traces go to the active run
            feed_together(feeds, num_threads=spec.num_threads, limit=limit)
        for feed in feeds:
            res, run = feed.evaluation.result, feed.evaluation.run
            out.results[run.dataset.name][run.method.label] = res
            for error, count in res.error_counts().most_common():
                logger.error("%s on %s: %d item(s) failed: %s", run.method.label, run.dataset.name, count, error)


def _end_child(ev: Evaluation, child: str) -> None:
    store.end_run(child, ev.status or "FAILED")


def _log_run(run: PreparedRun, run_id: str, run_dir: Path) -> None:
    """The method run's params, tags, dataset input and program (as prepared, compiled if it has a compile step)."""
    d, m = run.dataset, run.method
    params = {
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
    store.log_params(run_id, params)
    store.set_tags(run_id, {"dspy_for.label_using": str(run.uses_labels)})
    log_dataset(run, run_id=run_id)
    program_path = run_dir / d.name / f"{m.label}.program.json"
    program_path.parent.mkdir(parents=True, exist_ok=True)
    run.program.save(str(program_path))
    store.client().log_artifact(run_id, str(program_path))
